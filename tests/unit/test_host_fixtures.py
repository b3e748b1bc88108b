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

"""The fixture hosts look like a real sysfs: relative links from
sys/bus/pci/devices into sys/devices/pci<dom>:<bus>/..., every attribute
ending in a newline, in the kernel's formats, and nothing outside the
tree."""

import os
import re
import subprocess

import pytest

from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone import demo_host
from cyborg.allinone import fake_ip
from cyborg.allinone import fake_tools as tools
from cyborg.allinone.host_tree import HostTree
from tests.fixtures.hosts import hosts

BUILDERS = [hosts.nvidia_gpu_host, hosts.nvidia_vgpu17_host,
            hosts.qat_4xxx_host, hosts.sriov_nic_host, hosts.nvme_host,
            hosts.alveo_host, hosts.ascend_host, hosts.intel_fpga_dfl_host]
BUILDERS += [hosts.nvidia_ampere_host, hosts.amd_gpu_host]
SRIOV_VF_DEVICE = r'0|[1-9a-f][0-9a-f]{0,3}'
HEX_ATTRS = {'vendor': r'0x[0-9a-f]{4}', 'device': r'0x[0-9a-f]{4}',
             'subsystem_vendor': r'0x[0-9a-f]{4}',
             'subsystem_device': r'0x[0-9a-f]{4}',
             'class': r'0x[0-9a-f]{6}', 'revision': r'0x[0-9a-f]{2}',
             'numa_node': r'-?\d+', 'driver_override': r'\(null\)',
             # %x of a u16 (drivers/pci/iov.c): no 0x, no zero padding.
             'sriov_vf_device': SRIOV_VF_DEVICE,
             'modalias': r'pci:v[0-9A-F]{8}d[0-9A-F]{8}sv[0-9A-F]{8}'
                         r'sd[0-9A-F]{8}bc[0-9A-F]{2}sc[0-9A-F]{2}'
                         r'i[0-9A-F]{2}'}


def _walk(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            yield os.path.join(dirpath, name)


@pytest.fixture(params=BUILDERS, ids=lambda f: f.__name__)
def tree(request, tmp_path):
    return request.param(str(tmp_path / 'host'))


def test_every_link_is_relative_and_stays_inside(tree):
    links = [p for p in _walk(tree.root) if os.path.islink(p)]
    assert links
    for link in links:
        target = os.readlink(link)
        assert not os.path.isabs(target), link
        real = os.path.realpath(link)
        assert real.startswith(tree.root + os.sep), link
        assert os.path.exists(real), link


def test_bus_links_lead_into_the_topology(tree):
    devices = tree.abs('sys/bus/pci/devices')
    for name in os.listdir(devices):
        real = os.path.relpath(os.path.realpath(os.path.join(devices, name)),
                               tree.root)
        parts = real.split(os.sep)
        assert parts[:2] == ['sys', 'devices'], real
        assert re.match(r'^pci[0-9a-f]{4}:[0-9a-f]{2}$', parts[2]), real
        assert parts[-1] == name


def test_attributes_end_in_newline_and_have_kernel_formats(tree):
    for name, func in tree.functions.items():
        for attr, pattern in HEX_ATTRS.items():
            path = tree.abs(tree.dev(name, attr))
            if attr == 'sriov_vf_device' and not os.path.exists(path):
                continue
            text = tree.read(tree.dev(name, attr))
            assert text.endswith('\n'), (name, attr)
            assert re.fullmatch(pattern, text[:-1]), (name, attr, text)
        uevent = tree.read(tree.dev(name, 'uevent'))
        assert 'PCI_SLOT_NAME=%s\n' % name in uevent
        assert 'PCI_CLASS=%X\n' % func.class_code in uevent


def test_bound_devices_and_their_drivers_point_at_each_other(tree):
    drivers = tree.abs('sys/bus/pci/drivers')
    for driver in os.listdir(drivers):
        for name in os.listdir(os.path.join(drivers, driver)):
            if name in ('bind', 'unbind', 'new_id', 'remove_id'):
                continue
            link = tree.abs(tree.dev(name, 'driver'))
            assert os.path.realpath(link) == os.path.join(drivers, driver)
            assert 'DRIVER=%s\n' % driver in tree.read(tree.dev(name,
                                                                'uevent'))


def test_iommu_groups_list_their_devices(tree):
    for name in tree.functions:
        group = tree.iommu_group(name)
        member = tree.abs('sys/kernel/iommu_groups/%d/devices/%s'
                          % (group, name))
        assert os.path.realpath(member) == os.path.realpath(
            tree.abs(tree.dev(name)))


def test_vfs_have_physfn_and_no_sriov_files(tree):
    for name in tree.functions:
        physfn = tree.abs(tree.dev(name, 'physfn'))
        if not os.path.islink(physfn):
            continue
        assert not os.path.exists(tree.abs(tree.dev(name,
                                                    'sriov_totalvfs')))
        pf = os.path.basename(os.readlink(physfn))
        assert os.readlink(physfn) == '../' + pf
        virtfns = [os.readlink(tree.abs(tree.dev(pf, v)))
                   for v in os.listdir(tree.abs(tree.dev(pf)))
                   if v.startswith('virtfn')]
        assert '../' + name in virtfns
        assert int(tree.read(tree.dev(pf, 'sriov_numvfs'))) == len(virtfns)


def test_vf_addresses_follow_offset_and_stride(tree):
    # The kernel computes VF addresses from sriov_offset/sriov_stride;
    # the fixtures place them the same way.
    for name in tree.functions:
        if not os.path.exists(tree.abs(tree.dev(name, 'sriov_totalvfs'))):
            continue
        for entry in os.listdir(tree.abs(tree.dev(name))):
            if entry.startswith('virtfn'):
                index = int(entry[len('virtfn'):])
                target = os.readlink(tree.abs(tree.dev(name, entry)))
                assert target == '../' + tree.vf_address(name, index)


# What every fixture host must satisfy to look like a real sysfs: the
# other fixture modules run these checks over their own builders.
REAL_HOST_CHECKS = [
    test_every_link_is_relative_and_stays_inside,
    test_bus_links_lead_into_the_topology,
    test_attributes_end_in_newline_and_have_kernel_formats,
    test_bound_devices_and_their_drivers_point_at_each_other,
    test_iommu_groups_list_their_devices,
    test_vfs_have_physfn_and_no_sriov_files,
    test_vf_addresses_follow_offset_and_stride,
]


def test_nvme_host_marks_the_boot_disk(tmp_path):
    tree = hosts.nvme_host(str(tmp_path))
    mounts = tree.read('proc/mounts')
    assert '/dev/nvme0n1p2 / ext4' in mounts
    assert os.path.realpath(tree.abs('sys/class/nvme/nvme0/device')) == (
        os.path.realpath(tree.abs('sys/bus/pci/devices/' + hosts.NVME_BOOT)))
    assert tree.read('sys/class/nvme/nvme1/address') == (
        hosts.NVME_DATA + '\n')
    assert os.path.isdir(tree.abs('sys/block/nvme0n1/nvme0n1p2'))
    assert not os.path.exists(tree.abs('sys/block/nvme1n1/nvme1n1p1'))


def test_alveo_functions_share_bus_and_slot(tmp_path):
    tree = hosts.alveo_host(str(tmp_path))
    mgmt = tree.functions[hosts.ALVEO_MGMT]
    user = tree.functions[hosts.ALVEO_USER]
    assert (mgmt.device, user.device) == (0x5004, 0x5005)
    assert hosts.ALVEO_MGMT[:-1] == hosts.ALVEO_USER[:-1]
    assert os.path.dirname(mgmt.path) == os.path.dirname(user.path)


def test_dfl_fpga_region_leads_to_the_card(tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    real = host.host_path(host.resolve('/sys/class/fpga_region/region0'))
    assert hosts.DFL_PF in real.split('/')
    assert sysfs.list_dir(host, '/sys/class/fpga_region/region0') == [
        'dfl-fme.0', 'dfl-port.0']
    afu = sysfs.read_text(host, '/sys/class/fpga_region/region0/'
                          'dfl-port.0/afu_id')
    compat = sysfs.read_text(host,
                             '/sys/class/fpga_region/region1/compat_id')
    assert re.fullmatch('[0-9a-f]{32}', afu)
    assert re.fullmatch('[0-9a-f]{32}', compat)
    assert sysfs.read_int(host, '/sys/class/fpga_region/region0/dfl-fme.0/'
                          'bitstream_id', 16) == hosts.DFL_BITSTREAM_ID
    assert sysfs.read_text(host, '/sys/class/fpga_manager/fpga0/'
                           'state') == 'operating'
    assert pci.subsystem_device_id(host, hosts.DFL_PF) == 0x1770
    # fpgainfo prints the PR interface id with dashes, sysfs without.
    out = runner.CommandRunner(search_path=[tree.tools_dir]).run(
        ['fpgainfo', 'fme']).check().stdout
    # "Key<spaces>: value"; keys contain colons ("PCIe s:b:d.f").
    fields = dict(re.split(r'\s+: ', line, maxsplit=1)
                  for line in out.splitlines()[1:])
    assert fields['Pr Interface Id'].replace('-', '') == compat
    assert pci.normalize_address(fields['PCIe s:b:d.f']) == hosts.DFL_PF


@pytest.mark.parametrize('build', [hosts.nvidia_gpu_host, hosts.alveo_host,
                                   hosts.intel_fpga_dfl_host])
def test_lspci_agrees_with_sysfs(tmp_path, build):
    tree = build(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    run = runner.CommandRunner(search_path=[tree.tools_dir])
    lines = run.run(['lspci', '-nnn', '-D']).check().stdout.splitlines()
    assert len(lines) == len(pci.list_addresses(host))
    line_re = re.compile(r'^(\S+) .* \[([0-9a-f]{4})\]: .* '
                         r'\[([0-9a-f]{4}):([0-9a-f]{4})\]'
                         r'(?: \(rev ([0-9a-f]{2})\))?$')
    for line in lines:
        match = line_re.match(line)
        assert match, line
        addr, cls, vendor, device, rev = match.groups()
        dev = pci.read_device(host, addr)
        assert (dev.class_code >> 8, dev.vendor_id, dev.device_id) == (
            int(cls, 16), int(vendor, 16), int(device, 16))
        assert pci.revision(host, addr) == int(rev or '0', 16)


def test_lspci_agrees_with_sysfs_on_the_amd_host(tmp_path):
    test_lspci_agrees_with_sysfs(tmp_path, hosts.amd_gpu_host)


def test_ampere_vfs_offer_the_types_one_instance_each(tmp_path):
    from cyborg.accelerator.drivers.utils import mdev
    from cyborg.accelerator.drivers.utils import sriov
    tree = hosts.nvidia_ampere_host(str(tmp_path))
    host = sysfs.HostRoot(tree.root)
    assert [str(vf) for vf in sriov.vfs(host, hosts.AMPERE_PF)] == (
        hosts.AMPERE_VFS)
    assert mdev.supported_type_ids(host, hosts.AMPERE_PF) == []
    for vf in hosts.AMPERE_VFS:
        types = mdev.supported_types(host, vf)
        assert [(t.type_id, t.capacity) for t in types] == [
            ('nvidia-566', 1), ('nvidia-568', 1)]
        assert types[1].description_fields()['max_instance'] == '2'


def test_nvidia_smi_health_queries_and_dmesg(tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    run = runner.CommandRunner(search_path=[tree.tools_dir])
    args = tools.health_query_args(('remapped_rows.pending',
                                    'remapped_rows.failure'))
    out = run.run(['nvidia-smi', *args]).check().stdout
    assert out.splitlines() == ['00000000:3B:00.0, No, No',
                                '00000000:D8:00.0, No, No']
    tools.write_tool(tree.tools_dir, 'nvidia-smi', tools.health_replies(
        [], invalid=('retired_pages.pending',)))
    failed = run.run(['nvidia-smi', *tools.health_query_args(
        ('retired_pages.pending',))])
    assert failed.returncode == 2 and 'not a valid field' in failed.stdout
    tools.write_dmesg(tree.tools_dir, [tools.xid_line(hosts.PGPU, 79)])
    log = run.run(['dmesg']).check().stdout
    assert 'NVRM: Xid (PCI:0000:3b:00): 79, pid=' in log
    tools.write_dmesg(tree.tools_dir, [], rc=1)
    assert run.run(['dmesg']).returncode == 1



def test_sriov_vf_device_is_checked_as_the_kernel_prints_it(tmp_path):
    # iov.c prints sriov_vf_device with "%x": a DH895xCC's VF id 0x0443
    # reads "443", without 0x and without zero padding.
    tree = HostTree(str(tmp_path / 'host'))
    tree.add_pci('0000:3d:00.0', 0x8086, 0x0435, 0x0b4000, driver='dh895xcc')
    tree.add_sriov('0000:3d:00.0', ['0000:3d:01.0'], 0x0443, total_vfs=32,
                   offset=8)
    assert tree.read(tree.dev('0000:3d:00.0', 'sriov_vf_device')) == '443\n'
    test_attributes_end_in_newline_and_have_kernel_formats(tree)
    for spelling in ('443', '154c', '1889', '0'):
        assert re.fullmatch(SRIOV_VF_DEVICE, spelling), spelling
    for spelling in ('0x154c', '0443', '154C', '', '12345'):
        assert not re.fullmatch(SRIOV_VF_DEVICE, spelling), spelling


def test_a_reboot_forgets_the_kernel_runtime_state(tmp_path):
    """Every mdev gone, every VF's vGPU type back to 0, every NIC VF in
    no VLAN, the FPGA ports back to their factory function (unless the
    boards keep it)."""
    tree = demo_host.build(str(tmp_path / 'host'))
    parent, mdev_type = demo_host.DEMO_VGPU_PARENT, demo_host.DEMO_VGPU_TYPE
    available = tree.dev(parent, 'mdev_supported_types', mdev_type,
                         'available_instances')
    mdev_uuid = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
    assert tree.create_mdev(parent, mdev_type, mdev_uuid)
    afu = tree.dev(demo_host.DEMO_FPGA_PF, 'fpga_region', 'region0',
                   'dfl-port.0', 'afu_id')
    tree.write(afu, 'd8424dc4a4a3c413f89e433683f9040b')
    ip = os.path.join(tree.tools_dir, 'ip')
    subprocess.run([ip] + demo_host.vf_vlan_args(1, 100), check=True)
    tree.reboot(boards_keep_bitstreams=True)
    assert fake_ip.vf_settings(tree.tools_dir, demo_host.DEMO_NIC_IFNAME)[
        1] == {'vlan': 0, 'trust': False}
    assert tree.mdevs_of(parent) == []
    assert tree.read(available).strip() == str(demo_host.DEMO_VGPU_COUNT)
    assert tree.read(afu).strip() == 'd8424dc4a4a3c413f89e433683f9040b'
    tree.reboot()
    assert tree.read(afu).strip() == demo_host.DEMO_FPGA_AFU
    assert tree.refused == []

    vgpu17 = hosts.nvidia_vgpu17_host(str(tmp_path / 'vgpu17'))
    vf = hosts.vgpu17_vfs()[0]
    assert vgpu17.set_vgpu_type(vf, 1414)
    vgpu17.reboot()
    assert vgpu17.read(vgpu17.dev(vf, 'nvidia', 'current_vgpu_type')
                       ).strip() == '0'
