"""What the conductor sends Placement for each kind of change."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.clients import placement as placement_client
from cyborg.conductor import inventory
from cyborg.conductor import placement_sync
from cyborg.db import hardware
from cyborg.db import models

COMPUTE_RP = 'c0ffee00-0000-4000-8000-000000000001'
STANDARD = {'FPGA', 'PGPU', 'OWNER_CYBORG'}


class FakePlacement:
    """Records calls; keeps providers with generations like Placement."""

    def __init__(self):
        self.calls = []
        self.providers = {}
        self.roots = {'host1.example': COMPUTE_RP}
        self.conflicts = 0
        self.unavailable = False
        self.in_use = set()

    def _call(self, *call):
        if self.unavailable:
            raise placement_client.PlacementUnavailable('down')
        self.calls.append(call)

    def find_provider_by_name(self, name):
        self._call('find', name)
        uuid = self.roots.get(name)
        return None if uuid is None else {'uuid': uuid, 'generation': 0}

    def get_provider(self, uuid):
        self._call('get', uuid)
        return self.providers.get(uuid)

    def create_provider(self, uuid, name, parent_uuid=None):
        self._call('create', uuid)
        if uuid in self.providers:
            raise placement_client.ProviderConflict('exists')
        self.providers[uuid] = {'uuid': uuid, 'name': name, 'generation': 0,
                                'parent': parent_uuid, 'inventories': {},
                                'traits': []}
        return self.providers[uuid]

    def _bump(self, uuid, generation, key, value):
        provider = self.providers[uuid]
        if self.conflicts:
            self.conflicts -= 1
            provider['generation'] += 1
            raise placement_client.GenerationConflict('conflict')
        assert provider['generation'] == generation
        provider[key] = value
        provider['generation'] += 1
        return provider['generation']

    def set_inventories(self, uuid, generation, inventories):
        self._call('inventories', uuid)
        return self._bump(uuid, generation, 'inventories', inventories)

    def set_traits(self, uuid, generation, traits):
        self._call('traits', uuid)
        return self._bump(uuid, generation, 'traits', traits)

    def delete_provider(self, uuid):
        self._call('delete', uuid)
        if uuid in self.in_use:
            raise placement_client.ProviderInUse('in use')
        return self.providers.pop(uuid, None) is not None

    def ensure_resource_class(self, name):
        if name not in STANDARD:
            self._call('rc', name)

    def ensure_trait(self, name):
        if name not in STANDARD:
            self._call('trait', name)

    def kinds(self):
        return [call[0] for call in self.calls]


@pytest.fixture
def fake_conf(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    conf.set_override('traits', ['CUSTOM_FAST'], group='fake_driver')
    yield conf
    for name in ('num_devices', 'traits', 'unhealthy_devices',
                 'accelerators_per_device'):
        conf.clear_override(name, group='fake_driver')


@pytest.fixture
def placement():
    return FakePlacement()


@pytest.fixture
def sync(placement):
    return placement_sync.PlacementSync(placement)


def _report(context, conf):
    wire = base.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(context, 'host1', 'host1.example', wire,
                           base.tree_digest(wire), [])


def test_first_sync_creates_everything_once(database, admin_context,
                                            fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == [
        'find', 'trait', 'create', 'inventories', 'traits',
        'create', 'inventories', 'traits']
    provider = next(iter(placement.providers.values()))
    assert provider['parent'] == COMPUTE_RP
    assert provider['name'].startswith('host1_0000_1')
    assert provider['traits'] == ['CUSTOM_FAST', 'OWNER_CYBORG']
    assert provider['inventories'] == {'FPGA': {
        'total': 4, 'reserved': 0, 'min_unit': 1, 'max_unit': 4,
        'step_size': 1, 'allocation_ratio': 1.0}}
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_nothing_is_sent_when_nothing_changed(database, admin_context,
                                             fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    assert sync.sync_host(admin_context, 'host1')
    assert placement.calls == []


def test_unhealthy_device_only_changes_its_inventory(
        database, admin_context, fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    fake_conf.set_override('unhealthy_devices', ['0000:10:00.0'],
                           group='fake_driver')
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['inventories']
    uuid = placement.calls[0][1]
    assert placement.providers[uuid]['inventories']['FPGA']['reserved'] == 4


def test_disabled_device_reserves_everything(database, admin_context,
                                             fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    device = hardware.device_list(admin_context, {})[0]
    hardware.device_set_status(admin_context, device['uuid'], 'maintaining')
    placement_sync.request_sync(admin_context, 'host1')
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['inventories']


def test_removed_device_removes_its_provider(database, admin_context,
                                            fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    fake_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['delete']
    assert len(placement.providers) == 1


def test_provider_in_use_is_retried_later(database, admin_context,
                                          fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.in_use = set(placement.providers)
    fake_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, fake_conf)
    assert not sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is True
    placement.in_use = set()
    assert sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_generation_conflicts_are_retried(database, admin_context,
                                          fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    placement.conflicts = 1
    fake_conf.set_override('accelerators_per_device', 6, group='fake_driver')
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    kinds = placement.kinds()
    assert kinds.count('get') == 1
    assert all(p['inventories']['FPGA']['total'] == 6
               for p in placement.providers.values())


def test_unavailable_placement_leaves_the_host_pending(
        database, admin_context, fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    placement.unavailable = True
    with pytest.raises(placement_client.PlacementUnavailable):
        sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is True
    placement.unavailable = False
    assert sync.sync_host(admin_context, 'host1')


def test_unknown_compute_node_creates_nothing(database, admin_context,
                                             fake_conf, placement, sync):
    placement.roots = {}
    _report(admin_context, fake_conf)
    assert not sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['find']
    assert placement_sync.hosts_pending_sync(admin_context) == ['host1']


def test_change_during_sync_stays_pending(database, admin_context,
                                          fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    real = placement.set_traits

    def report_meanwhile(*args):
        placement_sync.request_sync(admin_context, 'host1')
        placement.set_traits = real
        return real(*args)

    placement.set_traits = report_meanwhile
    assert sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is True


def test_custom_names_are_ensured_once(database, admin_context, fake_conf,
                                       placement, sync):
    fake_conf.set_override('resource_class', 'CUSTOM_ACCEL',
                           group='fake_driver')
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    assert placement.kinds().count('rc') == 1
    assert placement.kinds().count('trait') == 1
    fake_conf.clear_override('resource_class', group='fake_driver')


def test_inventory_record():
    assert placement_sync.inventory('FPGA', 0, True) == {}
    assert placement_sync.inventory('X', 2, False)['X']['reserved'] == 2


def test_missing_device_keeps_its_provider_but_reserves_it(
        database, admin_context, fake_conf, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    with database.begin() as connection:
        connection.execute(sa.update(models.Device.__table__).values(
            missing=True))
    state = placement_sync.load_host_state(admin_context, 'host1')
    assert len(state.desired) == 2
    for spec in state.desired.values():
        assert spec.inventories['FPGA']['reserved'] == 4


def test_provider_left_from_before_is_adopted(database, admin_context,
                                              fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    with database.begin() as connection:
        connection.execute(sa.delete(models.PlacementProvider.__table__))
    placement.calls.clear()
    placement_sync.request_sync(admin_context, 'host1')
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['create', 'get', 'inventories', 'traits'] * 2


def test_concurrent_syncs_never_lose_a_change(database, admin_context,
                                              fake_conf, placement, sync):
    """Two syncs that saw the same changes both finishing (in any order)
    leave a change made meanwhile pending."""
    _report(admin_context, fake_conf)
    state = placement_sync.load_host_state(admin_context, 'host1')
    placement_sync.request_sync(admin_context, 'host1')  # a later change
    placement_sync._mark_synced(admin_context, state.service_id,
                                state.sync_requested)
    placement_sync._mark_synced(admin_context, state.service_id,
                                state.sync_requested)
    assert inventory.report_state(admin_context, 'host1')[1] is True
    assert placement_sync.hosts_pending_sync(admin_context) == ['host1']
    assert sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is False
