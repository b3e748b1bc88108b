# Copyright 2026 The Cyborg Authors.
#
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

"""cyborg.accelerator.drivers.utils.mdev: mdev types, creating and
removing mdevs, and vGPU 17+ type files, on fixture hosts.

A write to ``create``/``remove``/``current_vgpu_type`` does nothing on a
plain filesystem: the fixture's ``settle()`` then does what the kernel
(or NVIDIA's driver) does on that write (see
cyborg/allinone/host_tree.py).
"""

import errno
import os

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import mdev
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from tests.fixtures.hosts import hosts

UUID1 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
UUID2 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1002'


@pytest.fixture
def gpu(tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    return tree, sysfs.HostRoot(tree.root)


def _available(host):
    return {t.type_id: t.available_instances
            for t in mdev.supported_types(host, hosts.VGPU_PARENT)}


def test_parents_and_types(gpu):
    _tree, host = gpu
    assert mdev.mdev_parents(host) == [pci.parse_address(hosts.VGPU_PARENT)]
    assert mdev.supported_type_ids(host, hosts.VGPU_PARENT) == [
        'nvidia-222', 'nvidia-223', 'nvidia-230']
    first = mdev.get_type(host, hosts.VGPU_PARENT, 'nvidia-222')
    assert first == mdev.MdevType(
        type_id='nvidia-222', name='GRID T4-1B',
        description='num_heads=4, frl_config=45, framebuffer=1024M, '
                    'max_resolution=5120x2880, max_instance=16',
        device_api='vfio-pci', available_instances=16, devices=())
    assert first.capacity == 16
    assert first.description_fields()['max_instance'] == '16'
    assert first.description_fields()['framebuffer'] == '1024M'


def test_a_pgpu_has_no_types(gpu):
    _tree, host = gpu
    assert mdev.supported_types(host, hosts.PGPU) == []
    assert mdev.get_type(host, hosts.PGPU, 'nvidia-222') is None
    assert mdev.list_mdevs(host, hosts.PGPU) == []


def test_type_id_cannot_name_another_directory(gpu):
    _tree, host = gpu
    with pytest.raises(ValueError):
        mdev.get_type(host, hosts.VGPU_PARENT, '../../nvidia-222')


def test_parse_description_skips_items_without_value():
    assert mdev.parse_description('a=1, junk, b = x=y') == {
        'a': '1', 'b': 'x=y'}
    assert mdev.parse_description('') == {}


def test_create_and_remove_like_the_kernel(gpu):
    tree, host = gpu
    assert mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-223',
                            UUID1.upper()) == UUID1
    # What was written to the kernel attribute.
    assert tree.read(tree.dev(hosts.VGPU_PARENT, 'mdev_supported_types',
                              'nvidia-223', 'create')) == UUID1
    tree.settle()
    assert tree.refused == []
    assert mdev.mdev_exists(host, UUID1)
    assert mdev.list_mdevs(host, hosts.VGPU_PARENT) == [
        mdev.Mdev(UUID1, pci.parse_address(hosts.VGPU_PARENT), 'nvidia-223')]
    used = mdev.get_type(host, hosts.VGPU_PARENT, 'nvidia-223')
    assert used.devices == (UUID1,)
    assert (used.available_instances, used.capacity) == (7, 8)
    # Homogeneous: the other types of a time-sliced GPU drop to 0.
    assert _available(host) == {'nvidia-222': 0, 'nvidia-223': 7,
                                'nvidia-230': 0}
    with pytest.raises(errors.MdevUnavailable):
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', UUID2)
    mdev_dir = pci.real_path(host, hosts.VGPU_PARENT) + '/' + UUID1
    assert host.host_path(host.resolve('/sys/bus/mdev/devices/' + UUID1)) \
        == mdev_dir
    assert sysfs.link_name(host, mdev_dir + '/iommu_group').isdigit()

    mdev.remove_mdev(host, UUID1)
    tree.settle()
    assert not mdev.mdev_exists(host, UUID1)
    assert mdev.list_mdevs(host, hosts.VGPU_PARENT) == []
    assert _available(host) == {'nvidia-222': 16, 'nvidia-223': 8,
                                'nvidia-230': 1}


def test_two_mdevs_then_remove_one(gpu):
    tree, host = gpu
    for value in (UUID1, UUID2):
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', value)
        tree.settle()
    assert [m.uuid for m in mdev.list_mdevs(host, hosts.VGPU_PARENT)] == [
        UUID1, UUID2]
    mdev.remove_mdev(host, UUID2)
    tree.settle()
    assert _available(host) == {'nvidia-222': 15, 'nvidia-223': 0,
                                'nvidia-230': 0}
    assert mdev.get_type(host, hosts.VGPU_PARENT, 'nvidia-222').devices == (
        UUID1,)


def test_last_instance_then_unavailable(gpu):
    tree, host = gpu
    mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-230', UUID1)
    tree.settle()
    with pytest.raises(errors.MdevUnavailable):
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-230', UUID2)


def test_the_kernel_refuses_a_uuid_in_use(gpu):
    tree, host = gpu
    mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', UUID1)
    tree.settle()
    mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', UUID1)
    tree.settle()
    assert tree.refused == ['EEXIST: mdev %s exists' % UUID1]
    assert len(mdev.list_mdevs(host, hosts.VGPU_PARENT)) == 1


def test_create_errors(gpu):
    tree, host = gpu
    with pytest.raises(ValueError):
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', 'not-uuid')
    with pytest.raises(errors.MdevTypeNotFound):
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-999', UUID1)
    with pytest.raises(errors.MdevTypeNotFound):
        mdev.create_mdev(host, hosts.PGPU, 'nvidia-222', UUID1)
    # The kernel's errno on the write comes back in SysfsWriteError.
    create = tree.dev(hosts.VGPU_PARENT, 'mdev_supported_types',
                      'nvidia-222', 'create')
    os.unlink(tree.abs(create))
    os.mkdir(tree.abs(create))
    with pytest.raises(errors.SysfsWriteError) as caught:
        mdev.create_mdev(host, hosts.VGPU_PARENT, 'nvidia-222', UUID1)
    assert caught.value.errno == errno.EISDIR


def test_remove_a_missing_mdev(gpu):
    _tree, host = gpu
    with pytest.raises(errors.DeviceNotFound):
        mdev.remove_mdev(host, UUID1)
    with pytest.raises(ValueError):
        mdev.remove_mdev(host, '../../../etc')


def test_list_mdevs_ignores_other_uuid_named_entries(gpu):
    tree, host = gpu
    tree.write(tree.dev(hosts.VGPU_PARENT, UUID2, 'junk'), 'x')
    assert mdev.list_mdevs(host, hosts.VGPU_PARENT) == []


# vGPU 17+ -------------------------------------------------------------------

@pytest.fixture
def vgpu17(tmp_path):
    tree = hosts.nvidia_vgpu17_host(str(tmp_path))
    return tree, sysfs.HostRoot(tree.root)


def test_vgpu17_host_has_no_mdev(vgpu17):
    _tree, host = vgpu17
    assert mdev.mdev_parents(host) == []
    assert not sysfs.exists(host, '/sys/bus/mdev')
    assert mdev.supported_types(host, hosts.VGPU17_PF) == []
    assert not mdev.has_vendor_vgpu(host, hosts.VGPU17_PF)
    assert mdev.current_vgpu_type(host, hosts.VGPU17_PF) is None
    assert mdev.creatable_vgpu_types(host, hosts.VGPU17_PF) == []


@pytest.mark.parametrize('index', [0, 1])  # with and without a header line
def test_creatable_vgpu_types(vgpu17, index):
    tree, host = vgpu17
    vf = hosts.vgpu17_vfs()[index]
    text = tree.read(tree.dev(vf, 'nvidia', 'creatable_vgpu_types'))
    assert text.startswith('ID : vGPU Name') == (index == 0)
    types = mdev.creatable_vgpu_types(host, vf)
    assert types == [mdev.VgpuType(1414, 'NVIDIA H200X-1-18C'),
                     mdev.VgpuType(1428, 'NVIDIA H200X-141C')]
    assert [t.short_name for t in types] == ['H200X-1-18C', 'H200X-141C']
    assert mdev.current_vgpu_type(host, vf) == 0


@pytest.mark.parametrize('text,expected', [
    ('1414 : NVIDIA H200X-1-18C\n', [(1414, 'NVIDIA H200X-1-18C')]),
    ('1414 NVIDIA H200X-1-18C', [(1414, 'NVIDIA H200X-1-18C')]),
    ('NVIDIA L40S-1Q   1147', [(1147, 'NVIDIA L40S-1Q')]),
    ('ID : vGPU Name\n\n1414\n  : nothing\n', []),
    ('', []),
])
def test_parse_vgpu_types_is_lenient(text, expected):
    assert [(t.type_id, t.name) for t in mdev.parse_vgpu_types(text)] == (
        expected)


def test_set_and_clear_vgpu_type(vgpu17):
    tree, host = vgpu17
    vf = hosts.vgpu17_vfs()[2]
    mdev.set_vgpu_type(host, vf, 1414)
    tree.settle()
    assert tree.refused == []
    assert mdev.current_vgpu_type(host, vf) == 1414
    assert mdev.creatable_vgpu_types(host, vf) == []
    assert sysfs.list_dir(host, pci.device_path(vf, 'vfio-dev')) == [
        'vfio0']
    assert sysfs.exists(host, '/dev/vfio/devices/vfio0')
    mdev.set_vgpu_type(host, vf, 0)
    tree.settle()
    assert mdev.current_vgpu_type(host, vf) == 0
    assert len(mdev.creatable_vgpu_types(host, vf)) == 2
    assert sysfs.list_dir(host, pci.device_path(vf, 'vfio-dev')) == []


def test_set_vgpu_type_errors(vgpu17):
    tree, host = vgpu17
    vf = hosts.vgpu17_vfs()[0]
    for bad in (-1, '1414', True, 1.5):
        with pytest.raises(ValueError):
            mdev.set_vgpu_type(host, vf, bad)
    with pytest.raises(errors.DeviceNotFound):
        mdev.set_vgpu_type(host, hosts.VGPU17_PF, 1414)
    # NVIDIA's driver refuses a type the VF cannot take.
    mdev.set_vgpu_type(host, vf, 9999)
    tree.settle()
    assert tree.refused == ['EINVAL: type 9999 on %s' % vf]
    assert mdev.current_vgpu_type(host, vf) == 0
