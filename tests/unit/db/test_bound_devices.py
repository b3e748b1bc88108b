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

"""Which devices of a host hold an accelerator request: those its agent
must not reset (conductor RPC ``bound_devices``)."""

import pytest

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.conductor import manager as conductor_manager
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.domain import device_tree
from cyborg.domain import providers

INSTANCE = '7d3c2b1a-0000-4000-8000-000000000001'


@pytest.fixture
def wire(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    yield device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')


def _apply(context, wire, host):
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])


def test_only_devices_holding_a_request_on_the_host(database, admin_context,
                                                    wire):
    _apply(admin_context, wire, 'host1')
    _apply(admin_context, wire, 'host2')
    first = wire[0]['address']
    assert hardware.bound_device_addresses(admin_context, 'host1') == []
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    arq = arq_db.arq_create(admin_context, 'one', 'p1')[0]
    binding_db.bind(admin_context, {arq['uuid']: {
        'hostname': 'host1', 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            'host1', first, wire[0]['deployables'][0]['name'])}},
        None, 'c1')
    assert hardware.bound_device_addresses(admin_context, 'host1') == [first]
    assert hardware.bound_device_addresses(admin_context, 'host2') == []
    manager = conductor_manager.ConductorManager('c1')
    assert manager.bound_devices(admin_context, 'host1') == [first]
    arq_db.arq_unbind(admin_context, [arq['uuid']], None)
    # Released: the handle is free again (its preparation undone).
    assert hardware.bound_device_addresses(admin_context, 'host1') == []
