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

"""The traits a device's taints put on its providers."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.conductor import placement_sync
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from cyborg.domain import tolerations
from tests.unit.conductor.test_placement_sync import FakePlacement

FIRST = '0000:10:00.0'


@pytest.fixture
def fake_conf(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')


def _report(context, conf, taints=(), health='healthy'):
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    if taints:
        wire[0]['taints'] = list(taints)
    wire[0]['health'] = health
    inventory.apply_report(context, 'host1', 'host1.example', wire,
                           device_tree.tree_digest(wire), [])


def _provider_of(placement, address):
    name = 'host1_' + address.replace(':', '_').replace('.', '_')
    return next(p for p in placement.providers.values()
                if p['name'].startswith(name))


NO_SCHEDULE = {'key': 'gpu.xid', 'effect': 'NoSchedule', 'value': '79',
               'source': 'driver', 'reason': 'Xid 79'}


def test_a_scheduling_taint_is_a_trait_and_leaves_the_inventory_offered(
        database, admin_context, fake_conf):
    placement = FakePlacement()
    sync = placement_sync.PlacementSync(placement)
    _report(admin_context, fake_conf, [NO_SCHEDULE], health='unhealthy')
    assert sync.sync_host(admin_context, 'host1')
    provider = _provider_of(placement, FIRST)
    assert 'CUSTOM_TAINT_GPU_XID' in provider['traits']
    assert tolerations.value_trait_name('gpu.xid', '79') in provider[
        'traits']
    # Left to the trait: tolerating requests may still use it.
    assert provider['inventories']['FPGA']['reserved'] == 0
    assert ('trait', 'CUSTOM_TAINT_GPU_XID') in placement.calls
    other = _provider_of(placement, '0000:11:00.0')
    assert 'CUSTOM_TAINT_GPU_XID' not in other['traits']
    # The taint gone: its trait goes too.
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert not any(trait.startswith('CUSTOM_TAINT') for trait
                   in _provider_of(placement, FIRST)['traits'])


def test_an_informative_taint_puts_no_trait(database, admin_context,
                                            fake_conf):
    placement = FakePlacement()
    sync = placement_sync.PlacementSync(placement)
    _report(admin_context, fake_conf, [dict(NO_SCHEDULE, effect='None')])
    assert sync.sync_host(admin_context, 'host1')
    assert not any(trait.startswith('CUSTOM_TAINT_')
                   for trait in _provider_of(placement, FIRST)['traits'])


def test_unhealthy_without_taints_still_reserves_everything(
        database, admin_context, fake_conf):
    placement = FakePlacement()
    sync = placement_sync.PlacementSync(placement)
    _report(admin_context, fake_conf, health='unhealthy')
    assert sync.sync_host(admin_context, 'host1')
    inventory_ = _provider_of(placement, FIRST)['inventories']['FPGA']
    assert inventory_['reserved'] == inventory_['total']


def test_admin_taints_are_traits_too(database, admin_context, fake_conf):
    placement = FakePlacement()
    sync = placement_sync.PlacementSync(placement)
    _report(admin_context, fake_conf)
    with database.begin() as connection:
        device_id = connection.execute(sa.select(models.DEVICES.c.id).where(
            models.DEVICES.c.address == FIRST)).scalar()
        connection.execute(sa.insert(models.TAINTS).values(
            device_id=device_id, key='drain', value='', effect='NoExecute',
            source='admin', origin='0b5f4a4e-3c1d-4e2f-8a9b-0c1d2e3f4a5b'))
    assert sync.sync_host(admin_context, 'host1')
    assert 'CUSTOM_TAINT_DRAIN' in _provider_of(placement, FIRST)['traits']
