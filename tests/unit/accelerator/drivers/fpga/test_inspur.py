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

"""The Inspur FPGA driver: the card, never the vendor's NVMe drive;
options; no programming."""

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.fpga import inspur
from cyborg.domain import device_tree
from tests.fixtures.hosts import fpga_hosts

GROUP = 'inspur_fpga_driver'
CARD = fpga_hosts.INSPUR_FPGA


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return inspur.InspurFPGADriver(conf)


def test_card_is_reported_and_the_nvme_drive_is_not(conf, tmp_path):
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    devices = _driver(conf, tree).discover()
    assert device_tree.tree_to_wire(devices) == [{
        'type': 'FPGA', 'vendor': '0x1bd4', 'model': 'Inspur FPGA 0911',
        'address': CARD,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info':
                             device_tree.pci_address_info(CARD)}],
        'deployables': [{
            'name': '0000_86_00_0', 'num_accelerators': 1,
            'resource_class': 'FPGA',
            'traits': ['CUSTOM_FPGA_INSPUR', 'CUSTOM_FPGA_PRODUCT_ID_0911'],
            'attach_handles': [{'attach_type': 'PCI', 'attach_info':
                                device_tree.pci_address_info(CARD)}],
            'attributes': {}, 'driver_name': 'inspur'}],
        'std_board_info': {
            'vendor_id': '0x1bd4', 'device_id': '0x0911',
            'class': '0x120000', 'numa_node': 1,
            'subsystem_vendor_id': '0x1bd4',
            'subsystem_device_id': '0x0911'},
        'vendor_board_info': None, 'health': 'healthy', 'driver': None}]


def test_device_ids_and_addresses_filter(conf, tmp_path):
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    assert _driver(conf, tree, device_ids=['a115']).discover() == []
    assert _driver(conf, tree, addresses=['86:00.1']).discover() == []
    assert len(_driver(conf, tree, device_ids=['0x0911'],
                       addresses=[]).discover()) == 1


def test_health_of_a_card_that_is_gone(conf, tmp_path):
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    assert driver.health(devices) == {CARD: 'healthy'}
    tree.remove_pci(CARD)
    assert driver.health(devices) == {CARD: 'unhealthy'}


def test_program_is_refused(conf, tmp_path):
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    cpid = device_tree.ControlPathID('PCI',
                                     device_tree.pci_address_info(CARD))
    with pytest.raises(errors.ProgramFailed,
                       match='cannot be programmed through Cyborg'):
        _driver(conf, tree).program(cpid, '/nonexistent.bin')


@pytest.mark.parametrize('option,value,message', [
    ('device_ids', ['inspur'], 'is not a PCI id'),
    ('addresses', ['86:00'], 'is not a PCI address'),
    ('resource_class', 'fpga', 'is not a resource class'),
])
def test_bad_options(conf, tmp_path, option, value, message):
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError, match=message):
        _driver(conf, tree, **{option: value})
