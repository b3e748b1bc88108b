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

"""The NVMe SSD driver on fixture hosts: the boot disk (mounted, by a
by-uuid link too), LVM, swap and vfio-pci controllers, the vendor and
class filters, health, bad options."""

import logging

import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.ssd import inspur
from cyborg.accelerator.drivers.utils import block as usage
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts as more

GROUP = 'inspur_nvme_ssd_driver'


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return inspur.InspurNVMeSSDDriver(conf)


def test_only_unused_inspur_controllers(conf, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tree = more.inspur_nvme_host(str(tmp_path))
    wire = device_tree.tree_to_wire(_driver(conf, tree).discover())
    # Not the FPGA of the same vendor, not the disks the host uses.
    assert [d['address'] for d in wire] == [more.INSPUR_FREE,
                                            more.INSPUR_VFIO]
    assert wire[0] == {
        'type': 'SSD', 'vendor': '0x1bd4', 'model': 'NVMe 1bd4:5004',
        'address': more.INSPUR_FREE,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info': {
            'domain': '0000', 'bus': '3b', 'device': '00',
            'function': '0'}}],
        'deployables': [{
            'name': '0000_3b_00_0', 'num_accelerators': 1,
            'resource_class': 'CUSTOM_SSD',
            'traits': ['CUSTOM_SSD_INSPUR', 'CUSTOM_SSD_PRODUCT_ID_5004'],
            'attach_handles': [{'attach_type': 'PCI', 'attach_info': {
                'domain': '0000', 'bus': '3b', 'device': '00',
                'function': '0'}}],
            'attributes': {}, 'driver_name': 'inspur',
            'preparation': 'none'}],
        'std_board_info': {
            'vendor_id': '0x1bd4', 'device_id': '0x5004',
            'class': '0x010802', 'numa_node': 0,
            'subsystem_vendor_id': '0x1bd4',
            'subsystem_device_id': '0x0001'},
        'vendor_board_info': None, 'health': 'healthy', 'driver': None}
    for address, used in ((more.INSPUR_BOOT, 'nvme0n1p1, nvme0n1p2'),
                          (more.INSPUR_LVM, 'nvme2n1'),
                          (more.INSPUR_SWAP, 'nvme3n1p1')):
        assert ('NVMe controller %s is in use on the host (%s)'
                % (address, used)) in caplog.text


def test_huawei_boot_disk_is_never_reported(conf, tmp_path):
    tree = hosts.nvme_host(str(tmp_path))
    assert _driver(conf, tree).discover() == []  # not Inspur
    devices = _driver(conf, tree, vendor_ids=['1bd4', '19e5']).discover()
    assert [d.address for d in devices] == [hosts.NVME_DATA]
    assert devices[0].deployables[0].traits == [
        'CUSTOM_SSD_HUAWEI', 'CUSTOM_SSD_PRODUCT_ID_3714']


def test_unmounting_makes_a_disk_available(conf, tmp_path):
    tree = hosts.nvme_host(str(tmp_path))
    driver = _driver(conf, tree, vendor_ids=['19e5'])
    tree.write('proc/mounts', 'sysfs /sys sysfs rw 0 0')
    assert [d.address for d in driver.discover()] == [hosts.NVME_BOOT,
                                                      hosts.NVME_DATA]


def test_without_mount_table_nothing_is_reported(conf, tmp_path, caplog):
    tree = more.inspur_nvme_host(str(tmp_path), mounts=False)
    assert _driver(conf, tree).discover() == []
    assert '/proc/mounts cannot be read' in caplog.text


def test_multipath_namespace_paths(conf, tmp_path):
    tree = more.inspur_nvme_host(str(tmp_path))
    # Native multipath: the controller lists nvme4c1n1, a path of the
    # block device nvme4n1, whose partition is mounted.
    tree.write(tree.dev(more.INSPUR_FREE, 'nvme/nvme1/nvme4c1n1/size'),
               '10')
    tree.write('sys/devices/virtual/nvme-subsystem/nvme-subsys4/nvme4n1/'
               'nvme4n1p1/partition', '1')
    tree.link('sys/block/nvme4n1',
              'sys/devices/virtual/nvme-subsystem/nvme-subsys4/nvme4n1')
    tree.write('proc/mounts', '/dev/nvme4n1p1 /data xfs rw 0 0')
    host = sysfs.HostRoot(tree.root)
    address = pci.parse_address(more.INSPUR_FREE)
    assert usage.namespaces(host, address) == ['nvme1n1', 'nvme4n1']
    devices = _driver(conf, tree).discover()
    assert more.INSPUR_FREE not in [d.address for d in devices]


def test_controller_state_is_health(conf, tmp_path, caplog):
    tree = more.inspur_nvme_host(str(tmp_path))
    tree.write(tree.dev(more.INSPUR_FREE, 'nvme/nvme1/state'), 'dead')
    devices = {d.address: d for d in _driver(conf, tree).discover()}
    assert devices[more.INSPUR_FREE].health == 'unhealthy'
    assert devices[more.INSPUR_VFIO].health == 'healthy'
    assert ('NVMe controller %s is unhealthy: nvme1 is dead'
            % more.INSPUR_FREE) in caplog.text


def test_controller_with_vfs_is_left_to_them(conf, tmp_path):
    tree = more.inspur_nvme_host(str(tmp_path))
    vf = '0000:3b:00.1'
    tree.add_sriov(more.INSPUR_FREE, [vf], more.INSPUR_NVME, total_vfs=4,
                   offset=1, vf_drivers=['vfio-pci'])
    devices = [d.address for d in _driver(conf, tree).discover()]
    assert more.INSPUR_FREE not in devices
    assert vf in devices


def test_addresses_option(conf, tmp_path):
    tree = more.inspur_nvme_host(str(tmp_path))
    devices = _driver(conf, tree, addresses=['86:00.0',
                                             more.INSPUR_BOOT]).discover()
    assert [d.address for d in devices] == [more.INSPUR_VFIO]


@pytest.mark.parametrize('option, value, message', [
    ('vendor_ids', ['inspur'], "'inspur' is not a PCI id"),
    ('vendor_ids', [], 'at least one vendor is needed'),
    ('addresses', ['nvme0'], "'nvme0' is not a PCI address"),
    ('resource_class', 'CUSTOM_', "'CUSTOM_' is not a resource class"),
])
def test_bad_options_stop_the_start(conf, tmp_path, option, value, message):
    tree = more.inspur_nvme_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _driver(conf, tree, **{option: value})
    assert '[inspur_nvme_ssd_driver] %s: ' % option in str(error.value)
    assert message in str(error.value)
