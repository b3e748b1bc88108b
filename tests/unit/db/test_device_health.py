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

"""Why a device has its health, and since when: stamped by the report
that adds the device or changes its health or presence, in the
statements the diff runs anyway; on each database."""

import datetime

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from cyborg.domain import devices as rules
from cyborg.domain import providers
from tests.unit.db import statements as sql_statements

T0 = datetime.datetime(2026, 3, 1, 10, 0, 0)
T1 = T0 + datetime.timedelta(minutes=5)
T2 = T0 + datetime.timedelta(minutes=10)
T3 = T0 + datetime.timedelta(minutes=15)
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'


@pytest.fixture
def fake_conf(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('unhealthy_devices', group='fake_driver')
    conf.clear_override('accelerators_per_device', group='fake_driver')


@pytest.fixture
def clock():
    """Sets the time utcnow() answers."""
    def set_to(when):
        timeutils.set_time_override(when)
    yield set_to
    timeutils.clear_time_override()


def _wire(conf):
    return device_tree.tree_to_wire(fake.FakeDriver(conf).discover())


def _apply(context, wire, host='host1'):
    return inventory.apply_report(context, host, host, wire,
                                  device_tree.tree_digest(wire), [])


def _stamps(engine, host='host1'):
    """{address: (health, missing, health_reason, health_since)}."""
    devices = models.DEVICES
    with engine.connect() as connection:
        return {row.address: (row.health, row.missing, row.health_reason,
                              row.health_since)
                for row in connection.execute(sa.select(
                    devices.c.address, devices.c.health, devices.c.missing,
                    devices.c.health_reason, devices.c.health_since).where(
                    devices.c.hostname == host))}


def test_a_new_device_is_stamped_with_its_health(
        database, admin_context, fake_conf, clock):
    first, second = [d['address'] for d in _wire(fake_conf)]
    fake_conf.set_override('unhealthy_devices', [second],
                           group='fake_driver')
    clock(T0)
    _apply(admin_context, _wire(fake_conf))
    assert _stamps(database) == {
        first: ('healthy', False, rules.REASON_DISCOVERED, T0),
        second: ('unhealthy', False, rules.REASON_UNHEALTHY, T0)}


def test_a_health_change_is_stamped_and_other_changes_keep_the_stamp(
        database, admin_context, fake_conf, clock):
    first, second = [d['address'] for d in _wire(fake_conf)]
    clock(T0)
    _apply(admin_context, _wire(fake_conf))
    fake_conf.set_override('unhealthy_devices', [first],
                           group='fake_driver')
    clock(T1)
    _apply(admin_context, _wire(fake_conf))
    assert _stamps(database) == {
        first: ('unhealthy', False, rules.REASON_UNHEALTHY, T1),
        second: ('healthy', False, rules.REASON_DISCOVERED, T0)}
    # A change of something else keeps the stamps.
    fake_conf.set_override('accelerators_per_device', 2,
                           group='fake_driver')
    clock(T2)
    assert _apply(admin_context, _wire(fake_conf)).updated == 2
    assert _stamps(database)[first][2:] == (rules.REASON_UNHEALTHY, T1)
    fake_conf.set_override('unhealthy_devices', [], group='fake_driver')
    clock(T3)
    _apply(admin_context, _wire(fake_conf))
    assert _stamps(database)[first] == ('healthy', False,
                                        rules.REASON_RECOVERED, T3)


def _bind_first_device(context, wire):
    profiles_db.device_profile_create(context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    arq = arq_db.arq_create(context, 'one', 'p1')[0]
    binding_db.bind(context, {arq['uuid']: {
        'hostname': 'host1', 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            'host1', wire[0]['address'], wire[0]['deployables'][0]['name'])}},
        None, 'c1')


def test_vanishing_while_in_use_and_coming_back_are_stamped(
        database, admin_context, fake_conf, clock):
    clock(T0)
    wire = _wire(fake_conf)
    _apply(admin_context, wire)
    _bind_first_device(admin_context, wire)
    first = wire[0]['address']
    clock(T1)
    summary = _apply(admin_context, wire[1:])
    assert summary.kept_missing == 1
    assert _stamps(database)[first] == ('healthy', True,
                                        rules.REASON_VANISHED, T1)
    # Still missing in the next changed report: the stamp stays.
    fake_conf.set_override('accelerators_per_device', 2,
                           group='fake_driver')
    clock(T2)
    _apply(admin_context, _wire(fake_conf)[1:])
    assert _stamps(database)[first][2:] == (rules.REASON_VANISHED, T1)
    clock(T3)
    _apply(admin_context, _wire(fake_conf))
    assert _stamps(database)[first] == ('healthy', False,
                                        rules.REASON_REAPPEARED, T3)




def _statements(engine, context, wire, host) -> int:
    with sql_statements.StatementCounter(engine) as statements:
        _apply(context, wire, host)
    return statements.count


def test_stamping_costs_no_statement(database, admin_context, fake_conf):
    """A report that changes its devices' health runs as many statements
    as one that changes their model (one UPDATE of each row)."""
    wire = _wire(fake_conf)
    for host in ('health', 'model'):
        _apply(admin_context, wire, host)
    # Both devices change, in both reports.
    fake_conf.set_override('unhealthy_devices',
                           [device['address'] for device in wire],
                           group='fake_driver')
    health = _statements(database, admin_context, _wire(fake_conf),
                         'health')
    fake_conf.set_override('unhealthy_devices', [], group='fake_driver')
    fake_conf.set_override('model', 'Other', group='fake_driver')
    try:
        model = _statements(database, admin_context, _wire(fake_conf),
                            'model')
        # Unchanged: the digest is compared before any diff.
        assert _apply(admin_context, _wire(fake_conf), 'model') is None
    finally:
        fake_conf.clear_override('model', group='fake_driver')
    assert health == model
    assert _stamps(database, 'health')[wire[0]['address']][2] == (
        rules.REASON_UNHEALTHY)


def test_disable_and_enable_keep_the_health_stamp(
        database, admin_context, fake_conf, clock):
    clock(T0)
    _apply(admin_context, _wire(fake_conf))
    before = _stamps(database)
    [uuid] = [d['uuid'] for d in hardware.device_list(admin_context, {})][:1]
    clock(T1)
    hardware.device_set_status(admin_context, uuid, 'maintaining')
    hardware.device_set_status(admin_context, uuid, 'enabled')
    assert _stamps(database) == before
