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

"""Device taints in the database: a report's driver taints, the key
limit, the effective and active taints, the device states graded for
accelerator requests; on each database."""

import datetime

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.db import hosts
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import providers as providers_db
from cyborg.db import taints as taints_db
from cyborg.domain import device_tree
from cyborg.domain import taints as taint_rules

T0 = datetime.datetime(2026, 3, 1, 10, 0, 0)
T1 = T0 + datetime.timedelta(minutes=5)
T2 = T0 + datetime.timedelta(minutes=10)


@pytest.fixture
def fake_conf(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('max_keys', group='taints')


@pytest.fixture
def clock():
    yield timeutils.set_time_override
    timeutils.clear_time_override()


def _wire(conf, taints=None):
    """The fake driver's tree, with ``taints`` ({device index: [wire
    taint]})."""
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    for index, found in (taints or {}).items():
        wire[index]['taints'] = found
    return wire


def _apply(context, wire, host='host1', limit=None):
    return inventory.apply_report(context, host, host, wire,
                                  device_tree.tree_digest(wire), [],
                                  max_taint_keys=limit)


def _taint(key, effect='NoSchedule', value='', reason=''):
    return {'key': key, 'effect': effect, 'value': value,
            'source': 'driver', 'reason': reason}


def _rows(engine):
    """{(address, key): (value, effect, source, origin, reason,
    created_at)}."""
    with engine.connect() as connection:
        return {(row.address, row.key): (row.value, row.effect, row.source,
                                         row.origin, row.reason,
                                         row.created_at)
                for row in connection.execute(sa.select(
                    models.DEVICES.c.address, models.TAINTS).join(
                    models.DEVICES,
                    models.DEVICES.c.id == models.TAINTS.c.device_id))}


def _device_ids(engine):
    with engine.connect() as connection:
        return dict(connection.execute(sa.select(
            models.DEVICES.c.address, models.DEVICES.c.id)).all())


def _add_admin_taint(engine, device_id, key, effect='NoSchedule',
                     value='', when=T0):
    """An admin row as a taint rule writes it (its own SQL lives with
    the rules)."""
    with engine.begin() as connection:
        connection.execute(sa.insert(models.TAINTS).values(
            device_id=device_id, key=key, value=value, effect=effect,
            source='admin', origin='0b5f4a4e-3c1d-4e2f-8a9b-0c1d2e3f4a5b',
            created_at=when))


def test_a_report_stores_its_driver_taints(database, admin_context,
                                           fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf, {0: [_taint('gpu.xid', 'None', '31', 'Xid 31'),
                                 _taint('gpu.aer')]})
    first = wire[0]['address']
    summary = _apply(admin_context, wire)
    assert summary.added == 2
    assert _rows(database) == {
        (first, 'gpu.aer'): ('', 'NoSchedule', 'driver', 'driver', None, T0),
        (first, 'gpu.xid'): ('31', 'None', 'driver', 'driver', 'Xid 31',
                             T0)}


def test_taints_alone_change_a_device_and_keep_their_time(
        database, admin_context, fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf, {0: [_taint('gpu.xid', 'NoSchedule', '31'),
                                 _taint('gpu.link', 'None', 'x8')]})
    first = wire[0]['address']
    _apply(admin_context, wire)
    clock(T1)
    # A reason and a scheduling effect change in place; a key is added.
    summary = _apply(admin_context, _wire(fake_conf, {0: [
        _taint('gpu.xid', 'NoExecute', '31', 'again'),
        _taint('gpu.link', 'None', 'x8', 'narrow'), _taint('gpu.aer')]}))
    assert summary.updated == 1
    rows = _rows(database)
    assert rows[(first, 'gpu.xid')] == ('31', 'NoExecute', 'driver',
                                        'driver', 'again', T0)
    assert rows[(first, 'gpu.link')][4:] == ('narrow', T0)
    assert rows[(first, 'gpu.aer')][5] == T1
    # A new value, or an effect that starts keeping allocations off, is
    # a new taint to Placement: added again.
    clock(T2)
    _apply(admin_context, _wire(fake_conf, {0: [
        _taint('gpu.xid', 'NoExecute', '43', 'again'),
        _taint('gpu.link', 'NoSchedule', 'x8', 'narrow'),
        _taint('gpu.aer')]}))
    rows = _rows(database)
    assert rows[(first, 'gpu.xid')][0] == '43'
    assert rows[(first, 'gpu.xid')][5] == T2
    assert rows[(first, 'gpu.link')][5] == T2
    assert rows[(first, 'gpu.aer')][5] == T1
    # Gone from the report: gone from the database.
    assert _apply(admin_context, _wire(fake_conf)).updated == 1
    assert _rows(database) == {}


def test_an_agent_cannot_report_admin_taints_and_bad_ones_are_left_out(
        database, admin_context, fake_conf):
    wire = _wire(fake_conf, {0: [dict(_taint('gpu.xid'), source='admin'),
                                 _taint('Bad Key'),
                                 {'effect': 'NoSchedule'}]})
    _apply(admin_context, wire)
    assert [(key, row[2], row[3]) for (_a, key), row
            in _rows(database).items()] == [('gpu.xid', 'driver', 'driver')]


def test_keys_over_the_limit_become_the_unhealthy_taint(
        database, admin_context, fake_conf):
    wire = _wire(fake_conf, {0: [_taint('a.one')],
                             1: [_taint('a.two'), _taint('a.three', 'None')]})
    first, second = wire[0]['address'], wire[1]['address']
    _apply(admin_context, wire, limit=2)
    rows = _rows(database)
    # Sorted, the first new keys fit: a.one and a.three.
    assert set(rows) == {(first, 'a.one'), (second, 'a.three'),
                         (second, taint_rules.UNHEALTHY_KEY)}
    unhealthy = rows[(second, taint_rules.UNHEALTHY_KEY)]
    assert unhealthy[1] == 'NoSchedule'
    assert 'a.two over the limit of 2 keys' in unhealthy[4]


def test_the_limit_is_read_from_the_configuration(database, admin_context,
                                                  fake_conf):
    fake_conf.set_override('max_keys', 1, group='taints')
    _apply(admin_context, _wire(fake_conf, {0: [_taint('a.one'),
                                                _taint('a.two')]}))
    assert {key for _a, key in _rows(database)} == {
        'a.one', taint_rules.UNHEALTHY_KEY}


def test_keys_over_limit_counts_every_row(database):
    with database.begin() as connection:
        assert taints_db.keys_over_limit(connection, [], 0) == []
        assert taints_db.keys_over_limit(connection, ['b', 'a'], 1) == ['b']


def test_a_removed_device_takes_its_driver_and_admin_taints(
        database, admin_context, fake_conf):
    wire = _wire(fake_conf, {0: [_taint('gpu.xid')]})
    _apply(admin_context, wire)
    _add_admin_taint(database, _device_ids(database)[wire[0]['address']],
                     'drain')
    _apply(admin_context, wire[1:])
    assert _rows(database) == {}


def test_a_deleted_host_takes_its_taints(database, admin_context,
                                         fake_conf):
    wire = _wire(fake_conf, {0: [_taint('gpu.xid')]})
    _apply(admin_context, wire)
    _add_admin_taint(database, _device_ids(database)[wire[1]['address']],
                     'drain')
    assert hosts.delete_host(admin_context, 'host1')['devices'] == 2
    assert _rows(database) == {}


def test_effective_taints_are_driver_and_admin_rows(
        database, admin_context, fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf, {0: [_taint('gpu.xid', reason='Xid 79')]})
    _apply(admin_context, wire)
    ids = _device_ids(database)
    first, second = ids[wire[0]['address']], ids[wire[1]['address']]
    _add_admin_taint(database, first, 'drain', 'NoExecute', when=T1)
    found = taints_db.effective_taints(admin_context, [first, second])
    assert found == {first: [
        taint_rules.Taint('drain', 'NoExecute', source='admin', added_at=T1),
        taint_rules.Taint('gpu.xid', 'NoSchedule', reason='Xid 79',
                          added_at=T0)]}
    assert taints_db.effective_taints(admin_context, []) == {}


def _record_sync(context, host, when):
    """Record every provider of ``host`` as written at ``when``."""
    rows = providers_db.host_rows(context, host)
    timeutils.set_time_override(when)
    providers_db.save_sync(context, rows.service.id,
                           providers_db.SyncRecord(providers=[
                               dict(uuid=row.rp_uuid, host=host,
                                    name=row.name, parent_uuid='compute',
                                    generation=1, inventory_hash='i',
                                    traits_hash='t', adopted=False)
                               for row in rows.deployables]))


def test_active_taints_are_scheduling_ones_already_in_placement(
        database, admin_context, fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf, {0: [_taint('gpu.xid', 'None'),
                                 _taint('gpu.aer', value='fatal')],
                             1: [_taint('gpu.aer', 'NoExecute', 'link')]})
    _apply(admin_context, wire)
    # No provider written since: nothing Placement would know of.
    assert taints_db.active_scheduling_taints(admin_context) == {}
    _record_sync(admin_context, 'host1', T1)
    assert taints_db.active_scheduling_taints(admin_context) == {
        'gpu.aer': frozenset({'fatal', 'link'})}
    assert taints_db.active_scheduling_keys(admin_context) == {'gpu.aer'}
    # A taint added after the last sync waits for the next one.
    _add_admin_taint(database, _device_ids(database)[wire[0]['address']],
                     'drain', when=T2)
    assert 'drain' not in taints_db.active_scheduling_keys(admin_context)
    _record_sync(admin_context, 'host1', T2 + datetime.timedelta(seconds=1))
    assert 'drain' in taints_db.active_scheduling_keys(admin_context)


def test_device_states_read_health_taints_and_the_agent(
        database, admin_context, fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf, {0: [_taint('gpu.xid', 'None', reason='31')]})
    _apply(admin_context, wire)
    with database.connect() as connection:
        deployables = dict(connection.execute(sa.select(
            models.DEPLOYABLES.c.device_id, models.DEPLOYABLES.c.id)).all())
    ids = _device_ids(database)
    first = deployables[ids[wire[0]['address']]]
    second = deployables[ids[wire[1]['address']]]
    states = taints_db.device_states(admin_context, [first, second])
    assert states[first].agent_seen == T0
    assert states[first].health == 'healthy'
    assert [t.key for t in states[first].taints] == ['gpu.xid']
    assert states[second].taints == ()
    assert taints_db.device_states(admin_context, []) == {}
