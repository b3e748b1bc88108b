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

"""The generic PCI driver: device_spec matching as Nova's (ids, address
globs and regular expressions, a PF's address for its VFs), what it
reports, the pitfalls and every kind of bad spec."""

import json

import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.pci import device_spec
from cyborg.accelerator.drivers.pci import driver as pci_driver
from cyborg.accelerator.drivers.utils import pci
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts

GROUP = 'pci_driver'


def _driver(conf, tree, *specs):
    conf.set_override('host_root', tree.root, group='agent')
    conf.set_override('device_spec', [s if isinstance(s, str)
                                      else json.dumps(s) for s in specs],
                      group=GROUP)
    return pci_driver.PCIDriver(conf)


def _addresses(devices):
    return [d.address for d in devices]


def test_no_spec_reports_nothing(conf, tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    assert _driver(conf, tree).discover() == []


def test_a_gpu_by_ids(conf, tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    driver = _driver(conf, tree, {
        'vendor_id': '10de', 'product_id': '1eb8', 'address': '*:3b:*.*',
        'resource_class': 'pgpu', 'traits': 'HW_GPU_API_VULKAN,tesla-t4'})
    wire = device_tree.tree_to_wire(driver.discover())
    assert wire == [{
        'type': 'GPU', 'vendor': '0x10de', 'model': 'PCI 10de:1eb8',
        'address': hosts.PGPU,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info': {
            'domain': '0000', 'bus': '3b', 'device': '00',
            'function': '0'}}],
        'deployables': [{
            'name': '0000_3b_00_0', 'num_accelerators': 1,
            'resource_class': 'PGPU',
            'traits': ['CUSTOM_PCI_NVIDIA', 'CUSTOM_PCI_PRODUCT_ID_1EB8',
                       'CUSTOM_TESLA_T4', 'HW_GPU_API_VULKAN'],
            'attach_handles': [{'attach_type': 'PCI', 'attach_info': {
                'domain': '0000', 'bus': '3b', 'device': '00',
                'function': '0'}}],
            'attributes': {}, 'driver_name': 'nvidia',
            'preparation': 'none'}],
        'std_board_info': {
            'vendor_id': '0x10de', 'device_id': '0x1eb8',
            'class': '0x030200', 'numa_node': 0,
            'subsystem_vendor_id': '0x10de',
            'subsystem_device_id': '0x12a2'},
        'vendor_board_info': None, 'health': 'healthy', 'driver': None}]
    assert device_tree.tree_to_wire(driver.discover()) == wire


def test_default_resource_class_and_bridges(conf, tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    # "*" would match the root ports too: bridges are never reported.
    devices = _driver(conf, tree, {'vendor_id': '*'}).discover()
    assert _addresses(devices) == [hosts.PGPU, hosts.VGPU_PARENT]
    assert devices[0].deployables[0].resource_class == (
        'CUSTOM_PCI_10DE_1EB8')


@pytest.mark.parametrize('address, expected', [
    ('0000:d8:00.0', [hosts.VGPU_PARENT]),
    ('d8:00.0', [hosts.VGPU_PARENT]),
    (':d8:00.', [hosts.VGPU_PARENT]),
    ('*:*:*.*', [hosts.PGPU, hosts.VGPU_PARENT]),
    ('*:3b:00.1', []),
    ('.0', [hosts.PGPU, hosts.VGPU_PARENT]),
    ({'bus': '[0-9a-c].', 'function': '0'}, [hosts.PGPU]),
    ({'domain': '0{4}', 'bus': 'D8'}, [hosts.VGPU_PARENT]),
    ({'bus': '3'}, []),  # the whole field must match
])
def test_address_forms(conf, tmp_path, address, expected):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    driver = _driver(conf, tree, {'vendor_id': '10de', 'address': address})
    assert _addresses(driver.discover()) == expected


def test_first_matching_spec_wins(conf, tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    devices = _driver(conf, tree, [
        {'address': '0000:3b:00.0', 'resource_class': 'CUSTOM_FIRST'},
        {'vendor_id': '10de', 'resource_class': 'CUSTOM_SECOND'}]
    ).discover()
    assert [d.deployables[0].resource_class for d in devices] == [
        'CUSTOM_FIRST', 'CUSTOM_SECOND']


def test_pf_address_stands_for_its_vfs(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _driver(conf, tree, {'address': hosts.X710_PF}).discover()
    assert _addresses(devices) == hosts.X710_VFS
    assert devices[0].type == 'NIC'


def test_pf_and_its_vfs_both_matched_stop_the_start(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _driver(conf, tree, {'vendor_id': '8086', 'product_id': '1572'},
                {'vendor_id': '8086', 'product_id': '154c'})
    assert ('the physical function 0000:3b:00.0 and its virtual function '
            '0000:3b:02.0 are both matched') in str(error.value)


def test_pf_and_vfs_matched_later_fail_the_discovery(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    tree.set_num_vfs(hosts.X710_PF, 0)
    driver = _driver(conf, tree, {'vendor_id': '8086', 'address': '*:3b:*'})
    assert _addresses(driver.discover()) == [hosts.X710_PF]
    tree.set_num_vfs(hosts.X710_PF, 1)
    with pytest.raises(driver_errors.DriverConfigError):
        driver.discover()


def test_vf_of_a_pf_without_driver_is_left_out(conf, tmp_path, caplog):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _driver(conf, tree, {'vendor_id': '8086',
                                   'product_id': '1889'}).discover()
    assert _addresses(devices) == hosts.E810_VFS
    assert ('Passthrough device %s is a virtual function of %s, which has '
            'no driver' % (hosts.E810_ORPHAN_VF, hosts.E810_UNBOUND_PF)
            ) in caplog.text


def test_boot_disk_is_never_reported(conf, tmp_path, caplog):
    tree = hosts.nvme_host(str(tmp_path))
    devices = _driver(conf, tree, {'vendor_id': '19e5',
                                   'device_type': 'SSD'}).discover()
    assert _addresses(devices) == [hosts.NVME_DATA]
    assert devices[0].type == 'SSD'
    assert 'Passthrough device %s holds disks the host uses' % (
        hosts.NVME_BOOT) in caplog.text


def test_device_types_by_class(conf, tmp_path):
    tree = hosts.ascend_host(str(tmp_path))
    [npu] = _driver(conf, tree, {'vendor_id': '19e5'}).discover()
    assert npu.type == 'AICHIP'
    [fpga] = _driver(conf, tree, {'vendor_id': '19e5',
                                  'device_type': 'FPGA'}).discover()
    assert fpga.type == 'FPGA'


@pytest.mark.parametrize('spec, message', [
    ('{"vendor_id": "10de"', 'not JSON'),
    ('"10de"', 'a spec must be a JSON object'),
    ('[{"vendor_id": "10de"}, 3]', 'a spec must be a JSON object'),
    ({'vendor': '10de'}, 'unknown keys vendor'),
    ({'physical_network': 'p1'}, 'unknown keys physical_network'),
    ({'devname': 'eth0'}, 'devname is not supported'),
    ({'vendor_id': '10de0'}, "vendor_id '10de0' must be 4 hex digits"),
    ({'product_id': 7424}, 'product_id 7424 must be 4 hex digits'),
    ({'address': '0000:3b:00.8'}, 'address function'),
    ({'address': '0000:3b:20.0'}, 'address slot'),
    ({'address': '1:0000:3b:00.0'}, 'too many ":"'),
    ({'address': 'zz:00.0'}, 'address bus'),
    ({'address': {'bus': '(['}}, 'is no regular expression'),
    ({'address': {'bus': 3}}, 'must be a regular expression string'),
    ({'address': {'dev': '00'}}, 'address has unknown fields dev'),
    ({'address': 5}, 'address must be a string or an object'),
    ({'resource_class': 'my class'}, 'is not a resource class'),
    ({'resource_class': ''}, 'resource_class must be a non-empty string'),
    ({'resource_class': 'X' * 250}, 'is not a resource class'),
    ({'traits': 'ok,bad trait'}, 'is not a trait'),
    ({'traits': 5}, 'traits must be a comma-separated string'),
    ({'device_type': 'TPU'}, "device_type 'TPU' is not one of"),
])
def test_bad_specs_stop_the_start(conf, tmp_path, spec, message):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _driver(conf, tree, spec)
    assert '[pci_driver] device_spec' in str(error.value)
    assert message in str(error.value)


def test_names_normalised_as_nova_does():
    [spec] = device_spec.parse_device_specs([json.dumps({
        'resource_class': 'pgpu', 'traits': 'fast-disk, CUSTOM_X,'
                                            'hw_gpu_api_vulkan'})])
    assert spec.resource_class == 'PGPU'
    assert spec.traits == ('CUSTOM_FAST_DISK', 'CUSTOM_X',
                           'HW_GPU_API_VULKAN')
    [spec] = device_spec.parse_device_specs(['{"resource_class": "gpu-a"}'])
    assert spec.resource_class == 'CUSTOM_GPU_A'


def test_address_glob_exact():
    match = device_spec.parse_address_glob('0000:3b:00.0', 'x')
    assert match.exact() == pci.parse_address('0000:3b:00.0')
    assert device_spec.parse_address_glob('*:3b:00.0', 'x').exact() is None
