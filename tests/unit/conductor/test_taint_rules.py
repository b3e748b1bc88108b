# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""The conductor's taint rule calls: validation, the sync of the hosts
concerned after the answer, and the NoExecute notification."""

import concurrent.futures

import oslo_messaging as messaging
import pytest

from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db import taint_rules as taint_rules_db
from cyborg.notifications import notifier as notifier_mod
from tests.unit.conductor.test_notifications import Recorder
from tests.unit.db.test_taint_rules import FIRST
from tests.unit.db.test_taint_rules import INSTANCE
from tests.unit.db.test_taint_rules import _bind
from tests.unit.db.test_taint_rules import _marks
from tests.unit.db.test_taint_rules import _rule
from tests.unit.db.test_taint_rules import _taints
from tests.unit.db.test_taint_rules import hosts  # noqa: F401
from tests.unit.db.test_taint_rules import wire  # noqa: F401


class Syncer:
    """The sync worker: the hosts handed to it."""

    def __init__(self):
        self.requested: list[str] = []

    def request(self, host: str) -> concurrent.futures.Future:
        self.requested.append(host)
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(False)
        return future


@pytest.fixture
def sent():
    return Recorder()


@pytest.fixture
def syncer():
    return Syncer()


@pytest.fixture
def conductor(sent, syncer):
    return conductor_manager.ConductorManager(
        'cond1', syncer=syncer, notifier=notifier_mod.Notifier(sent))


def test_no_execute_syncs_marks_and_names_instances_and_projects(
        conductor, sent, syncer, hosts, admin_context,  # noqa: F811
        wire):  # noqa: F811
    arq = _bind(admin_context, wire)
    rule = conductor.taint_rule_create(admin_context, _rule(
        effect='NoExecute', selector={'address': FIRST}))
    assert syncer.requested == ['host1', 'host2']
    [(event_type, data)] = sent.take()
    assert event_type == 'device_taint_rule.no_execute'
    assert (data['uuid'], data['key'], data['effect']) == (
        rule['uuid'], 'example.drain', 'NoExecute')
    assert [(d['hostname'], d['address']) for d in data['devices']] == [
        ('host1', FIRST), ('host2', FIRST)]
    assert [a['uuid'] for a in data['arqs']] == [arq]
    assert (data['instances'], data['projects']) == ([INSTANCE], ['p1'])
    assert isinstance(rule['created_at'], str)  # crosses any transport
    syncer.requested.clear()
    conductor.taint_rule_delete(admin_context, rule['uuid'])
    assert syncer.requested == ['host1', 'host2']
    assert _taints(hosts) == []
    assert _marks(hosts) == [(arq, None, None)]
    assert sent.take() == []


def test_no_schedule_and_dry_run_send_nothing(
        conductor, sent, syncer, hosts, admin_context):  # noqa: F811
    conductor.taint_rule_create(admin_context, _rule())
    assert syncer.requested == ['host1']
    syncer.requested.clear()
    conductor.taint_rule_create(admin_context, _rule(effect='None'))
    assert syncer.requested == []
    assert sent.take() == []


@pytest.mark.parametrize('values', [
    {'selector': {}}, {'selector': {'hostname': 'x'}}, {'key': 'Bad Key'},
    {'effect': 'Drain'}, {'value': 'x' * 256}, {'selector': None},
])
def test_invalid_rules_are_refused_and_change_nothing(
        conductor, syncer, database, admin_context, values):
    with pytest.raises(messaging.ExpectedException) as caught:
        conductor.taint_rule_create(admin_context, _rule(**values))
    assert isinstance(caught.value.exc_info[1], exception.Invalid)
    assert taint_rules_db.rule_list(admin_context) == []
    assert syncer.requested == []


def test_deleting_an_unknown_rule_is_not_found(conductor, database,
                                               admin_context):
    with pytest.raises(messaging.ExpectedException) as caught:
        conductor.taint_rule_delete(admin_context,
                                    '5b8e2d1c-7a4f-4c9e-b3d6-1e0f8a2c4b97')
    assert isinstance(caught.value.exc_info[1], exception.TaintRuleNotFound)
