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

"""cyborg.accelerator.drivers.utils.sriov: PFs, VFs and netdevs on the
NIC, QAT and vGPU 17+ fixture hosts.

A write to ``sriov_numvfs`` does nothing on a plain filesystem: the
fixture's ``settle()`` then does what the kernel does on that write.
"""

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from tests.fixtures.hosts import hosts


def _addrs(values):
    return [str(v) for v in values]


@pytest.fixture
def nic(tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    return tree, sysfs.HostRoot(tree.root)


def test_total_and_num_vfs(nic):
    _tree, host = nic
    assert sriov.total_vfs(host, hosts.X710_PF) == 64
    assert sriov.num_vfs(host, hosts.X710_PF) == 2
    assert sriov.total_vfs(host, hosts.E810_PF) == 128
    # A VF has no sriov_* files.
    assert sriov.total_vfs(host, hosts.X710_VFS[0]) is None
    assert sriov.num_vfs(host, hosts.X710_VFS[0]) is None


def test_pf_and_vf_roles(nic):
    _tree, host = nic
    assert sriov.is_pf(host, hosts.X710_PF)
    assert not sriov.is_vf(host, hosts.X710_PF)
    assert sriov.is_vf(host, hosts.X710_VFS[1])
    assert not sriov.is_pf(host, hosts.X710_VFS[1])


def test_vfs_and_physfn(nic):
    _tree, host = nic
    assert _addrs(sriov.vfs(host, hosts.X710_PF)) == hosts.X710_VFS
    assert _addrs(sriov.vfs(host, hosts.E810_PF)) == hosts.E810_VFS
    assert str(sriov.physfn(host, hosts.E810_VFS[1])) == hosts.E810_PF
    assert sriov.physfn(host, hosts.E810_PF) is None
    assert sriov.vfs(host, hosts.X710_VFS[0]) == []
    assert sriov.vf_index(host, hosts.E810_VFS[1]) == 1
    assert sriov.vf_index(host, hosts.E810_PF) is None


def test_vf_of_a_pf_without_driver(nic):
    _tree, host = nic
    pf = sriov.physfn(host, hosts.E810_ORPHAN_VF)
    assert str(pf) == hosts.E810_UNBOUND_PF
    assert pci.driver(host, pf) is None
    assert pci.driver(host, hosts.E810_ORPHAN_VF) is None
    dev = pci.read_device(host, hosts.E810_ORPHAN_VF)
    assert dev.is_vf and dev.physfn == pf and dev.device_id == 0x1889


def test_vf_inherits_numa_and_vendor_ids(nic):
    _tree, host = nic
    vf = pci.read_device(host, hosts.E810_VFS[0])
    assert (vf.vendor_id, vf.device_id, vf.numa_node) == (0x8086, 0x1889, 1)
    assert vf.driver == 'iavf'


def test_netdevs(nic):
    tree, host = nic
    assert sriov.netdevs(host, hosts.X710_PF) == ['ens785f0']
    assert sriov.netdevs(host, hosts.X710_VFS[0]) == ['ens785f0v0']
    # On vfio-pci a VF has no netdev.
    assert pci.driver(host, hosts.X710_VFS[1]) == 'vfio-pci'
    assert sriov.netdevs(host, hosts.X710_VFS[1]) == []
    assert str(sriov.netdev_address(host, 'ens801f0v1')) == (
        hosts.E810_VFS[1])
    assert sriov.netdev_address(host, 'eth9') is None
    tree.write('sys/devices/virtual/net/lo/address', '00:00:00:00:00:00')
    tree.link('sys/class/net/lo', 'sys/devices/virtual/net/lo')
    assert sriov.netdev_address(host, 'lo') is None


def test_virtfn_links_are_ordered_by_index_not_text(tmp_path):
    tree = hosts.nvidia_vgpu17_host(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    vfs = sriov.vfs(host, hosts.VGPU17_PF)
    assert _addrs(vfs) == hosts.vgpu17_vfs()
    assert str(vfs[4]) == '0000:41:01.0'
    assert str(vfs[10]) == '0000:41:01.6'
    assert list(sriov.vf_map(host, hosts.VGPU17_PF)) == list(range(12))
    assert sriov.vf_index(host, '0000:41:01.6') == 10


def test_nvidia_vf_reuses_the_pf_device_id(tmp_path):
    tree = hosts.nvidia_vgpu17_host(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    vf = hosts.vgpu17_vfs()[0]
    assert pci.device_id(host, vf) == pci.device_id(host, hosts.VGPU17_PF)
    assert sriov.is_vf(host, vf) and sriov.is_pf(host, hosts.VGPU17_PF)


def test_qat_vfs_unbound_or_on_vfio(tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    vfs = sriov.vfs(host, hosts.QAT_PF)
    assert _addrs(vfs) == hosts.QAT_VFS
    assert [pci.driver(host, vf) for vf in vfs] == [
        'vfio-pci', None, None, None]
    assert sysfs.read_text(host, pci.device_path(
        hosts.QAT_PF, 'qat', 'cfg_services')) == 'sym;asym'
    group = pci.iommu_group(host, vfs[0])
    assert (tmp_path / 'dev' / 'vfio' / str(group)).exists()


# Enabling and disabling VFs ----------------------------------------------

def test_disable_then_enable_vfs_like_the_kernel(nic):
    tree, host = nic
    sriov.set_num_vfs(host, hosts.E810_PF, 0)
    tree.settle()
    assert sriov.num_vfs(host, hosts.E810_PF) == 0
    assert sriov.vfs(host, hosts.E810_PF) == []
    assert not pci.exists(host, hosts.E810_VFS[0])
    assert sriov.netdev_address(host, 'ens801f0v0') is None
    sriov.set_num_vfs(host, hosts.E810_PF, 10)
    tree.settle()
    assert tree.refused == []
    vfs = sriov.vfs(host, hosts.E810_PF)
    assert sriov.num_vfs(host, hosts.E810_PF) == 10
    assert _addrs(vfs[:2]) == hosts.E810_VFS
    assert str(vfs[9]) == '0000:af:02.1'
    assert [pci.driver(host, vf) for vf in vfs] == ['iavf'] * 10
    assert all(sriov.physfn(host, vf) == pci.parse_address(hosts.E810_PF)
               for vf in vfs)


def test_vfs_unbound_without_autoprobe(nic):
    tree, host = nic
    sriov.set_num_vfs(host, hosts.X710_PF, 0)
    tree.settle()
    sysfs.write_text(host, pci.device_path(hosts.X710_PF,
                                           'sriov_drivers_autoprobe'), '0')
    sriov.set_num_vfs(host, hosts.X710_PF, 3)
    tree.settle()
    assert [pci.driver(host, vf)
            for vf in sriov.vfs(host, hosts.X710_PF)] == [None] * 3


def test_same_count_is_a_no_op(nic):
    tree, host = nic
    before = tree.read(tree.dev(hosts.X710_PF, 'sriov_numvfs'))
    sriov.set_num_vfs(host, hosts.X710_PF, 2)
    assert tree.read(tree.dev(hosts.X710_PF, 'sriov_numvfs')) == before


@pytest.mark.parametrize('pf,count,reason', [
    (hosts.X710_PF, 65, 'at most 64'),
    (hosts.X710_PF, 4, '2 VFs already enabled'),
    (hosts.E810_UNBOUND_PF, 0, 'no driver bound'),
    (hosts.X710_VFS[0], 1, 'not an SR-IOV physical function'),
])
def test_refused_before_writing(nic, pf, count, reason):
    tree, host = nic
    with pytest.raises(errors.SriovError) as caught:
        sriov.set_num_vfs(host, pf, count)
    assert reason in str(caught.value)
    tree.settle()
    assert tree.refused == []
    assert len(sriov.vfs(host, hosts.X710_PF)) == 2


@pytest.mark.parametrize('count', [-1, True, '2', 1.0])
def test_invalid_count(nic, count):
    _tree, host = nic
    with pytest.raises(ValueError):
        sriov.set_num_vfs(host, hosts.X710_PF, count)


def test_the_fixture_kernel_refuses_like_iov_c(nic):
    # Raw writes, past the helper's checks: the emulated kernel refuses.
    tree, host = nic
    path = pci.device_path(hosts.X710_PF, 'sriov_numvfs')
    sysfs.write_text(host, path, '5')
    tree.settle()
    sysfs.write_text(host, path, '99')
    tree.settle()
    sysfs.write_text(host, pci.device_path(hosts.E810_UNBOUND_PF,
                                           'sriov_numvfs'), '0')
    tree.settle()
    assert tree.refused == [
        'EBUSY: 2 VFs already enabled on %s' % hosts.X710_PF,
        'ERANGE: 99 VFs on %s' % hosts.X710_PF,
        'ENOENT: no driver bound to %s' % hosts.E810_UNBOUND_PF]
    assert sriov.num_vfs(host, hosts.X710_PF) == 2
    assert sriov.num_vfs(host, hosts.E810_UNBOUND_PF) == 1
