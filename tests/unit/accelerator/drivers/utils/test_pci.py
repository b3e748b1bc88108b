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

"""cyborg.accelerator.drivers.utils.pci: address spellings and the
attributes of PCI functions, on fixture hosts."""

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from tests.fixtures.hosts import hosts


@pytest.mark.parametrize('text,expected', [
    ('0000:3b:00.0', '0000:3b:00.0'),
    ('00000000:3B:00.0', '0000:3b:00.0'),   # nvidia-smi
    ('0000:5E:00.0', '0000:5e:00.0'),       # fpgainfo
    ('3b:00.0', '0000:3b:00.0'),            # old adf_ctl, lspci without -D
    ('pci_0000_84_00_0', '0000:84:00.0'),   # libvirt nodedev
    ('10000:01:00.0', '10000:01:00.0'),     # VMD domain
    ('0000:3b:1f.7', '0000:3b:1f.7'),
    (' 0000:3b:00.4\n', '0000:3b:00.4'),
])
def test_normalize_address(text, expected):
    assert pci.normalize_address(text) == expected
    assert pci.is_valid_address(text)


@pytest.mark.parametrize('text', [
    '', '0000:3b:00', '0000:3b:20.0', '0000:3b:00.8', '000:3b:00.0',
    '000000000:3b:00.0', '0000:3b:0.0', '0000-3b-00.0', 'PCI:0000:3b:00',
    '0000:3g:00.0', '0000:3b:00.0.1', 'pci_0000_84_00',
])
def test_invalid_addresses_are_refused(text):
    assert not pci.is_valid_address(text)
    with pytest.raises(errors.InvalidPCIAddress):
        pci.parse_address(text)


def test_non_string_address_is_refused():
    with pytest.raises(errors.InvalidPCIAddress):
        pci.parse_address(None)


def test_address_fields_order_and_attach_info():
    addr = pci.parse_address('00000000:3B:01.2')
    assert (addr.domain, addr.bus, addr.slot, addr.function) == (
        0, 0x3b, 1, 2)
    assert addr.attach_info() == {'domain': '0000', 'bus': '3b',
                                  'device': '01', 'function': '2'}
    assert sorted([pci.parse_address('0000:3b:01.0'),
                   pci.parse_address('0000:3b:00.7')])[0] == (
        pci.parse_address('0000:3b:00.7'))
    with pytest.raises(errors.InvalidPCIAddress):
        pci.PCIAddress(0, 0x100, 0, 0)


def test_device_path_normalises():
    assert pci.device_path('00000000:3B:00.0', 'vendor') == (
        '/sys/bus/pci/devices/0000:3b:00.0/vendor')


@pytest.fixture
def gpu_host(tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    return tree, sysfs.HostRoot(tree.root)


def test_ids_class_and_revision(gpu_host):
    _tree, host = gpu_host
    assert pci.vendor_id(host, hosts.PGPU) == 0x10de
    assert pci.device_id(host, hosts.PGPU) == 0x1eb8
    assert pci.subsystem_vendor_id(host, hosts.PGPU) == 0x10de
    assert pci.subsystem_device_id(host, hosts.PGPU) == 0x12a2
    assert pci.class_code(host, hosts.PGPU) == 0x030200
    assert pci.revision(host, hosts.PGPU) == 0xa1


def test_ids_of_a_missing_device_are_none(gpu_host):
    _tree, host = gpu_host
    assert pci.vendor_id(host, '0000:99:00.0') is None
    assert pci.numa_node(host, '0000:99:00.0') is None
    assert pci.driver(host, '0000:99:00.0') is None
    assert not pci.exists(host, '0000:99:00.0')
    with pytest.raises(errors.DeviceNotFound):
        pci.read_device(host, '0000:99:00.0')


def test_numa_node(gpu_host, tmp_path):
    _tree, host = gpu_host
    assert pci.numa_node(host, hosts.PGPU) == 0
    assert pci.numa_node(host, hosts.VGPU_PARENT) == 1
    qat = hosts.qat_4xxx_host(str(tmp_path / 'qat'))
    # -1: no affinity known (single socket, VMs).
    assert qat.read(qat.dev(hosts.QAT_PF, 'numa_node')) == '-1\n'
    assert pci.numa_node(sysfs.HostRoot(qat.root), hosts.QAT_PF) is None


def test_driver_bound_and_unbound(gpu_host):
    tree, host = gpu_host
    assert pci.driver(host, hosts.PGPU) == 'nvidia'
    tree.unbind(hosts.PGPU)
    assert pci.driver(host, hosts.PGPU) is None
    tree.bind(hosts.PGPU, 'vfio-pci')
    assert pci.driver(host, hosts.PGPU) == 'vfio-pci'
    assert pci.driver_devices(host, 'vfio-pci') == [
        pci.parse_address(hosts.PGPU)]
    assert pci.driver_devices(host, 'nvidia') == [
        pci.parse_address(hosts.VGPU_PARENT)]
    assert pci.driver_devices(host, 'nouveau') == []


def test_iommu_group(gpu_host):
    tree, host = gpu_host
    group = pci.iommu_group(host, hosts.PGPU)
    assert group == tree.iommu_group(hosts.PGPU)
    assert pci.iommu_group_devices(host, group) == [
        pci.parse_address(hosts.PGPU)]
    assert pci.iommu_group_devices(host, 9999) == []
    tree.remove(tree.dev(hosts.PGPU, 'iommu_group'))
    assert pci.iommu_group(host, hosts.PGPU) is None


def test_iommu_group_that_is_no_number_raises(gpu_host):
    tree, host = gpu_host
    tree.remove(tree.dev(hosts.PGPU, 'iommu_group'))
    tree.write('sys/kernel/iommu_groups/abc/type', 'DMA')
    tree.link(tree.dev(hosts.PGPU, 'iommu_group'),
              'sys/kernel/iommu_groups/abc')
    with pytest.raises(errors.SysfsValueError):
        pci.iommu_group(host, hosts.PGPU)


def test_pcie_root_and_real_path(gpu_host):
    _tree, host = gpu_host
    assert pci.pcie_root(host, hosts.PGPU) == 'pci0000:3a'
    assert pci.real_path(host, hosts.PGPU) == (
        '/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0')
    assert pci.pcie_root(host, '0000:99:00.0') is None
    assert pci.real_path(host, '0000:99:00.0') is None


def test_uevent(gpu_host):
    tree, host = gpu_host
    assert pci.uevent(host, hosts.PGPU) == {
        'DRIVER': 'nvidia', 'PCI_CLASS': '30200', 'PCI_ID': '10DE:1EB8',
        'PCI_SUBSYS_ID': '10DE:12A2', 'PCI_SLOT_NAME': '0000:3b:00.0',
        'MODALIAS': 'pci:v000010DEd00001EB8sv000010DEsd000012A2bc03sc02i00'}
    tree.unbind(hosts.PGPU)
    assert 'DRIVER' not in pci.uevent(host, hosts.PGPU)


def test_read_device(gpu_host):
    tree, host = gpu_host
    dev = pci.read_device(host, '00000000:3B:00.0')
    assert dev == pci.PCIDevice(
        address=pci.parse_address(hosts.PGPU), vendor_id=0x10de,
        device_id=0x1eb8, subsystem_vendor_id=0x10de,
        subsystem_device_id=0x12a2, class_code=0x030200, numa_node=0,
        driver='nvidia', iommu_group=tree.iommu_group(hosts.PGPU),
        physfn=None)
    assert not dev.is_vf


def test_list_devices_filters_on_vendor_and_class(gpu_host):
    _tree, host = gpu_host
    # The root ports (Intel bridges) are PCI devices too.
    assert len(pci.list_addresses(host)) == 4
    gpus = pci.list_devices(host, vendor=0x10de, classes=(0x0300, 0x0302))
    assert [str(d.address) for d in gpus] == [hosts.PGPU, hosts.VGPU_PARENT]
    assert pci.list_devices(host, vendor=0x10de, classes=(0x0300,)) == []
    bridges = pci.list_devices(host, classes=(0x0604,))
    assert [str(d.address) for d in bridges] == ['0000:3a:00.0',
                                                 '0000:d7:00.0']
    assert len(pci.list_devices(host)) == 4


def test_list_devices_same_vendor_other_class(tmp_path):
    # Huawei 19e5 spans NVMe SSDs and NPUs: filter on class too.
    tree = hosts.nvme_host(str(tmp_path / 'nvme'))
    hosts.ascend_host(str(tmp_path / 'nvme'))
    host = sysfs.HostRoot(tree.root)
    npus = pci.list_devices(host, vendor=0x19e5, classes=(0x1200,))
    ssds = pci.list_devices(host, vendor=0x19e5, classes=(0x0108,))
    assert [str(d.address) for d in npus] == [hosts.ASCEND]
    assert [str(d.address) for d in ssds] == [hosts.NVME_BOOT,
                                              hosts.NVME_DATA]


def test_list_skips_entries_that_are_no_address(gpu_host):
    tree, host = gpu_host
    tree.write('sys/bus/pci/devices/README', 'not a device')
    assert len(pci.list_addresses(host)) == 4


def test_list_devices_on_an_empty_root(tmp_path):
    assert pci.list_devices(sysfs.HostRoot(str(tmp_path))) == []


def test_list_devices_skips_a_device_gone_since_listed(gpu_host):
    tree, host = gpu_host
    # What a reader sees when a function is removed while it lists: the
    # bus link is still there, the device directory is not.
    tree.raw_link('sys/bus/pci/devices/0000:3b:00.1',
                  '../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1')
    assert pci.parse_address('0000:3b:00.1') in pci.list_addresses(host)
    with pytest.raises(errors.DeviceNotFound):
        pci.read_device(host, '0000:3b:00.1')
    assert [str(d.address) for d in pci.list_devices(host)] == [
        '0000:3a:00.0', hosts.PGPU, '0000:d7:00.0', hosts.VGPU_PARENT]


def test_the_address_a_handle_names():
    info = {'domain': '0000', 'bus': '3b', 'device': '02', 'function': '1'}
    assert str(pci.handle_address(info)) == '0000:3b:02.1'


@pytest.mark.parametrize('info', [
    {'domain': '0000', 'bus': '3b', 'device': '02'},
    {'domain': '0000', 'bus': 'zz', 'device': '02', 'function': '1'},
    None,
])
def test_a_handle_without_an_address_is_refused(info):
    with pytest.raises(errors.InvalidPCIAddress):
        pci.handle_address(info)
