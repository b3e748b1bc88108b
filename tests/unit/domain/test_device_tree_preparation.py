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

"""The preparation a deployable declares, its default and wire form."""

import pytest

from cyborg.domain import device_tree


def _device(**deployable) -> device_tree.Device:
    return device_tree.Device(
        type='GPU', vendor='10de', model='m', address='0000:01:00.0',
        controlpath_ids=[], deployables=[device_tree.Deployable(
            name='d', num_accelerators=1, resource_class='VGPU',
            attach_handles=[device_tree.AttachHandle('PCI', {'bus': '01'})],
            **deployable)])


# The wire form of _device() as agents sent it before deployables
# declared their preparation.
_OLD_WIRE = [{
    'type': 'GPU', 'vendor': '10de', 'model': 'm', 'address': '0000:01:00.0',
    'controlpath_ids': [], 'std_board_info': None,
    'vendor_board_info': None, 'health': 'healthy', 'driver': None,
    'deployables': [{
        'name': 'd', 'num_accelerators': 1, 'resource_class': 'VGPU',
        'traits': [], 'attributes': {}, 'driver_name': None,
        'attach_handles': [{'attach_type': 'PCI',
                            'attach_info': {'bus': '01'}}]}]}]


def test_undeclared_preparation_keeps_the_old_wire_form_and_digest():
    wire = device_tree.tree_to_wire([_device()])
    assert wire == _OLD_WIRE
    assert device_tree.tree_digest(wire) == device_tree.tree_digest(
        _OLD_WIRE)


def test_declared_preparation_is_on_the_wire():
    wire = device_tree.tree_to_wire([_device(preparation='vgpu_type')])
    deployable = wire[0]['deployables'][0]
    assert deployable['preparation'] == 'vgpu_type'
    assert device_tree.reported_preparation(deployable) == 'vgpu_type'
    assert device_tree.tree_digest(wire) != device_tree.tree_digest(
        _OLD_WIRE)


@pytest.mark.parametrize('types, expected', [
    (['MDEV'], 'mdev'), (['PCI'], 'none'), (['TEST_PCI'], 'none'),
    ([], 'none')])
def test_default_preparation_follows_the_handles(types, expected):
    deployable = {'attach_handles': [{'attach_type': t} for t in types]}
    assert device_tree.reported_preparation(deployable) == expected
    assert device_tree.needs_preparation(expected) == (expected != 'none')


def test_unknown_preparation_is_refused():
    with pytest.raises(ValueError, match='unknown preparation'):
        _device(preparation='flash')


def test_the_api_neither_shows_nor_sorts_by_preparation():
    """Showing the column would take a new microversion."""
    from cyborg.api.controllers.v2 import deployables
    assert 'preparation' not in deployables._COLUMNS
    assert {'name', 'parent_id', 'root_id'} <= deployables._COLUMNS
