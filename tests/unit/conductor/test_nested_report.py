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

"""Nested deployables: the tree's children, their rows (``parent_id``,
``root_id``) and their resource providers under their parent's."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import exception
from cyborg.conductor import placement_sync
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit.conductor import test_placement_sync as sync_tests

PARENT = '0000_10_00_0'


@pytest.fixture
def nested_conf(conf):
    conf.set_override('children_per_device', 2, group='fake_driver')
    conf.set_override('accelerators_per_device', 2, group='fake_driver')
    yield conf
    for name in ('children_per_device', 'accelerators_per_device',
                 'num_devices'):
        conf.clear_override(name, group='fake_driver')


def _report(context, conf):
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    return inventory.apply_report(context, 'host1', 'host1.example', wire,
                                  device_tree.tree_digest(wire), [])


def _rows(engine) -> dict[str, tuple]:
    """name -> (parent's name, root's name, accelerators, handles)."""
    table = models.Deployable.__table__
    handles = models.AttachHandle.__table__
    with engine.connect() as connection:
        rows = list(connection.execute(sa.select(table)))
        counts = dict(connection.execute(
            sa.select(handles.c.deployable_id, sa.func.count())
            .group_by(handles.c.deployable_id)).all())
    names = {row.id: row.name for row in rows}
    return {row.name: (names.get(row.parent_id), names.get(row.root_id),
                       row.num_accelerators, counts.get(row.id, 0))
            for row in rows}


def test_children_are_on_the_wire_and_walked_parents_first(nested_conf):
    wire = device_tree.tree_to_wire(fake.FakeDriver(nested_conf).discover())
    (top,) = wire[0]['deployables']
    assert [child['name'] for child in top['children']] == [
        PARENT + '_c0', PARENT + '_c1']
    assert 'children' not in top['children'][0]
    assert [(d['name'], parent, depth) for d, parent, depth
            in device_tree.walk_wire(wire[0]['deployables'])] == [
        (PARENT, None, 0), (PARENT + '_c0', PARENT, 1),
        (PARENT + '_c1', PARENT, 1)]


def test_nested_report_links_children_to_parent_and_root(
        database, admin_context, nested_conf):
    nested_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, nested_conf)
    assert _rows(database) == {
        PARENT: (None, None, 0, 0),
        PARENT + '_c0': (PARENT, PARENT, 2, 2),
        PARENT + '_c1': (PARENT, PARENT, 2, 2)}


def test_grandchildren_have_the_top_deployable_as_root(
        database, admin_context):
    def deployable(name, children=()):
        return device_tree.Deployable(name, 1, 'FPGA',
                                      children=list(children))
    device = device_tree.Device(
        'FPGA', 'v', 'm', '0000:20:00.0', [device_tree.ControlPathID(
            'PCI', device_tree.pci_address_info('0000:20:00.0'))],
        [deployable('region', [deployable('function', [deployable('vf')])])])
    wire = device_tree.tree_to_wire([device])
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    assert {name: row[:2] for name, row in _rows(database).items()} == {
        'region': (None, None), 'function': ('region', 'region'),
        'vf': ('function', 'region')}


def test_children_follow_later_reports(database, admin_context,
                                       nested_conf):
    nested_conf.set_override('num_devices', 1, group='fake_driver')
    _report(admin_context, nested_conf)
    nested_conf.set_override('children_per_device', 1, group='fake_driver')
    assert _report(admin_context, nested_conf).updated == 1
    assert set(_rows(database)) == {PARENT, PARENT + '_c0'}
    nested_conf.set_override('children_per_device', 0, group='fake_driver')
    _report(admin_context, nested_conf)
    assert _rows(database) == {PARENT: (None, None, 2, 2)}
    nested_conf.set_override('children_per_device', 2, group='fake_driver')
    _report(admin_context, nested_conf)
    assert _rows(database)[PARENT + '_c1'] == (PARENT, PARENT, 2, 2)


class NestedPlacement(sync_tests.FakePlacement):
    """Placement's rules for trees: a parent exists before its
    children, and a provider with children cannot be deleted."""

    def create_provider(self, uuid, name, parent_uuid=None):
        if parent_uuid not in self.providers and parent_uuid != (
                sync_tests.COMPUTE_RP):
            raise exception.CyborgException('no parent %s' % parent_uuid)
        return super().create_provider(uuid, name, parent_uuid)

    def delete_provider(self, uuid):
        if any(p['parent'] == uuid for p in self.providers.values()):
            raise exception.CyborgException('%s has children' % uuid)
        return super().delete_provider(uuid)


def test_child_providers_are_created_under_their_parents_provider(
        database, admin_context, nested_conf):
    nested_conf.set_override('num_devices', 2, group='fake_driver')
    placement = NestedPlacement()
    sync = placement_sync.PlacementSync(placement)
    _report(admin_context, nested_conf)
    assert sync.sync_host(admin_context, 'host1')
    by_name = {p['name']: p for p in placement.providers.values()}
    parent = by_name['host1_' + PARENT]
    assert parent['parent'] == sync_tests.COMPUTE_RP
    assert parent['inventories'] == {}
    for child in ('_c0', '_c1'):
        provider = by_name['host1_' + PARENT + child]
        assert provider['parent'] == parent['uuid']
        assert provider['inventories']['FPGA']['total'] == 2
    nested_conf.set_override('num_devices', 0, group='fake_driver')
    _report(admin_context, nested_conf)
    assert sync.sync_host(admin_context, 'host1')
    assert placement.providers == {}


def _fpga(*deployables) -> list[dict]:
    device = device_tree.Device(
        'FPGA', 'v', 'm', '0000:20:00.0', [device_tree.ControlPathID(
            'PCI', device_tree.pci_address_info('0000:20:00.0'))],
        list(deployables))
    return device_tree.tree_to_wire([device])


def _apply(context, wire):
    return inventory.apply_report(context, 'host1', 'host1', wire,
                                  device_tree.tree_digest(wire), [])


def test_known_deployables_move_to_their_new_parent(database,
                                                    admin_context):
    """A function moved from one region to a new one keeps its row; a
    child added under a moved parent gets the new root."""
    def dep(name, *children):
        return device_tree.Deployable(name, 1, 'FPGA',
                                      children=list(children))
    _apply(admin_context, _fpga(dep('r1', dep('f1', dep('vf1')))))
    before = _rows(database)
    assert before['vf1'][:2] == ('f1', 'r1')
    assert _apply(admin_context, _fpga(
        dep('r1'), dep('r2', dep('f1', dep('vf1'), dep('vf2'))))).updated == 1
    after = _rows(database)
    assert {name: row[:2] for name, row in after.items()} == {
        'r1': (None, None), 'r2': (None, None), 'f1': ('r2', 'r2'),
        'vf1': ('f1', 'r2'), 'vf2': ('f1', 'r2')}
    assert _apply(admin_context, _fpga(
        dep('r1'), dep('r2', dep('f1', dep('vf1'), dep('vf2'))))) is None


def test_names_are_unique_in_the_whole_device():
    with pytest.raises(ValueError, match='unique at every depth: f'):
        device_tree.Device('FPGA', 'v', 'm', '0000:20:00.0', [], [
            device_tree.Deployable('r1', 1, 'FPGA', children=[
                device_tree.Deployable('f', 1, 'FPGA')]),
            device_tree.Deployable('f', 1, 'FPGA')])


def test_children_of_a_deployable_without_provider_hang_under_its_parent(
        database, admin_context):
    """A deployable without a resource class (as an upstream import can
    leave one) gets no provider: its children hang under the nearest
    ancestor that has one, here the compute node, instead of under a
    provider that is never created."""
    def dep(name, *children):
        return device_tree.Deployable(name, 1, 'FPGA',
                                      children=list(children))
    wire = _fpga(dep('r1', dep('f1', dep('vf1'))))
    inventory.apply_report(admin_context, 'host1', 'host1.example', wire,
                           device_tree.tree_digest(wire), [])
    deployables = models.Deployable.__table__
    attributes = models.Attribute.__table__
    with database.begin() as connection:
        f1 = connection.execute(sa.select(deployables.c.id).where(
            deployables.c.name.in_(['r1', 'f1']))).scalars().all()
        connection.execute(sa.delete(attributes).where(
            attributes.c.deployable_id.in_(f1),
            attributes.c.key == providers.RESOURCE_CLASS_KEY))
    placement = NestedPlacement()
    assert placement_sync.PlacementSync(placement).sync_host(admin_context,
                                                             'host1')
    by_name = {p['name']: p for p in placement.providers.values()}
    assert set(by_name) == {'host1_vf1'}
    assert by_name['host1_vf1']['parent'] == sync_tests.COMPUTE_RP
