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

"""Per-project limits at ARQ creation, with oslo.limit's LimitFixture as
Keystone."""

import io

from oslo_limit import fixture as limit_fixture
import oslo_messaging as messaging
from oslo_upgradecheck import upgradecheck
import pytest
import sqlalchemy as sa

from cyborg.cmd import manage
from cyborg.cmd import status
from cyborg.common import exception
from cyborg.common import limits as limits_mod
from cyborg.conductor import manager
from cyborg.conductor import quotas
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import models
from cyborg.db import quotas as quotas_db
from cyborg.domain import arq_states as states
from tests.unit import conftest


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def keystone_limits(conf):
    """Registered limits and project p1's; ``.fixture`` changes them."""
    conf.set_override('endpoint_id', 'cyborg-endpoint', group='oslo_limit')
    fixture = limit_fixture.LimitFixture(
        {'accelerator_requests': 10, 'class:FPGA': 3},
        {'p1': {'class:FPGA': 2}})
    fixture.setUp()
    yield fixture
    fixture.cleanUp()


@pytest.fixture
def profiles(database, admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'fpga', 'groups': [{'resources:FPGA': '1'}]})
    profiles_db.device_profile_create(admin_context, {
        'name': 'two', 'groups': [{'resources:FPGA': '2'}]})
    profiles_db.device_profile_create(admin_context, {
        'name': 'gpu', 'groups': [{'resources:PGPU': '1'}]})


def _quotas(conf, clock=None, strategy='require',
            listed=('accelerator_requests',)):
    conf.set_override('driver', 'unified_limits', group='quota')
    conf.set_override('unified_limits_resource_strategy', strategy,
                      group='quota')
    conf.set_override('unified_limits_resource_list', list(listed),
                      group='quota')
    check = quotas.from_conf(conf)
    if clock is not None:
        check.limits = limits_mod.KeystoneLimits(
            conf.quota.limit_cache_time, clock=clock)
    return check


def _conductor(check):
    return manager.ConductorManager('c1', quotas=check)


def _refused(conductor, context, profile):
    """The exception ``conductor.arq_create`` answers with."""
    with pytest.raises(messaging.ExpectedException) as caught:
        conductor.arq_create(context, profile)
    return caught.value.exc_info[1]


def test_noop_driver_checks_nothing(conf):
    assert conf.quota.driver == 'noop'
    assert quotas.from_conf(conf) is None


def test_create_within_the_project_limit_stores_what_each_arq_counts(
        conf, keystone_limits, profiles):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    created = conductor.arq_create(context, 'two')
    assert [arq['resources'] for arq in created] == ['{"FPGA": 1}'] * 2
    stored = arq_db.arq_list(context, 'p1')
    assert [arq['resources'] for arq in stored] == ['{"FPGA": 1}'] * 2
    assert quotas_db.usage(context, 'p1') == {
        'accelerator_requests': 2, 'class:FPGA': 2}


def test_create_past_a_limit_is_refused_with_the_numbers(
        conf, keystone_limits, profiles):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    conductor.arq_create(context, 'fpga')
    refused = _refused(conductor, context, 'two')
    assert isinstance(refused, exception.QuotaExceeded)
    assert refused.code == 403
    assert str(refused) == (
        'Quota exceeded for project p1: class:FPGA: limit 2, usage 1, '
        'requested 2')
    # Rolled back: nothing of the refused request stays.
    assert len(arq_db.arq_list(context, 'p1')) == 1
    # Another project has the registered limit (3).
    other = conftest.make_context(project_id='p2')
    assert len(conductor.arq_create(other, 'two')) == 2


def test_arqs_being_deleted_do_not_count(conf, keystone_limits, profiles,
                                         database):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    conductor.arq_create(context, 'two')
    with database.begin() as connection:
        connection.execute(sa.update(models.ARQS).values(
            state=states.DELETING))
    assert len(conductor.arq_create(context, 'two')) == 2


def test_older_arqs_count_from_their_profile_group(
        conf, keystone_limits, profiles, database):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    conductor.arq_create(context, 'two')
    with database.begin() as connection:
        connection.execute(sa.update(models.ARQS).values(resources=None))
    assert quotas_db.usage(context, 'p1') == {
        'accelerator_requests': 2, 'class:FPGA': 2}
    assert isinstance(_refused(conductor, context, 'fpga'),
                      exception.QuotaExceeded)


def test_unregistered_resource_follows_the_strategy(
        conf, keystone_limits, profiles):
    context = conftest.make_context(project_id='p1')
    # require, class:PGPU not listed: no registered limit, unlimited.
    assert _conductor(_quotas(conf)).arq_create(context, 'gpu')
    # require, listed: a missing limit is 0.
    refused = _refused(_conductor(_quotas(conf, listed=['class:PGPU'])),
                       context, 'gpu')
    assert 'class:PGPU: limit 0, usage 1, requested 1' in str(refused)
    # ignore, not listed: 0 as well.
    refused = _refused(_conductor(_quotas(conf, strategy='ignore')),
                       context, 'gpu')
    assert 'class:PGPU: limit 0' in str(refused)
    # ignore, listed: unlimited.
    assert _conductor(_quotas(conf, strategy='ignore',
                              listed=['class:PGPU'])).arq_create(
        context, 'gpu')


def test_minus_one_is_unlimited(conf, keystone_limits, profiles):
    keystone_limits.projlimits['p1'] = {'class:FPGA': -1}
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    for _ in range(3):
        conductor.arq_create(context, 'two')
    assert quotas_db.usage(context, 'p1')['class:FPGA'] == 6


def test_limits_changed_in_keystone_apply_after_the_cache_time(
        conf, keystone_limits, profiles):
    conf.set_override('limit_cache_time', 30, group='quota')
    clock = Clock()
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf, clock=clock))
    conductor.arq_create(context, 'two')
    keystone_limits.projlimits['p1'] = {'class:FPGA': 5}
    clock.now += 29
    assert 'limit 2' in str(_refused(conductor, context, 'fpga'))
    clock.now += 1
    assert conductor.arq_create(context, 'fpga')


def test_cached_limits_make_no_keystone_call(conf, keystone_limits,
                                             profiles):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    conductor.arq_create(context, 'fpga')
    calls = len(keystone_limits.mock_conn.mock_calls)
    conductor.arq_create(context, 'fpga')
    assert len(keystone_limits.mock_conn.mock_calls) == calls


def test_keystone_unreachable_is_a_503_and_creates_nothing(
        conf, keystone_limits, profiles):
    keystone_limits.mock_conn.registered_limits.side_effect = ValueError(
        'Endpoint not found')
    context = conftest.make_context(project_id='p1')
    refused = _refused(_conductor(_quotas(conf)), context, 'fpga')
    assert isinstance(refused, exception.QuotaUnavailable)
    assert refused.code == 503
    assert arq_db.arq_list(context, 'p1') == []


def test_first_creations_of_a_project_add_its_quota_row_once(
        conf, keystone_limits, profiles, database):
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    conductor.arq_create(context, 'fpga')
    conductor.arq_create(context, 'fpga')
    quotas_db.add_project(context, 'p1')
    with database.connect() as connection:
        assert connection.execute(
            sa.select(models.QUOTA_LOCKS.c.project_id)).all() == [('p1',)]


def test_the_quota_lock_comes_after_the_limits_and_the_insert(
        conf, keystone_limits, profiles, monkeypatch):
    """Creations of a project wait for each other only for the count and
    the commit: when the lock is taken, the limits were read and the
    creation's ARQs are in its transaction."""
    context = conftest.make_context(project_id='p1')
    conductor = _conductor(_quotas(conf))
    seen = []
    lock_project = quotas_db.lock_project

    def lock(connection, project_id):
        seen.append((
            connection.execute(sa.select(sa.func.count()).where(
                models.ARQS.c.project_id == project_id)).scalar(),
            len(keystone_limits.mock_conn.mock_calls)))
        return lock_project(connection, project_id)
    monkeypatch.setattr(quotas_db, 'lock_project', lock)
    conductor.arq_create(context, 'two')
    calls = len(keystone_limits.mock_conn.mock_calls)
    # Once without the project's row (added, then the creation again).
    assert seen[-1] == (2, calls)
    assert quotas_db.usage(context, 'p1')['class:FPGA'] == 2


def test_a_creation_without_a_limit_takes_no_lock(
        conf, keystone_limits, profiles, database, monkeypatch):
    keystone_limits.projlimits['p1'] = {'class:FPGA': -1,
                                        'accelerator_requests': -1}
    context = conftest.make_context(project_id='p1')

    def lock(connection, project_id):
        raise AssertionError('locked %s' % project_id)
    monkeypatch.setattr(quotas_db, 'lock_project', lock)
    assert len(_conductor(_quotas(conf)).arq_create(context, 'two')) == 2
    with database.connect() as connection:
        assert connection.execute(
            sa.select(models.QUOTA_LOCKS.c.project_id)).all() == []


def test_limits_check_lists_resources_without_a_registered_limit(
        conf, keystone_limits, profiles, admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'mixed', 'groups': [{'resources:PGPU': '1'},
                                    {'resources:FPGA': '1'},
                                    {'resources:CUSTOM_X': '1'}]})
    missing = quotas.unregistered_limits(admin_context, conf)
    assert missing == [('class:CUSTOM_X', ['mixed'], False),
                       ('class:PGPU', ['gpu', 'mixed'], False)]
    out = io.StringIO()
    assert manage.limits_check_command(admin_context, conf, out=out) == 1
    assert out.getvalue().splitlines() == [
        'class:CUSTOM_X (device profiles mixed): unlimited',
        'class:PGPU (device profiles gpu, mixed): unlimited']
    # Under ignore, a resource not listed without a limit is refused.
    conf.set_override('unified_limits_resource_strategy', 'ignore',
                      group='quota')
    assert quotas.describe_unregistered(
        quotas.unregistered_limits(admin_context, conf))[0] == (
        'class:CUSTOM_X (device profiles mixed): limit 0, every request '
        'is refused')
    keystone_limits.reglimits.update({'class:PGPU': 1, 'class:CUSTOM_X': 1})
    out = io.StringIO()
    assert manage.limits_check_command(admin_context, conf, out=out) == 0
    assert 'Every resource' in out.getvalue()


def test_limits_check_names_accelerator_requests_when_unregistered(
        conf, keystone_limits, profiles, admin_context):
    del keystone_limits.reglimits['accelerator_requests']
    assert quotas.describe_unregistered(
        quotas.unregistered_limits(admin_context, conf))[0] == (
        'accelerator_requests (every accelerator request): limit 0, every '
        'request is refused')


def test_limits_check_refused_when_keystone_cannot_be_read(
        conf, keystone_limits, profiles, admin_context):
    keystone_limits.mock_conn.registered_limits.side_effect = ValueError(
        'Endpoint not found')
    with pytest.raises(manage.Refused, match='could not be read'):
        manage.limits_check_command(admin_context, conf)


def test_upgrade_check_of_limits(conf, keystone_limits, profiles,
                                 admin_context):
    checks = status.Checks()
    result = checks._check_limits()
    assert result.code == upgradecheck.Code.SUCCESS
    assert 'off' in result.details
    conf.set_override('driver', 'unified_limits', group='quota')
    result = checks._check_limits()
    assert result.code == upgradecheck.Code.WARNING
    assert 'class:PGPU (device profiles gpu): unlimited' in result.details
    keystone_limits.reglimits['class:PGPU'] = 4
    assert checks._check_limits().code == upgradecheck.Code.SUCCESS
    keystone_limits.mock_conn.registered_limits.side_effect = ValueError(
        'Endpoint not found')
    assert checks._check_limits().code == upgradecheck.Code.FAILURE
