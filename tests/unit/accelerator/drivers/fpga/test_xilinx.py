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

"""The Xilinx Alveo driver on fixture hosts: management and user
functions paired by slot, the user function as the attach handle,
shell traits, health, IOMMU groups, xbutil programming, bad options."""

import logging

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_tools as tools
from cyborg.domain import device_tree
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts

GROUP = 'xilinx_fpga_driver'
MGMT = hosts.ALVEO_MGMT
USER = hosts.ALVEO_USER


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return xilinx.XilinxFPGADriver(
        conf, runner=runner.CommandRunner(search_path=[tree.tools_dir]))


def _cpid(address):
    return device_tree.ControlPathID(
        'PCI', device_tree.pci_address_info(address))


def test_u250_user_function_is_the_attach_handle(conf, tmp_path):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path))
    devices = _driver(conf, tree).discover()
    assert device_tree.tree_to_wire(devices) == [{
        'type': 'FPGA', 'vendor': '0x10ee', 'model': 'Xilinx Alveo U250',
        'address': MGMT,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info':
                             device_tree.pci_address_info(MGMT)}],
        'deployables': [{
            'name': '0000_d8_00_1', 'num_accelerators': 1,
            'resource_class': 'FPGA',
            'traits': ['CUSTOM_FPGA_REGION_XILINX_'
                       + fpga_hosts.ALVEO_INTERFACE.upper(),
                       'CUSTOM_FPGA_XILINX', 'CUSTOM_FPGA_XILINX_U250'],
            'attach_handles': [{'attach_type': 'PCI', 'attach_info':
                                device_tree.pci_address_info(USER)}],
            'attributes': {'region_id': fpga_hosts.ALVEO_INTERFACE},
            'driver_name': 'xilinx', 'preparation': 'program'}],
        'std_board_info': {
            'vendor_id': '0x10ee', 'device_id': '0x5004',
            'class': '0x120000', 'numa_node': 1,
            'subsystem_vendor_id': '0x10ee',
            'subsystem_device_id': '0x000e'},
        'vendor_board_info': {'user_function': USER,
                              'board_name': 'xilinx_u250'},
        'health': 'healthy', 'driver': None}]


def test_bare_card_has_no_region_trait(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path))
    [device] = _driver(conf, tree).discover()
    assert device.deployables[0].traits == ['CUSTOM_FPGA_XILINX',
                                            'CUSTOM_FPGA_XILINX_U250']
    assert device.health == 'healthy'


def test_logic_uuid_when_there_is_no_interface_uuid(conf, tmp_path):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path))
    tree.remove(tree.dev(MGMT, 'interface_uuids'))
    [device] = _driver(conf, tree).discover()
    assert ('CUSTOM_FPGA_REGION_XILINX_' + fpga_hosts.ALVEO_LOGIC.upper()
            in device.deployables[0].traits)


def test_shared_iommu_group_is_not_reported(conf, tmp_path, caplog):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path), u50_shared_group=True)
    devices = _driver(conf, tree).discover()
    assert [d.address for d in devices] == [MGMT]
    assert ('xilinx_fpga_driver: user function %s shares its iommu_group '
            'with the management function %s' % (
                fpga_hosts.U50_USER, fpga_hosts.U50_MGMT)) in caplog.text


def test_missing_user_function(conf, tmp_path, caplog):
    tree = hosts.alveo_host(str(tmp_path))
    tree.remove_pci(USER)
    driver = _driver(conf, tree)
    assert driver.discover() == []
    assert 'card %s has no user function' % MGMT in caplog.text
    caplog.clear()
    driver.discover()
    assert 'has no user function' not in caplog.text


def test_user_function_on_another_driver(conf, tmp_path, caplog):
    tree = hosts.alveo_host(str(tmp_path))
    tree.bind(USER, 'pci-stub')
    assert _driver(conf, tree).discover() == []
    assert 'is bound to pci-stub, not to one of' in caplog.text
    tree.unbind(USER)
    assert len(_driver(conf, tree).discover()) == 1


def test_not_ready_and_unbound_management_are_unhealthy(conf, tmp_path,
                                                        caplog):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path))
    tree.write(tree.dev(MGMT, 'ready'), '0x0')
    driver = _driver(conf, tree)
    [device] = driver.discover()
    assert device.health == 'unhealthy'
    assert ('xilinx_fpga_driver: device %s is unhealthy: the shell is not '
            'ready' % MGMT) in caplog.text
    tree.write(tree.dev(MGMT, 'ready'), '0x1')
    tree.unbind(MGMT)
    assert driver.health([device]) == {MGMT: 'unhealthy'}
    assert 'management function on no driver' in caplog.text
    tree.remove_pci(MGMT)
    assert driver.health([device]) == {MGMT: 'unhealthy'}


def test_user_function_gone_is_unhealthy(conf, tmp_path):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    assert driver.health(devices) == {MGMT: 'healthy'}
    tree.remove_pci(USER)
    assert driver.health(devices) == {MGMT: 'unhealthy'}


def test_discovery_is_deterministic(conf, tmp_path):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path), u50_shared_group=True)
    driver = _driver(conf, tree)
    first = device_tree.tree_to_wire(driver.discover())
    assert device_tree.tree_to_wire(driver.discover()) == first


# Programming -----------------------------------------------------------------

def _image(tmp_path):
    return fpga_hosts.write_xclbin(str(tmp_path / 'vadd.xclbin'))


def test_program_runs_xbutil_on_the_user_function(conf, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    image = _image(tmp_path)
    argv = ('program', '--device', USER, '--user', image)
    fpga_hosts.write_xbutil(tree, argv, tools.Reply(
        'Programming XCLBIN...\nXCLBIN programmed successfully\n'))
    _driver(conf, tree).program(_cpid(MGMT), image)
    assert tools.calls(tree.tools_dir) == [['xbutil', *argv]]
    assert 'xilinx_fpga_driver: loaded %s into %s' % (image, USER) in \
        caplog.text


def test_program_failure_is_typed(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    image = _image(tmp_path)
    fpga_hosts.write_xbutil(
        tree, ('program', '--device', USER, '--user', image),
        tools.Reply('ERROR: Xclbin does not match shell on card.\n', rc=1))
    with pytest.raises(errors.ProgramFailed,
                       match='xbutil exited with status 1: ERROR: Xclbin '
                       'does not match shell on card'):
        _driver(conf, tree).program(_cpid(MGMT), image)


def test_program_timeout_and_missing_tool(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    image = _image(tmp_path)
    with pytest.raises(errors.ProgramFailed,
                       match='xbutil is not installed'):
        _driver(conf, tree).program(_cpid(MGMT), image)
    fpga_hosts.write_xbutil(
        tree, ('program', '--device', USER, '--user', image),
        tools.Reply(sleep=5.0))
    with pytest.raises(errors.ProgramFailed,
                       match='did not finish within 1.0s'):
        _driver(conf, tree, xbutil_timeout=1.0).program(_cpid(MGMT), image)


def test_program_refuses_a_user_function_given_away(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    tree.bind(USER, 'vfio-pci')
    with pytest.raises(errors.ProgramFailed,
                       match='user function 0000:d8:00.1 is on vfio-pci'):
        _driver(conf, tree).program(_cpid(MGMT), _image(tmp_path))
    assert tools.calls(tree.tools_dir) == []


@pytest.mark.parametrize('address,reason', [
    (USER, 'not the management function'),
    ('0000:d9:00.0', 'no such device'),
])
def test_program_on_something_else(conf, tmp_path, address, reason):
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    with pytest.raises(errors.ProgramFailed, match=reason):
        _driver(conf, tree).program(_cpid(address), _image(tmp_path))


def test_program_refuses_what_is_not_an_xclbin(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path / 'host'))
    gbs = fpga_hosts.write_gbs(str(tmp_path / 'x.gbs'), '1' * 32, None)
    with pytest.raises(errors.ProgramFailed, match='not an xclbin'):
        _driver(conf, tree).program(_cpid(MGMT), gbs)


# Options ---------------------------------------------------------------------

def test_user_function_address_stops_the_driver(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError,
                       match=r'\[xilinx_fpga_driver\] addresses: '
                       '0000:d8:00.1 is 10ee:5005, not the management'):
        _driver(conf, tree, addresses=[USER])


def test_addresses_restrict_the_cards(conf, tmp_path):
    tree = fpga_hosts.alveo_u250_host(str(tmp_path))
    assert _driver(conf, tree, addresses=['0000:af:00.0']).discover() == []
    assert len(_driver(conf, tree, addresses=[MGMT]).discover()) == 1


def test_bad_resource_class(conf, tmp_path):
    tree = hosts.alveo_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError,
                       match='not a resource class'):
        _driver(conf, tree, resource_class='CUSTOM_fpga')
