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

"""Taint rules in the database, on each database: the admin taints a
rule writes, the ARQs a NoExecute rule marks, the dry run that writes
nothing, devices reported later, and deletion."""

import copy

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hosts as hosts_db
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import taint_rules as db
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit.db import statements as sql_statements

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
FIRST = '0000:10:00.0'
SECOND = '0000:11:00.0'


@pytest.fixture
def wire(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    yield device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')


def _apply(context, wire, host):
    return inventory.apply_report(context, host, host, wire,
                                  device_tree.tree_digest(wire), [])


@pytest.fixture
def hosts(database, admin_context, wire):
    """host1 and host2, each with the fake driver's two devices."""
    for host in ('host1', 'host2'):
        _apply(admin_context, wire, host)
    return database


def _rule(**values):
    base = {'name': 'drain', 'description': None,
            'selector': {'host': 'host1'}, 'key': 'example.drain',
            'value': 'v', 'effect': 'NoSchedule', 'reason': 'maintenance'}
    return dict(base, **values)


def _taints(engine) -> list[tuple]:
    with engine.connect() as connection:
        return sorted(connection.execute(sa.select(
            models.DEVICES.c.hostname, models.DEVICES.c.address,
            models.TAINTS.c.key, models.TAINTS.c.effect,
            models.TAINTS.c.source, models.TAINTS.c.origin).join(
            models.DEVICES,
            models.DEVICES.c.id == models.TAINTS.c.device_id)).all())


def _sync_requests(engine) -> dict[str, int]:
    with engine.connect() as connection:
        return dict(connection.execute(sa.select(
            models.SERVICES.c.host, models.SERVICES.c.sync_requested)).all())


def _marks(engine) -> list[tuple]:
    with engine.connect() as connection:
        return connection.execute(sa.select(
            models.ARQS.c.uuid, models.ARQS.c.taint_marked_at,
            models.ARQS.c.taint_marked_by)).all()


def _bind(context, wire, host='host1', address=FIRST) -> str:
    profiles_db.device_profile_create(context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    arq = arq_db.arq_create(context, 'one', 'p1')[0]
    [device] = [d for d in wire if d['address'] == address]
    binding_db.bind(context, {arq['uuid']: {
        'hostname': host, 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            host, address, device['deployables'][0]['name'])}},
        None, 'c1')
    return arq['uuid']


def test_a_rule_taints_every_selected_device_and_syncs_its_hosts(
        hosts, admin_context):
    before = _sync_requests(hosts)
    applied = db.rule_create(admin_context, _rule())
    uuid = applied.rule['uuid']
    assert applied.hosts == ['host1']
    assert applied.marked == []
    assert _taints(hosts) == [
        ('host1', FIRST, 'example.drain', 'NoSchedule', 'admin', uuid),
        ('host1', SECOND, 'example.drain', 'NoSchedule', 'admin', uuid)]
    after = _sync_requests(hosts)
    assert after['host1'] == before['host1'] + 1
    assert after['host2'] == before['host2']
    assert db.rule_get(admin_context, uuid)['selector'] == {'host': 'host1'}
    status = db.rule_status(admin_context, applied.rule)
    assert [(d['hostname'], d['address']) for d in status['devices']] == [
        ('host1', FIRST), ('host1', SECOND)]
    assert status['arqs'] == status['instances'] == status['projects'] == []


@pytest.mark.parametrize('selector, selected', [
    ({'host': 'host*', 'address': '*:11:*'},
     [('host1', SECOND), ('host2', SECOND)]),
    ({'vendor': '0xABCD', 'model': 'Fake Accelerator', 'host': 'host2'},
     [('host2', FIRST), ('host2', SECOND)]),
    ({'driver': 'other_driver'}, []),
    ({'attribute': {'rc': 'FPGA'}, 'address': FIRST},
     [('host1', FIRST), ('host2', FIRST)]),
    ({'attribute': {'rc': 'GPU'}}, []),
])
def test_selectors(hosts, admin_context, selector, selected):
    applied = db.rule_create(admin_context, _rule(selector=selector))
    assert sorted((d['hostname'], d['address'])
                  for d in applied.devices) == selected
    assert applied.hosts == sorted({host for host, _a in selected})
    assert [row[:2] for row in _taints(hosts)] == selected


def test_no_execute_marks_bound_arqs_and_delete_clears_them(
        hosts, admin_context, wire):
    arq = _bind(admin_context, wire)
    applied = db.rule_create(admin_context, _rule(
        effect='NoExecute', selector={'address': FIRST}))
    assert [(m['uuid'], m['instance_uuid'], m['project_id'], m['hostname'])
            for m in applied.marked] == [(arq, INSTANCE, 'p1', 'host1')]
    [(uuid, marked_at, marked_by)] = _marks(hosts)
    assert (uuid, marked_by) == (arq, 'example.drain')
    assert marked_at is not None
    status = db.rule_status(admin_context, applied.rule)
    assert (status['arqs'], status['instances'], status['projects']) == (
        [arq], [INSTANCE], ['p1'])
    before = _sync_requests(hosts)
    rule, synced = db.rule_delete(admin_context, applied.rule['uuid'])
    assert synced == ['host1', 'host2']
    assert _taints(hosts) == []
    assert _marks(hosts) == [(arq, None, None)]
    after = _sync_requests(hosts)
    assert after == {h: n + 1 for h, n in before.items()}
    with pytest.raises(exception.TaintRuleNotFound):
        db.rule_get(admin_context, rule['uuid'])


def test_a_mark_stays_while_another_no_execute_taint_of_its_key_holds(
        hosts, admin_context, wire):
    arq = _bind(admin_context, wire)
    one = db.rule_create(admin_context, _rule(
        effect='NoExecute', selector={'address': FIRST}))
    db.rule_create(admin_context, _rule(
        effect='NoExecute', selector={'host': 'host1'}))
    db.rule_delete(admin_context, one.rule['uuid'])
    [(uuid, marked_at, marked_by)] = _marks(hosts)
    assert (uuid, marked_by) == (arq, 'example.drain')


def test_a_dry_run_changes_nothing_and_tells_what_it_would_affect(
        hosts, admin_context, wire):
    arq = _bind(admin_context, wire)
    before = _sync_requests(hosts)
    applied = db.rule_create(admin_context, _rule(
        effect='None', selector={'host': 'host1', 'address': FIRST}))
    assert (applied.hosts, applied.devices, applied.marked) == ([], [], [])
    assert _taints(hosts) == []
    assert _marks(hosts) == [(arq, None, None)]
    assert _sync_requests(hosts) == before
    status = db.rule_status(admin_context, applied.rule)
    assert [(d['hostname'], d['address']) for d in status['devices']] == [
        ('host1', FIRST)]
    assert (status['arqs'], status['instances'], status['projects']) == (
        [arq], [INSTANCE], ['p1'])
    # Deleting it changes nothing either.
    assert db.rule_delete(admin_context, applied.rule['uuid'])[1] == []
    assert _sync_requests(hosts) == before


def test_devices_reported_later_get_the_taints_of_rules_selecting_them(
        hosts, admin_context, wire):
    db.rule_create(admin_context, _rule(selector={'host': 'host3'}))
    db.rule_create(admin_context, _rule(
        key='example.fpga', selector={'attribute': {'rc': 'FPGA'},
                                      'address': SECOND}))
    db.rule_create(admin_context, _rule(
        key='example.dry', effect='None', selector={'host': 'host3'}))
    _apply(admin_context, wire, 'host3')
    assert [row[:3] for row in _taints(hosts)
            if row[0] == 'host3'] == [
        ('host3', FIRST, 'example.drain'),
        ('host3', SECOND, 'example.drain'),
        ('host3', SECOND, 'example.fpga')]


def test_a_vanished_device_loses_its_taints_and_gets_them_back(
        hosts, admin_context, wire):
    db.rule_create(admin_context, _rule(selector={'address': FIRST}))
    _apply(admin_context, wire[1:], 'host1')
    assert [row[:2] for row in _taints(hosts)] == [('host2', FIRST)]
    _apply(admin_context, wire, 'host1')
    assert [row[:2] for row in _taints(hosts)] == [('host1', FIRST),
                                                   ('host2', FIRST)]


def _statements(engine, context, wire, host) -> int:
    with sql_statements.StatementCounter(engine) as statements:
        _apply(context, wire, host)
    return statements.count


def test_rules_cost_a_report_nothing_unless_it_adds_devices(
        hosts, admin_context, wire):
    changed = copy.deepcopy(wire)
    changed[0]['model'] = 'Other'
    without = _statements(hosts, admin_context, changed, 'host1')
    db.rule_create(admin_context, _rule(selector={'host': 'host*'}))
    changed[0]['model'] = 'Third'
    assert _statements(hosts, admin_context, changed, 'host2') == without
    # Unchanged: nothing past the digest.
    assert _apply(admin_context, changed, 'host2') is None


def test_unknown_rule(database, admin_context):
    with pytest.raises(exception.TaintRuleNotFound):
        db.rule_get(admin_context, '5b8e2d1c-7a4f-4c9e-b3d6-1e0f8a2c4b97')
    with pytest.raises(exception.TaintRuleNotFound):
        db.rule_delete(admin_context, '5b8e2d1c-7a4f-4c9e-b3d6-1e0f8a2c4b97')
    assert db.rule_list(admin_context) == []


def test_a_tainted_host_can_be_deleted(hosts, admin_context):
    db.rule_create(admin_context, _rule(selector={'host': 'host*'}))
    hosts_db.delete_host(admin_context, 'host1')
    assert [row[0] for row in _taints(hosts)] == ['host2', 'host2']


def test_a_rule_with_a_key_past_the_limit_is_refused_and_writes_nothing(
        hosts, admin_context, conf):
    conf.set_override('max_keys', 2, group='taints')
    db.rule_create(admin_context, _rule(key='a'))
    db.rule_create(admin_context, _rule(key='b'))
    # A key in use already takes no room; a dry run takes none either.
    db.rule_create(admin_context, _rule(key='a', selector={'host': 'host2'}))
    db.rule_create(admin_context, _rule(key='c', effect='None'))
    before = (db.rule_list(admin_context), _taints(hosts))
    with pytest.raises(exception.TaintKeyLimitReached) as error:
        db.rule_create(admin_context, _rule(key='c'))
    assert error.value.code == 409
    assert 'c would be one more than the 2' in str(error.value)
    assert (db.rule_list(admin_context), _taints(hosts)) == before
