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

"""Devices read with who holds them (their deployables and the ARQs
holding their attach handles), on each database: one more statement for
a whole list."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit.db import statements as sql_statements

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'


@pytest.fixture
def fake_conf(conf):
    conf.set_override('accelerators_per_device', 2, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('accelerators_per_device', group='fake_driver')
    conf.clear_override('children_per_device', group='fake_driver')


def _report(context, conf, host: str, devices: int) -> list[dict]:
    conf.set_override('num_devices', devices, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])
    return wire


def _bind(context, host: str, device: dict, project: str, count: int = 1
          ) -> list[str]:
    """Bind ``count`` ARQs of ``project`` to the first deployable of
    ``device``; their uuids."""
    name = 'dp-%s-%s' % (host, project)
    profiles_db.device_profile_create(context, {
        'name': name, 'groups': [{'resources:FPGA': '1'}] * count})
    arqs = arq_db.arq_create(context, name, project)
    rp = providers.provider_uuid(host, device['address'],
                                 device['deployables'][0]['name'])
    binding_db.bind(context, {arq['uuid']: {
        'hostname': host, 'instance_uuid': INSTANCE, 'device_rp_uuid': rp}
        for arq in arqs}, None, 'c1')
    return [arq['uuid'] for arq in arqs]


def test_a_device_shows_who_holds_its_deployables(
        database, admin_context, fake_conf):
    wire = _report(admin_context, fake_conf, 'host1', 2)
    held = _bind(admin_context, 'host1', wire[0], 'p1', count=2)
    by_address = {d['address']: d for d in hardware.device_list(
        admin_context, {}, allocations=True)}
    states = {arq['uuid']: arq['state']
              for arq in arq_db.arq_list(admin_context, None)}
    [deployable] = by_address[wire[0]['address']]['deployables']
    assert deployable['name'] == wire[0]['deployables'][0]['name']
    assert deployable['num_accelerators'] == 2
    assert deployable['parent_uuid'] is None
    assert deployable['allocations'] == [
        {'uuid': uuid, 'state': states[uuid], 'instance_uuid': INSTANCE,
         'project_id': 'p1'} for uuid in held]
    [free] = by_address[wire[1]['address']]['deployables']
    assert free['allocations'] == []
    device = hardware.device_get(admin_context,
                                 by_address[wire[0]['address']]['uuid'],
                                 allocations=True)
    assert device['deployables'] == [deployable]


def test_without_allocations_nothing_more_is_read(
        database, admin_context, fake_conf):
    wire = _report(admin_context, fake_conf, 'host1', 1)
    _bind(admin_context, 'host1', wire[0], 'p1')
    [device] = hardware.device_list(admin_context, {})
    assert 'deployables' not in device
    assert 'deployables' not in hardware.device_get(admin_context,
                                                    device['uuid'])


def test_children_name_their_parent(database, admin_context, fake_conf):
    fake_conf.set_override('children_per_device', 2, group='fake_driver')
    _report(admin_context, fake_conf, 'host1', 1)
    [device] = hardware.device_list(admin_context, {}, allocations=True)
    parent, *children = device['deployables']
    assert parent['parent_uuid'] is None
    assert len(children) == 2
    assert {child['parent_uuid'] for child in children} == {parent['uuid']}


def test_a_device_without_deployables_has_none(
        database, admin_context, fake_conf):
    _report(admin_context, fake_conf, 'host1', 1)
    [device] = hardware.device_list(admin_context, {})
    with database.begin() as connection:
        connection.execute(sa.text(
            'DELETE FROM attach_handles'))
        connection.execute(sa.text('DELETE FROM attributes'))
        connection.execute(sa.text('DELETE FROM deployables'))
    assert hardware.device_get(admin_context, device['uuid'],
                               allocations=True)['deployables'] == []
    assert hardware.device_list(admin_context, {'hostname': 'nowhere'},
                                allocations=True) == []




def _list_statements(engine, context, host: str) -> int:
    with sql_statements.StatementCounter(engine) as statements:
        devices = hardware.device_list(context, {'hostname': host},
                                       allocations=True)
    assert all(device['deployables'] for device in devices)
    return statements.count


def test_the_list_costs_the_same_statements_for_1_and_10_devices(
        database, admin_context, fake_conf):
    for host, devices in (('one', 1), ('ten', 10)):
        wire = _report(admin_context, fake_conf, host, devices)
        # Every device of 'ten' held, by ARQs of several projects.
        for index, device in enumerate(wire):
            _bind(admin_context, host, device, 'p%d' % index)
    one = _list_statements(database, admin_context, 'one')
    ten = _list_statements(database, admin_context, 'ten')
    assert one == ten
    with sql_statements.StatementCounter(database) as plain:
        hardware.device_list(admin_context, {'hostname': 'ten'})
    # The allocations of the whole page: one statement.
    assert ten == plain.count + 1
