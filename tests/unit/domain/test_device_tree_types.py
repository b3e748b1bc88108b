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

"""Attach types, health and preparations are enums in the device tree,
and plain strings on the wire."""

import json

import pytest

from cyborg.domain import device_tree

INFO = {'domain': '0000', 'bus': '5e', 'device': '00', 'function': '1'}


def _device(attach_type, preparation, health) -> device_tree.Device:
    return device_tree.Device(
        'NIC', 'intel', 'x710', '0000:5e:00.0', [], [
            device_tree.Deployable(
                'pf', 0, 'CUSTOM_NIC', preparation='none', children=[
                    device_tree.Deployable(
                        'vfs', 1, 'CUSTOM_NIC', preparation=preparation,
                        attach_handles=[device_tree.AttachHandle(
                            attach_type, INFO)])])],
        health=health)


def test_values_become_enum_members_at_construction():
    device = _device('PCI', 'vf', 'unhealthy')
    child = device.deployables[0].children[0]
    assert device.health is device_tree.Health.UNHEALTHY
    assert child.preparation is device_tree.Preparation.VF
    assert child.attach_handles[0].attach_type is device_tree.AttachType.PCI
    assert device.deployables[0].preparation is device_tree.Preparation.NONE


@pytest.mark.parametrize('make,message', [
    (lambda: device_tree.AttachHandle('USB', {}),
     "'USB' is not a valid AttachType"),
    (lambda: _device('PCI', 'vf', 'sick'), "'sick' is not a valid Health"),
    (lambda: device_tree.Deployable('d', 1, 'PGPU', preparation='paint'),
     "unknown preparation 'paint' of deployable d")])
def test_unknown_values_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_wire_form_holds_plain_strings():
    """Drivers pass members, older ones their values: the wire form, and
    so the report's digest and what the conductor writes, is the same."""
    typed = device_tree.tree_to_wire([_device(
        device_tree.AttachType.PCI, device_tree.Preparation.VF,
        device_tree.Health.HEALTHY)])
    plain = device_tree.tree_to_wire([_device('PCI', 'vf', 'healthy')])
    assert typed == plain
    [device] = typed
    [pf] = device['deployables']
    [vfs] = pf['children']
    for value in (device['health'], pf['preparation'], vfs['preparation'],
                  vfs['attach_handles'][0]['attach_type']):
        assert type(value) is str
    assert json.dumps(vfs['attach_handles'][0]) == (
        '{"attach_type": "PCI", "attach_info": {"domain": "0000", '
        '"bus": "5e", "device": "00", "function": "1"}}')
    assert device_tree.tree_digest(typed) == device_tree.tree_digest(plain)


def test_members_read_as_their_values():
    assert str(device_tree.Preparation.VGPU_TYPE) == 'vgpu_type'
    assert '%s' % device_tree.Health.HEALTHY == 'healthy'
    assert f'{device_tree.AttachType.MDEV}' == 'MDEV'
    assert device_tree.Preparation.MDEV == 'mdev'


def test_the_declared_preparation_defaults_by_attach_type():
    mdev = device_tree.Deployable('d', 1, 'VGPU', attach_handles=[
        device_tree.AttachHandle('MDEV', INFO)])
    pci = device_tree.Deployable('d', 1, 'PGPU', attach_handles=[
        device_tree.AttachHandle('PCI', INFO)])
    assert mdev.declared_preparation() is device_tree.Preparation.MDEV
    assert pci.declared_preparation() is device_tree.Preparation.NONE
    pci.preparation = device_tree.Preparation.VFIO
    assert pci.declared_preparation() is device_tree.Preparation.VFIO
