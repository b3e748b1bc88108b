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

"""Agents adopting devices imported from an upstream Cyborg: the report
diff, and the Placement sync of the adopted providers (with a fake
Placement), on each database."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.clients import placement as placement_client
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.domain import adoption
from cyborg.domain import device_tree
from tests.unit import fakes
from tests.unit.conductor import imported
from tests.unit.conductor.test_placement_sync import COMPUTE_RP
from tests.unit.conductor.test_placement_sync import FakePlacement

HOST = 'host1'
ADDRESS = '0000:10:00.0'
# What our fake driver names the device's deployable.
OURS = '0000_10_00_0'
UPSTREAM = 'host1_FakeDevice'


@pytest.fixture
def fake_conf(conf):
    """Our agent's report: one device at ADDRESS, three handles (the
    functions 1 to 3 on its bus)."""
    conf.set_override('num_devices', 1, group='fake_driver')
    conf.set_override('accelerators_per_device', 3, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('accelerators_per_device', group='fake_driver')


def _wire(conf):
    return device_tree.tree_to_wire(fake.FakeDriver(conf).discover())


def _apply(context, wire):
    return inventory.apply_report(context, HOST, HOST + '.example', wire,
                                  device_tree.tree_digest(wire), [])


def _rows(engine):
    """{deployable name: (uuid, rp_uuid, retained, {function: (handle
    uuid, in_use, attach_info)})} of HOST."""
    found = {}
    with engine.connect() as connection:
        for dep in connection.execute(sa.select(imported.DEPLOYABLES)):
            handles = {}
            for handle in connection.execute(sa.select(
                    imported.HANDLES).where(
                    imported.HANDLES.c.deployable_id == dep.id)):
                function = adoption.pci_function(handle.attach_info)
                handles[int(function[-1])] = (handle.uuid, handle.in_use,
                                              handle.attach_info)
            found[dep.name] = (dep.uuid, dep.rp_uuid, dep.retained, handles)
    return found


def _attributes(engine, name):
    with engine.connect() as connection:
        return {row.key: row.value for row in connection.execute(
            sa.select(imported.ATTRIBUTES.c.key, imported.ATTRIBUTES.c.value)
            .join(imported.DEPLOYABLES, imported.DEPLOYABLES.c.id
                  == imported.ATTRIBUTES.c.deployable_id)
            .where(imported.DEPLOYABLES.c.name == name))}


# The report diff -----------------------------------------------------------

def test_matching_device_keeps_every_identity(database, admin_context,
                                              fake_conf):
    """The reported deployable adopts the imported one sharing its
    functions: uuids, provider uuid and the bound handle stay; the
    bound handle keeps the info Nova was given, free ones take ours."""
    rows = imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], in_use=[2],
        traits=['CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_UPSTREAM'])])
    summary = _apply(admin_context, _wire(fake_conf))
    assert (summary.adopted, summary.added, summary.removed) == (1, 0, 0)
    found = _rows(database)
    assert list(found) == [OURS]
    dep_uuid, rp_uuid, retained, handles = found[OURS]
    assert (dep_uuid, rp_uuid, retained) == (
        rows.deployables[UPSTREAM], imported.upstream_rp_uuid(UPSTREAM),
        False)
    assert {function: handle[:2] for function, handle in handles.items()} == {
        function: (rows.handles[UPSTREAM, function], function == 2)
        for function in (1, 2, 3)}
    assert handles[2][2] == device_tree.canonical_json(
        imported.upstream_handle(ADDRESS, 2))
    assert handles[1][2] == device_tree.canonical_json(
        {'domain': '0000', 'bus': '10', 'device': '00', 'function': '1'})
    arq = arq_db.arq_get(admin_context, rows.arqs[UPSTREAM, 2], None)
    assert arq['state'] == 'Bound'
    assert arq['attach_handle_uuid'] == rows.handles[UPSTREAM, 2]
    with database.connect() as connection:
        device = connection.execute(sa.select(imported.DEVICES)).one()
    assert (device.uuid, device.driver) == (rows.device_uuid, 'fake_driver')
    # Upstream's trait that no device profile references is gone.
    assert _attributes(database, OURS) == {'rc': 'FPGA',
                                           'trait0': 'CUSTOM_FAKE_DEVICE'}
    # Adopted once: the next report matches by name and changes nothing.
    fake_conf.set_override('accelerators_per_device', 4,
                           group='fake_driver')
    _apply(admin_context, _wire(fake_conf))
    assert _rows(database)[OURS][0] == rows.deployables[UPSTREAM]


def test_upstream_trait_a_profile_references_is_kept(database, admin_context,
                                                     fake_conf):
    profiles_db.device_profile_create(admin_context, {
        'name': 'needs-upstream', 'groups': [{
            'resources:FPGA': '1', 'trait:CUSTOM_FPGA_UPSTREAM': 'required'}]})
    imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], traits=['CUSTOM_FPGA_UPSTREAM', 'CUSTOM_GONE'])])
    _apply(admin_context, _wire(fake_conf))
    assert _attributes(database, OURS) == {
        'rc': 'FPGA', 'trait0': 'CUSTOM_FAKE_DEVICE',
        'trait1': 'CUSTOM_FPGA_UPSTREAM'}


def test_adoption_keeps_the_programmed_bitstream(database, admin_context,
                                                 fake_conf):
    """Upstream names function traits otherwise: the adoption does not
    take the difference for a reprogrammed region."""
    bitstream = '6e1a1d2b-7c3f-4a5e-9b8d-0c1f2e3a4b5c'
    imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], bitstream_id=bitstream,
        traits=['CUSTOM_FPGA_FUNCTION_ID_INTEL_ABC_-1'])])
    _apply(admin_context, _wire(fake_conf))
    with database.connect() as connection:
        assert connection.execute(sa.select(
            imported.DEPLOYABLES.c.bitstream_id)).scalar() == bitstream


def _per_function(database):
    """Upstream modelled the device as one deployable per function (as
    its QAT and NIC drivers do); function 2's is bound."""
    return imported.insert(database, HOST, ADDRESS, [
        imported.Deployable('host1_0000:10:00.1', [1]),
        imported.Deployable('host1_0000:10:00.2', [2], in_use=[2]),
        imported.Deployable('host1_0000:10:00.3', [3])])


def test_other_model_is_retained_while_bound_then_converges(
        database, admin_context, fake_conf):
    rows = _per_function(database)
    wire = _wire(fake_conf)
    summary = _apply(admin_context, wire)
    assert (summary.adopted, summary.retained) == (1, 1)
    found = _rows(database)
    assert sorted(found) == [OURS, 'host1_0000:10:00.2']
    # The oldest sharing a function is adopted; the bound one retained;
    # the free one removed. The handle the retained one holds is not
    # offered twice.
    assert found[OURS][0] == rows.deployables['host1_0000:10:00.1']
    assert sorted(found[OURS][3]) == [1, 3]
    assert found['host1_0000:10:00.2'][2] is True
    assert found['host1_0000:10:00.2'][3][2][:2] == (
        rows.handles['host1_0000:10:00.2', 2], True)
    # Nothing changes while it is bound.
    assert _apply(admin_context, wire) is None
    imported.release(database, rows.arqs['host1_0000:10:00.2', 2])
    # The same report is applied again to remove it.
    assert inventory.report_state(admin_context, HOST)[0] is None
    summary = _apply(admin_context, wire)
    assert summary.retained == 0
    found = _rows(database)
    assert list(found) == [OURS]
    assert sorted(found[OURS][3]) == [1, 2, 3]
    assert inventory.report_state(admin_context, HOST)[0] == (
        device_tree.tree_digest(wire))


def test_retained_capacity_is_reserved(database, admin_context, fake_conf):
    rows = _per_function(database)
    _apply(admin_context, _wire(fake_conf))
    state = placement_sync.load_host_state(admin_context, HOST)
    ours = state.desired[imported.upstream_rp_uuid('host1_0000:10:00.1')]
    assert ours.inventories['FPGA']['total'] == 3
    assert ours.inventories['FPGA']['reserved'] == 1
    held = state.desired[imported.upstream_rp_uuid('host1_0000:10:00.2')]
    assert held.inventories['FPGA']['reserved'] == 1   # all of it
    imported.release(database, rows.arqs['host1_0000:10:00.2', 2])
    _apply(admin_context, _wire(fake_conf))
    state = placement_sync.load_host_state(admin_context, HOST)
    assert list(state.desired) == [
        imported.upstream_rp_uuid('host1_0000:10:00.1')]
    assert state.desired[imported.upstream_rp_uuid(
        'host1_0000:10:00.1')].inventories['FPGA']['reserved'] == 0


def test_unreported_imported_device_is_kept_while_bound(
        database, admin_context, fake_conf):
    rows = imported.insert(database, HOST, '0000:0c:00.0', [
        imported.Deployable(UPSTREAM, [1, 2], in_use=[1])])
    summary = _apply(admin_context, _wire(fake_conf))
    assert (summary.added, summary.kept_missing) == (1, 1)
    assert rows.deployables[UPSTREAM] == _rows(database)[UPSTREAM][0]
    imported.release(database, rows.arqs[UPSTREAM, 1])
    assert _apply(admin_context, _wire(fake_conf)).removed == 1
    assert list(_rows(database)) == [OURS]


# The Placement sync --------------------------------------------------------

class UpstreamPlacement(FakePlacement):
    """The fake Placement with what upstream left in it: providers with
    upstream's names under the compute node, allocations, and the calls
    adoption makes."""

    def __init__(self):
        super().__init__()
        self.allocations = {}

    def upstream_provider(self, name, inventory, traits):
        uuid = imported.upstream_rp_uuid(name)
        self.providers[uuid] = {
            'uuid': uuid, 'name': name, 'generation': 3,
            'parent': COMPUTE_RP, 'parent_provider_uuid': COMPUTE_RP,
            'inventories': inventory, 'traits': traits}
        return uuid

    def get_provider(self, uuid):
        provider = super().get_provider(uuid)
        if provider is not None:
            provider = dict(provider,
                            parent_provider_uuid=provider['parent'])
        return provider

    def provider_tree(self, root_uuid):
        return [dict(provider, parent_provider_uuid=provider['parent'])
                for provider in super().provider_tree(root_uuid)]

    def provider_allocations(self, uuid):
        self._call('allocations', uuid)
        return self.allocations.get(uuid, {})

    def _check_in_use(self, uuid, inventories):
        """Placement refuses to drop a class that allocations use."""
        for used in self.allocations.get(uuid, {}).values():
            if set(used) - set(inventories):
                raise placement_client.InventoryInUse('in use')

    def set_inventories(self, uuid, generation, inventories):
        self._check_in_use(uuid, inventories)
        return super().set_inventories(uuid, generation, inventories)

    def reshape_inventories(self, providers):
        for uuid, (_generation, inventories) in providers.items():
            self._check_in_use(uuid, inventories)
        return super().reshape_inventories(providers)

    def get_inventories(self, uuid):
        self._call('get_inventories', uuid)
        provider = self.providers[uuid]
        return provider['generation'], dict(provider['inventories'])

    def update_provider(self, uuid, name, parent_uuid):
        self._call('update', uuid)
        provider = self.providers[uuid]
        provider.update(name=name, parent=parent_uuid)
        provider['generation'] += 1
        return provider

    def delete_provider(self, uuid):
        if self.allocations.get(uuid):
            self._call('delete', uuid)
            raise placement_client.ProviderInUse('in use')
        return super().delete_provider(uuid)


@pytest.fixture
def upstream_placement():
    return UpstreamPlacement()


@pytest.fixture
def conductor(database, upstream_placement):
    return conductor_manager.ConductorManager(
        'c1', fakes.inline_syncer(upstream_placement))


def _report(conductor, context, wire):
    return conductor.report_inventory(context, HOST, HOST + '.example', wire,
                                      device_tree.tree_digest(wire), [])


def test_adopted_provider_is_corrected_never_recreated(
        conductor, upstream_placement, admin_context, database, fake_conf):
    """Inventory and traits become ours at once; the name waits for the
    allocation to go. Meanwhile the host counts as synced: reports cost
    no Placement request, and the periodic adoption check (not each
    report) asks for the allocations."""
    rows = imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], in_use=[2],
        traits=['CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_UPSTREAM'])])
    uuid = upstream_placement.upstream_provider(
        UPSTREAM, {'FPGA': {'total': 3, 'max_unit': 3}},
        ['CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_UPSTREAM'])
    upstream_placement.allocations[uuid] = {'instance': {'FPGA': 1}}
    wire = _wire(fake_conf)
    assert _report(conductor, admin_context, wire)['synced'] is True
    provider = upstream_placement.providers[uuid]
    assert provider['name'] == UPSTREAM
    assert provider['traits'] == ['CUSTOM_FAKE_DEVICE', 'OWNER_CYBORG']
    assert provider['inventories']['FPGA']['reserved'] == 0
    assert provider['inventories']['FPGA']['max_unit'] == 3
    kinds = upstream_placement.kinds()
    assert 'create' not in kinds and 'delete' not in kinds
    assert 'update' not in kinds
    # An unchanged report costs Placement nothing while it waits.
    upstream_placement.calls.clear()
    assert _report(conductor, admin_context, wire)['synced'] is True
    assert upstream_placement.calls == []
    # The periodic check asks for the allocations only.
    conductor.sync_adopted_hosts(admin_context)
    assert upstream_placement.kinds() == ['allocations']
    # Released: the next check renames it once, then nothing more to do.
    imported.release(database, rows.arqs[UPSTREAM, 2])
    del upstream_placement.allocations[uuid]
    upstream_placement.calls.clear()
    conductor.sync_adopted_hosts(admin_context)
    assert 'update' in upstream_placement.kinds()
    upstream_placement.calls.clear()
    conductor.sync_adopted_hosts(admin_context)
    assert upstream_placement.calls == []
    assert conductor.sync_host(admin_context, HOST) is True
    assert provider['name'] == HOST + '_' + OURS
    assert 'create' not in upstream_placement.kinds()
    upstream_placement.calls.clear()
    assert _report(conductor, admin_context, wire)['synced'] is True
    assert upstream_placement.calls == []


def test_all_matching_host_creates_and_deletes_nothing(
        conductor, upstream_placement, admin_context, database, fake_conf):
    imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], traits=['CUSTOM_FAKE_DEVICE'])])
    upstream_placement.upstream_provider(
        UPSTREAM, {'FPGA': {'total': 3, 'max_unit': 3}},
        ['CUSTOM_FAKE_DEVICE'])
    assert _report(conductor, admin_context, _wire(fake_conf))['synced']
    kinds = upstream_placement.kinds()
    assert 'create' not in kinds and 'delete' not in kinds
    assert list(upstream_placement.providers) == [
        imported.upstream_rp_uuid(UPSTREAM)]


def test_upstream_only_provider_is_deleted_once_free(
        conductor, upstream_placement, admin_context, database, fake_conf):
    rows = _per_function(database)
    for name in ('host1_0000:10:00.1', 'host1_0000:10:00.2',
                 'host1_0000:10:00.3'):
        upstream_placement.upstream_provider(
            name, {'FPGA': {'total': 1, 'max_unit': 1}}, [])
    held = imported.upstream_rp_uuid('host1_0000:10:00.2')
    upstream_placement.allocations[held] = {'instance': {'FPGA': 1}}
    wire = _wire(fake_conf)
    _report(conductor, admin_context, wire)
    # The free upstream-only provider went; the held one is unschedulable.
    assert sorted(upstream_placement.providers) == sorted(
        [imported.upstream_rp_uuid('host1_0000:10:00.1'), held])
    assert upstream_placement.providers[held]['inventories']['FPGA'][
        'reserved'] == 1
    adopted = upstream_placement.providers[
        imported.upstream_rp_uuid('host1_0000:10:00.1')]
    assert adopted['inventories']['FPGA']['total'] == 3
    assert adopted['inventories']['FPGA']['reserved'] == 1
    assert 'create' not in upstream_placement.kinds()
    # Released in Cyborg, but Nova has not yet dropped the allocation.
    imported.release(database, rows.arqs['host1_0000:10:00.2', 2])
    _report(conductor, admin_context, wire)
    assert held in upstream_placement.providers
    assert adopted['inventories']['FPGA']['reserved'] == 0
    del upstream_placement.allocations[held]
    assert conductor.sync_host(admin_context, HOST) is True
    assert held not in upstream_placement.providers
    assert 'create' not in upstream_placement.kinds()


@pytest.fixture
def nested_conf(fake_conf):
    """Our agent reports the device as a tree: a top deployable with a
    child per function (``0000_10_00_0_c0`` holds function 1...)."""
    fake_conf.set_override('accelerators_per_device', 1,
                           group='fake_driver')
    fake_conf.set_override('children_per_device', 3, group='fake_driver')
    yield fake_conf
    fake_conf.clear_override('children_per_device', group='fake_driver')


def test_child_carrying_the_bound_function_adopts_and_moves_later(
        conductor, upstream_placement, admin_context, database, nested_conf):
    """Upstream's one deployable of three functions, one bound: the child
    carrying the bound one adopts it; its provider keeps upstream's
    parent until the allocation goes, then moves under the new top."""
    rows = imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], in_use=[2])])
    uuid = upstream_placement.upstream_provider(
        UPSTREAM, {'FPGA': {'total': 3, 'max_unit': 3}}, [])
    upstream_placement.allocations[uuid] = {'instance': {'FPGA': 1}}
    assert _report(conductor, admin_context, _wire(nested_conf))[
        'synced'] is True
    found = _rows(database)
    assert found[OURS + '_c1'][0] == rows.deployables[UPSTREAM]
    assert sorted(found[OURS + '_c1'][3]) == [2]
    assert sorted(found[OURS + '_c0'][3]) == [1]
    provider = upstream_placement.providers[uuid]
    assert provider['parent'] == COMPUTE_RP
    assert provider['inventories']['FPGA']['total'] == 1
    assert len(upstream_placement.providers) == 4     # top, c0, c2 new
    imported.release(database, rows.arqs[UPSTREAM, 2])
    del upstream_placement.allocations[uuid]
    assert conductor.sync_host(admin_context, HOST) is True
    top = found[OURS][1]
    assert (provider['parent'], provider['name']) == (
        top, HOST + '_' + OURS + '_c1')
    assert 'delete' not in upstream_placement.kinds()


def test_units_held_by_a_retained_deployable_are_reserved(
        database, admin_context, nested_conf):
    """No child carries both bound functions: the imported deployable is
    retained, and the children whose function it holds have no handle
    and reserve their unit."""
    rows = imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], in_use=[1, 2])])
    _apply(admin_context, _wire(nested_conf))
    found = _rows(database)
    assert found[UPSTREAM][2] is True
    assert sorted(found[UPSTREAM][3]) == [1, 2]      # the free one went
    assert [sorted(found[OURS + suffix][3]) for suffix in
            ('_c0', '_c1', '_c2')] == [[], [], [3]]
    state = placement_sync.load_host_state(admin_context, HOST)
    reserved = {spec.name: spec.inventories['FPGA']['reserved']
                for spec in state.desired.values() if spec.inventories}
    assert reserved == {
        HOST + '_' + OURS + '_c0': 1, HOST + '_' + OURS + '_c1': 1,
        HOST + '_' + OURS + '_c2': 0, HOST + '_' + UPSTREAM: 3}
    # A release is applied at once, even with the same report.
    imported.release(database, rows.arqs[UPSTREAM, 1])
    assert inventory.report_state(admin_context, HOST)[0] is None
    _apply(admin_context, _wire(nested_conf))
    found = _rows(database)
    assert sorted(found[UPSTREAM][3]) == [2]
    assert sorted(found[OURS + '_c0'][3]) == [1]
    imported.release(database, rows.arqs[UPSTREAM, 2])
    _apply(admin_context, _wire(nested_conf))
    found = _rows(database)
    assert UPSTREAM not in found
    assert sorted(found[OURS + '_c1'][3]) == [2]


def test_allocated_upstream_class_is_kept_reserved_until_free(
        conductor, upstream_placement, admin_context, database, fake_conf):
    """Upstream's resource class differs from ours and an instance holds
    it: the provider keeps it, all reserved, beside ours, until free."""
    rows = imported.insert(database, HOST, ADDRESS, [imported.Deployable(
        UPSTREAM, [1, 2, 3], in_use=[1], resource_class='CUSTOM_OLD')])
    uuid = upstream_placement.upstream_provider(
        UPSTREAM, {'CUSTOM_OLD': {'total': 3, 'max_unit': 3}}, [])
    upstream_placement.allocations[uuid] = {'instance': {'CUSTOM_OLD': 1}}
    wire = _wire(fake_conf)
    assert _report(conductor, admin_context, wire)['synced'] is True
    inventories = upstream_placement.providers[uuid]['inventories']
    assert inventories['FPGA']['total'] == 3
    assert inventories['FPGA']['reserved'] == 0
    assert inventories['CUSTOM_OLD'] == {'total': 3, 'max_unit': 3,
                                         'reserved': 3}
    imported.release(database, rows.arqs[UPSTREAM, 1])
    del upstream_placement.allocations[uuid]
    assert conductor.sync_host(admin_context, HOST) is True
    assert list(upstream_placement.providers[uuid]['inventories']) == [
        'FPGA']
    assert 'create' not in upstream_placement.kinds()
