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

"""What the conductor sends Placement for each kind of change."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import providers as providers_db
from cyborg.db import services as services_db
from cyborg.domain import device_tree

COMPUTE_RP = 'c0ffee00-0000-4000-8000-000000000001'
STANDARD = {'FPGA', 'PGPU', 'OWNER_CYBORG'}


class FakePlacement:
    """Records calls; keeps providers with generations like Placement.

    ``reshaper`` is what ``POST /reshaper`` answers: None (it works), or
    the exception it raises every time (e.g. Forbidden when the policy
    does not allow it).
    """

    def __init__(self):
        self.calls = []
        self.providers = {}
        self.roots = {'host1.example': COMPUTE_RP}
        self.conflicts = 0
        self.unavailable = False
        self.in_use = set()
        self.reshaper = None

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
        if self.conflicts:  # a concurrent writer got there first
            self.conflicts -= 1
            provider['generation'] += 1
        if provider['generation'] != generation:
            raise placement_client.GenerationConflict('conflict')
        provider[key] = value
        provider['generation'] += 1
        return provider['generation']

    def get_inventories(self, uuid):
        self._call('get_inventories', uuid)
        provider = self.providers[uuid]
        return provider['generation'], provider['inventories']

    def set_inventories(self, uuid, generation, inventories):
        self._call('inventories', uuid)
        return self._bump(uuid, generation, 'inventories', inventories)

    def set_traits(self, uuid, generation, traits):
        self._call('traits', uuid)
        return self._bump(uuid, generation, 'traits', traits)

    def reshape_inventories(self, providers):
        """Placement's reshaper without allocations: checks every
        generation first, then replaces every inventory, or nothing.

        Like Placement, bumps a generation twice (interim and final
        inventory), once for an empty inventory, and answers none.
        """
        self._call('reshape', *sorted(providers))
        if self.reshaper is not None:
            raise self.reshaper
        for uuid, (generation, _inventories) in providers.items():
            provider = self.providers.get(uuid)
            if provider is None:
                raise placement_client.PlacementError(
                    'provider not found', status_code=400)
            if self.conflicts:  # a concurrent writer got there first
                self.conflicts -= 1
                provider['generation'] += 1
            if provider['generation'] != generation:
                raise placement_client.GenerationConflict('conflict')
        for uuid, (_generation, inventories) in providers.items():
            provider = self.providers[uuid]
            provider['inventories'] = inventories
            provider['generation'] += 2 if inventories else 1

    def provider_tree(self, root_uuid):
        """The providers under compute node ``root_uuid`` (the fake
        keeps no root providers)."""
        self._call('tree', root_uuid)
        return [dict(provider) for provider in self.providers.values()
                if provider['parent'] == root_uuid]

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


@pytest.fixture
def put_sync(placement):
    """A sync that sets inventories one provider at a time."""
    return placement_sync.PlacementSync(placement, use_reshaper=False)


def _report(context, conf):
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(context, 'host1', 'host1.example', wire,
                           device_tree.tree_digest(wire), [])


def test_first_sync_creates_everything_once(database, admin_context,
                                            fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == [
        'find', 'trait', 'create', 'traits', 'create', 'traits', 'reshape']
    provider = next(iter(placement.providers.values()))
    assert provider['parent'] == COMPUTE_RP
    assert provider['name'].startswith('host1_0000_1')
    assert provider['traits'] == ['CUSTOM_FAST', 'OWNER_CYBORG']
    assert provider['inventories'] == {'FPGA': {
        'total': 4, 'reserved': 0, 'min_unit': 1, 'max_unit': 4,
        'step_size': 1, 'allocation_ratio': 1.0}}
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_first_sync_one_provider_at_a_time(database, admin_context,
                                           fake_conf, placement, put_sync):
    _report(admin_context, fake_conf)
    assert put_sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == [
        'find', 'trait', 'create', 'traits', 'create', 'traits',
        'inventories', 'inventories']
    assert all(p['inventories']['FPGA']['total'] == 4
               for p in placement.providers.values())
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
    # The reshape left the generation unknown: read it first.
    assert placement.kinds() == ['get', 'inventories']
    uuid = placement.calls[1][1]
    assert placement.providers[uuid]['inventories']['FPGA']['reserved'] == 4


def test_disabled_device_reserves_everything(database, admin_context,
                                             fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    device = hardware.device_list(admin_context, {})[0]
    hardware.device_set_status(admin_context, device['uuid'], 'maintaining')
    services_db.request_sync(admin_context, 'host1')
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['get', 'inventories']
    placement.calls.clear()
    hardware.device_set_status(admin_context, device['uuid'], 'enabled')
    services_db.request_sync(admin_context, 'host1')
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['inventories']  # generation known now


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
    # The provider it could not delete grants nothing more: all of its
    # inventory is reserved (its allocations stay valid).
    (gone,) = [call[1] for call in placement.calls if call[0] == 'delete']
    assert all(record['reserved'] == record['total'] for record in
               placement.providers[gone]['inventories'].values())
    assert placement.providers[gone]['inventories']
    # Reserved once: the next try does not write it again.
    placement.calls.clear()
    assert not sync.sync_host(admin_context, 'host1')
    assert 'inventories' not in placement.kinds()
    placement.in_use = set()
    assert sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_generation_conflicts_are_retried(database, admin_context,
                                          fake_conf, placement, put_sync):
    sync = put_sync
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
    assert services_db.hosts_pending_sync(admin_context) == ['host1']


def test_change_during_sync_stays_pending(database, admin_context,
                                          fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    real = placement.set_traits

    def report_meanwhile(*args):
        services_db.request_sync(admin_context, 'host1')
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
    services_db.request_sync(admin_context, 'host1')
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['create', 'get', 'traits'] * 2 + ['reshape']
    assert all(p['inventories']['FPGA']['total'] == 4
               for p in placement.providers.values())


def test_concurrent_syncs_never_lose_a_change(database, admin_context,
                                              fake_conf, placement, sync):
    """Two syncs that saw the same changes both finishing (in any order)
    leave a change made meanwhile pending."""
    _report(admin_context, fake_conf)
    state = placement_sync.load_host_state(admin_context, 'host1')
    services_db.request_sync(admin_context, 'host1')  # a later change
    for _sync in range(2):
        with db_api.main_context_manager.writer.using(
                admin_context) as session:
            services_db.mark_synced(session, state.service_id,
                                    state.sync_requested)
    assert inventory.report_state(admin_context, 'host1')[1] is True
    assert services_db.hosts_pending_sync(admin_context) == ['host1']
    assert sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is False


def _traits(placement):
    return {tuple(p['traits']) for p in placement.providers.values()}


def test_an_older_sync_written_last_is_written_again(
        database, admin_context, fake_conf, placement, sync):
    """Two conductors sync one host at once: the sync that loaded the
    older tree writes to Placement after the one that loaded the newer
    tree ended. Neither can tell which writes Placement kept, so the
    host is pending again, and the next sync writes the latest tree."""
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    fake_conf.set_override('traits', ['CUSTOM_OLDER'], group='fake_driver')
    _report(admin_context, fake_conf)
    other = placement_sync.PlacementSync(placement)
    real = placement.set_traits

    def newer_sync_first(*args):
        # The older sync loaded its tree; a newer report and another
        # conductor's whole sync of it come before its first write.
        placement.set_traits = real
        fake_conf.set_override('traits', ['CUSTOM_NEWER'],
                               group='fake_driver')
        _report(admin_context, fake_conf)
        assert other.sync_host(admin_context, 'host1')
        assert _traits(placement) == {('CUSTOM_NEWER', 'OWNER_CYBORG')}
        return real(*args)

    placement.set_traits = newer_sync_first
    sync.sync_host(admin_context, 'host1')
    # The older tree reached Placement last.
    assert _traits(placement) == {('CUSTOM_OLDER', 'OWNER_CYBORG')}
    assert services_db.hosts_pending_sync(admin_context) == ['host1']
    assert other.sync_host(admin_context, 'host1')
    assert _traits(placement) == {('CUSTOM_NEWER', 'OWNER_CYBORG')}
    assert services_db.hosts_pending_sync(admin_context) == []


def test_syncs_one_after_the_other_leave_nothing_pending(
        database, admin_context, fake_conf, placement, sync):
    """Two conductors' syncs that do not overlap: the second one is no
    reason to write again."""
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    fake_conf.set_override('traits', ['CUSTOM_OTHER'], group='fake_driver')
    _report(admin_context, fake_conf)
    assert placement_sync.PlacementSync(placement).sync_host(
        admin_context, 'host1')
    assert services_db.hosts_pending_sync(admin_context) == []
    placement.calls.clear()
    assert sync.sync_host(admin_context, 'host1')
    assert placement.calls == []


# Inventories of several providers with one POST /reshaper


def _totals(placement):
    return {p['inventories']['FPGA']['total']
            for p in placement.providers.values()}


def _change_every_provider(context, conf, accelerators=6):
    conf.set_override('accelerators_per_device', accelerators,
                      group='fake_driver')
    _report(context, conf)


def test_new_host_costs_one_request_per_provider_part(
        database, admin_context, fake_conf, placement, sync):
    """8 devices: the compute node lookup, a create and a traits request
    per provider, and one reshape for all the inventories."""
    fake_conf.set_override('num_devices', 8, group='fake_driver')
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    kinds = placement.kinds()
    assert kinds.count('find') == 1
    assert kinds.count('create') == kinds.count('traits') == 8
    assert kinds.count('reshape') == 1
    assert 'inventories' not in kinds and 'get' not in kinds
    assert len(kinds) == 1 + 1 + 8 + 8 + 1  # and the custom trait once
    assert len(placement.calls[-1]) == 1 + 8  # every provider in it
    assert _totals(placement) == {4}
    assert inventory.report_state(admin_context, 'host1')[1] is False
    # The reshape answered no generations: none is recorded.
    state = placement_sync.load_host_state(admin_context, 'host1')
    assert {row.generation for row in state.known.values()} == {None}


@pytest.mark.parametrize('refusal', [
    placement_client.Forbidden('policy', status_code=403),
    placement_client.MicroversionUnsupported('1.29', status_code=406),
])
def test_refused_reshaper_falls_back_for_good(
        database, admin_context, fake_conf, placement, sync, refusal):
    placement.reshaper = refusal
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == [
        'find', 'trait', 'create', 'traits', 'create', 'traits', 'reshape',
        'inventories', 'inventories']
    assert _totals(placement) == {4}
    assert not sync.reshaper_allowed
    placement.calls.clear()
    _change_every_provider(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['inventories', 'inventories']
    assert _totals(placement) == {6}
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_reshape_conflict_falls_back_to_one_provider_at_a_time(
        database, admin_context, fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    real_reshape = placement.reshape_inventories

    def conflicting(providers):
        placement.conflicts = 1  # someone bumps the first generation
        return real_reshape(providers)

    placement.reshape_inventories = conflicting
    assert sync.sync_host(admin_context, 'host1')
    # The provider whose generation moved is read again and retried.
    assert placement.kinds()[-5:] == [
        'reshape', 'inventories', 'get', 'inventories', 'inventories']
    assert _totals(placement) == {4}
    assert sync.reshaper_allowed  # tried again next time
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_single_pending_provider_is_not_reshaped(
        database, admin_context, fake_conf, placement, sync):
    fake_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == [
        'find', 'trait', 'create', 'traits', 'inventories']


def test_unknown_generations_are_read_with_one_request(
        database, admin_context, fake_conf, placement, sync):
    """After a reshape, a change of every provider reads the host's tree
    once and reshapes again."""
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    _change_every_provider(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['tree', 'reshape']
    assert _totals(placement) == {6}


def test_new_and_changed_providers_share_the_reshape(
        database, admin_context, fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    placement.calls.clear()
    fake_conf.set_override('num_devices', 3, group='fake_driver')
    _change_every_provider(admin_context, fake_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['tree', 'create', 'traits', 'reshape']
    assert len(placement.calls[-1]) == 1 + 3
    assert _totals(placement) == {6}


def test_reshape_without_answer_keeps_the_rest(database, admin_context,
                                               fake_conf, placement, sync):
    """Placement gone during the reshape: the host stays pending, and the
    next sync sends only the inventories (the providers and their traits
    were recorded)."""
    _report(admin_context, fake_conf)
    placement.reshaper = placement_client.PlacementUnavailable('timed out')
    with pytest.raises(placement_client.PlacementUnavailable):
        sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is True
    assert services_db.hosts_pending_sync(admin_context) == ['host1']
    placement.reshaper = None
    placement.calls.clear()
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds() == ['reshape']
    assert _totals(placement) == {4}
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_reshape_server_error_falls_back(database, admin_context, fake_conf,
                                         placement, sync):
    _report(admin_context, fake_conf)
    placement.reshaper = placement_client.PlacementUnavailable(
        'HTTP 500', status_code=500)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.kinds()[-3:] == ['reshape', 'inventories', 'inventories']
    assert sync.reshaper_allowed
    assert _totals(placement) == {4}


def test_inventory_in_use_in_reshape_fails_only_its_provider(
        database, admin_context, fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')
    in_use = sorted(placement.providers)[0]
    real_set = placement.set_inventories

    def set_inventories(uuid, generation, inventories):
        if uuid == in_use:
            placement._call('inventories', uuid)
            raise placement_client.InventoryInUse('in use')
        return real_set(uuid, generation, inventories)

    placement.set_inventories = set_inventories
    placement.reshaper = placement_client.InventoryInUse('in use')
    _change_every_provider(admin_context, fake_conf, accelerators=2)
    assert not sync.sync_host(admin_context, 'host1')
    assert {uuid: p['inventories']['FPGA']['total']
            for uuid, p in placement.providers.items()}[in_use] == 4
    assert _totals(placement) == {2, 4}
    assert inventory.report_state(admin_context, 'host1')[1] is True


def test_provider_deleted_behind_our_back_is_created_again(
        database, admin_context, fake_conf, placement, put_sync):
    _report(admin_context, fake_conf)
    put_sync.sync_host(admin_context, 'host1')
    gone = sorted(placement.providers)[0]
    del placement.providers[gone]
    real_set = placement.set_inventories

    def set_inventories(uuid, generation, inventories):
        if uuid not in placement.providers:
            placement._call('inventories', uuid)
            raise placement_client.ProviderNotFound('404')
        return real_set(uuid, generation, inventories)

    placement.set_inventories = set_inventories
    placement.calls.clear()
    _change_every_provider(admin_context, fake_conf)
    assert put_sync.sync_host(admin_context, 'host1')
    assert placement.providers[gone]['traits'] == ['CUSTOM_FAST',
                                                   'OWNER_CYBORG']
    assert _totals(placement) == {6}
    assert inventory.report_state(admin_context, 'host1')[1] is False


def test_failed_removal_is_logged_and_retried(database, admin_context,
                                              fake_conf, placement, sync):
    _report(admin_context, fake_conf)
    sync.sync_host(admin_context, 'host1')

    def refuse(uuid):
        placement._call('delete', uuid)
        raise placement_client.PlacementError('no', status_code=400)

    placement.delete_provider = refuse
    fake_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, fake_conf)
    assert not sync.sync_host(admin_context, 'host1')
    assert inventory.report_state(admin_context, 'host1')[1] is True
    del placement.delete_provider
    assert sync.sync_host(admin_context, 'host1')
    assert len(placement.providers) == 1


def test_rows_another_sync_recorded_are_updated(database, admin_context,
                                                fake_conf, placement, sync):
    """Two syncs of a new host (e.g. by two conductors) both record its
    providers: the second one updates the rows the first inserted."""
    _report(admin_context, fake_conf)
    state = placement_sync.load_host_state(admin_context, 'host1')
    state.set_compute_rp(COMPUTE_RP)
    writes = [placement_sync._Write.plan(spec, None)
              for spec in state.desired.values()]
    assert sync.sync_host(admin_context, 'host1')
    for write in writes:  # what the other sync wrote
        write.created(7)
        write.inventory_written(None)
        write.traits_written(8)
    providers_db.save_sync(admin_context, state.service_id,
                           placement_sync.sync_record('host1', writes))
    state = placement_sync.load_host_state(admin_context, 'host1')
    assert len(state.known) == 2
    assert {row.generation for row in state.known.values()} == {8}


def test_provider_hashes_are_the_tree_digest():
    """What is written to Placement is hashed as a report is
    (:func:`device_tree.tree_digest`): one digest rule."""
    inventories = {'CUSTOM_FPGA': {'total': 2, 'reserved': 0}}
    traits = ['CUSTOM_B', 'CUSTOM_A']
    spec = placement_sync.ProviderSpec('u', 'n', 'p', inventories, traits)
    assert spec.inventory_hash == device_tree.tree_digest(inventories)
    assert spec.traits_hash == device_tree.tree_digest(traits)
    assert spec.inventory_hash != device_tree.tree_digest(
        {'CUSTOM_FPGA': {'total': 3, 'reserved': 0}})
