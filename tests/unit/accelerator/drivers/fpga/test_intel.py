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

"""The Intel FPGA (DFL) driver on fixture hosts: discovery of cards and
their ports (on the PF or on VFs), traits, health signals, programming
with fpgaconf (success, failure, hang, missing tool, wrong image) and
bad options."""

import errno
import logging

import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone import fake_tools as tools
from cyborg.allinone.host_tree import HostTree
from cyborg.common import exception
from cyborg.domain import device_tree
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts

GROUP = 'intel_fpga_driver'
PR = hosts.DFL_PR_INTERFACE_ID.upper()
AFU = hosts.DFL_AFU_ID.upper()
NEW_AFU = 'c000c9660d824272a5dd5a3e0a91b4a2'


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return intel.IntelFPGADriver(
        conf, runner=runner.CommandRunner(search_path=[tree.tools_dir]))


def _cpid(address):
    return device_tree.ControlPathID(
        'PCI', device_tree.pci_address_info(address))


def _pci(address):
    return {'attach_type': 'PCI',
            'attach_info': device_tree.pci_address_info(address)}


def test_ofs_card_with_a_programmed_port(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    devices = _driver(conf, tree).discover()
    assert device_tree.tree_to_wire(devices) == [{
        'type': 'FPGA', 'vendor': '0x8086', 'model': 'Intel FPGA N6000',
        'address': hosts.DFL_PF,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info':
                             device_tree.pci_address_info(hosts.DFL_PF)}],
        'deployables': [{
            'name': '0000_5e_00_0', 'num_accelerators': 1,
            'resource_class': 'FPGA',
            'traits': ['CUSTOM_FPGA_FUNCTION_ID_INTEL_' + AFU,
                       'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_N6000',
                       'CUSTOM_FPGA_REGION_INTEL_' + PR],
            'attach_handles': [_pci(hosts.DFL_PF)],
            'attributes': {'function_id': hosts.DFL_AFU_ID,
                           'region_id': hosts.DFL_PR_INTERFACE_ID},
            'driver_name': 'intel', 'preparation': 'program'}],
        'std_board_info': {
            'vendor_id': '0x8086', 'device_id': '0xbcce',
            'class': '0x120000', 'numa_node': 0,
            'subsystem_vendor_id': '0x8086',
            'subsystem_device_id': '0x1770'},
        'vendor_board_info': {'ports': '0000:5e:00.0 dfl-port.0',
                              'bitstream_id': '0x2300011001030f',
                              'ports_num': '1'},
        'health': 'healthy', 'driver': None}]
    # fpgainfo lists the card with the same (dashed) PR interface id.
    assert ['fpgainfo', 'fme'] in tools.calls(tree.tools_dir)


def test_two_ports_on_vfs_give_a_deployable_each(conf, tmp_path):
    tree = fpga_hosts.dfl_two_port_host(str(tmp_path))
    [device] = _driver(conf, tree).discover()
    wire = device_tree.tree_to_wire([device])[0]
    assert wire['model'] == 'Intel FPGA N6001'
    assert wire['address'] == fpga_hosts.N6001_PF
    assert wire['vendor_board_info']['ports_num'] == '2'
    first, second = wire['deployables']
    region = 'CUSTOM_FPGA_REGION_INTEL_' + fpga_hosts.N6001_PR.upper()
    assert first['attach_handles'] == [_pci(fpga_hosts.N6001_VFS[0])]
    assert first['traits'] == [
        'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + fpga_hosts.N6001_AFU.upper(),
        'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_N6001', region]
    # The second port is unprogrammed (afu_id of zeros): no function.
    assert second['attach_handles'] == [_pci(fpga_hosts.N6001_VFS[1])]
    assert second['traits'] == ['CUSTOM_FPGA_INTEL',
                                'CUSTOM_FPGA_INTEL_N6001', region]
    assert 'function_id' not in second['attributes']
    # No fpgainfo on this host: health from sysfs only.
    assert wire['health'] == 'healthy'


def test_discovery_is_deterministic(conf, tmp_path):
    tree = fpga_hosts.dfl_two_port_host(str(tmp_path))
    driver = _driver(conf, tree)
    first = device_tree.tree_to_wire(driver.discover())
    assert device_tree.tree_to_wire(driver.discover()) == first


def test_other_devices_are_ignored(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    assert _driver(conf, tree).discover() == []


def test_addresses_restrict_the_cards(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    assert _driver(conf, tree, addresses=['0000:5f:00.0']).discover() == []
    assert len(_driver(conf, tree, addresses=['5e:00.0']).discover()) == 1


# Health --------------------------------------------------------------------

def test_fme_errors_make_the_card_unhealthy(conf, tmp_path, caplog):
    tree = fpga_hosts.dfl_two_port_host(str(tmp_path))
    fpga_hosts.add_fme_errors(tree, fpga_hosts.N6001_PF, pcie0_errors=0x4)
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'
    assert ('intel_fpga_driver: device 0000:3b:00.0 is unhealthy: '
            'pcie0_errors is 0x4') in caplog.text


def test_unbound_card_is_reported_unhealthy_without_ports(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    tree.unbind(hosts.DFL_PF)
    tree.remove(tree.dev(hosts.DFL_PF, 'fpga_region'))
    [device] = _driver(conf, tree, use_fpgainfo=False).discover()
    assert device.health == 'unhealthy'
    [deployable] = device.deployables
    assert deployable.traits == ['CUSTOM_FPGA_INTEL',
                                 'CUSTOM_FPGA_INTEL_N6000']
    assert deployable.attach_handles[0].attach_info == \
        device_tree.pci_address_info(hosts.DFL_PF)


def test_health_of_a_card_that_is_gone(conf, tmp_path, caplog):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    assert driver.health(devices) == {hosts.DFL_PF: 'healthy'}
    tree.remove_pci(hosts.DFL_PF)
    assert driver.health(devices) == {hosts.DFL_PF: 'unhealthy'}
    assert 'is unhealthy: the device is gone' in caplog.text


def test_fpgainfo_not_listing_the_card(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    tools.write_tool(tree.tools_dir, 'fpgainfo', {('fme',): tools.Reply(
        tools.fpgainfo_fme('0000:af:00.0', 0xbcce, 1,
                           hosts.DFL_PR_INTERFACE_ID))})
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'


def test_fpgainfo_with_another_interface_id(conf, tmp_path, caplog):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    tools.write_tool(tree.tools_dir, 'fpgainfo', {('fme',): tools.Reply(
        tools.fpgainfo_fme(hosts.DFL_PF, 0xbcce, 1, NEW_AFU))})
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'
    assert 'fpgainfo reports PR interface %s' % NEW_AFU in caplog.text


def test_fpgainfo_failing_falls_back_to_sysfs(conf, tmp_path, caplog):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    tools.write_tool(tree.tools_dir, 'fpgainfo', {('fme',): tools.Reply(
        stderr='Error enumerating resources\n', rc=1)})
    driver = _driver(conf, tree)
    [device] = driver.discover()
    assert device.health == 'healthy'
    assert 'intel_fpga_driver: fpgainfo cannot be used' in caplog.text
    caplog.clear()
    driver.discover()
    assert 'fpgainfo cannot be used' not in caplog.text


def test_use_fpgainfo_false_does_not_run_it(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    _driver(conf, tree, use_fpgainfo=False).discover()
    assert tools.calls(tree.tools_dir) == []


def test_busy_afu_id_is_retried_not_taken_as_unprogrammed(
        conf, tmp_path, monkeypatch):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    real = sysfs.read_text
    busy = {'left': 2}

    def read_text(host, path):
        if path.endswith('/afu_id') and busy['left']:
            busy['left'] -= 1
            raise errors.SysfsReadError(path, errno.EBUSY, 'busy')
        return real(host, path)

    monkeypatch.setattr(sysfs, 'read_text', read_text)
    monkeypatch.setattr(intel, 'BUSY_WAIT', 0.0)
    [device] = _driver(conf, tree).discover()
    assert 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + AFU in \
        device.deployables[0].traits
    assert device.health == 'healthy'
    busy['left'] = 10
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'
    assert not any(t.startswith('CUSTOM_FPGA_FUNCTION_ID')
                   for t in device.deployables[0].traits)


# Programming ---------------------------------------------------------------

ARGV = ['--segment', '0x0000', '--bus', '0x5e', '--device', '0x00',
        '--function', '0x0']


def _programmable(tmp_path, **fake):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path / 'host'))
    image = fpga_hosts.write_gbs(str(tmp_path / 'nlb.gbs'),
                                 hosts.DFL_PR_INTERFACE_ID, NEW_AFU)
    fpga_hosts.write_fpgaconf(
        tree, ARGV + [image],
        afu_path=fpga_hosts.afu_id_path(tree, hosts.DFL_PF, 0),
        afu_id=NEW_AFU, **fake)
    return tree, image


def test_program_runs_fpgaconf_and_rereads_the_function(conf, tmp_path,
                                                        caplog):
    caplog.set_level(logging.INFO)
    tree, image = _programmable(tmp_path)
    driver = _driver(conf, tree)
    assert driver.program(_cpid(hosts.DFL_PF), image) == NEW_AFU
    assert ['fpgaconf'] + ARGV + [image] in tools.calls(tree.tools_dir)
    assert ('intel_fpga_driver: programmed %s on %s; function id %s'
            % (image, hosts.DFL_PF, NEW_AFU)) in caplog.text
    [device] = driver.discover()
    assert 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + NEW_AFU.upper() in \
        device.deployables[0].traits


def test_the_gbs_fake_fpgaconf_programs_what_the_image_holds(conf,
                                                             tmp_path):
    """The fake the functional tests use: the image's function shows."""
    tree = hosts.intel_fpga_dfl_host(str(tmp_path / 'host'))
    tools.write_gbs_fpgaconf(tree.tools_dir, tree.abs(
        fpga_hosts.afu_id_path(tree, hosts.DFL_PF, 0)))
    driver = _driver(conf, tree)
    for afu in (NEW_AFU, hosts.DFL_AFU_ID):
        image = fpga_hosts.write_gbs(str(tmp_path / (afu + '.gbs')),
                                     hosts.DFL_PR_INTERFACE_ID, afu)
        assert driver.program(_cpid(hosts.DFL_PF), image) == afu
        [device] = driver.discover()
        assert 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + afu.upper() in \
            device.deployables[0].traits
    not_gbs = tmp_path / 'junk.gbs'
    not_gbs.write_bytes(b'XeonFPGA\xb7GBSv001' + b'\xff' * 8)
    with pytest.raises(driver_errors.ProgramFailed):
        driver.program(_cpid(hosts.DFL_PF), str(not_gbs))


def test_program_without_segment_option(conf, tmp_path):
    tree, image = _programmable(tmp_path)
    driver = _driver(conf, tree, fpgaconf_segment=False)
    assert driver.fpgaconf_argv(intel.pci.parse_address(hosts.DFL_PF),
                                image) == ['fpgaconf'] + ARGV[2:] + [image]
    with pytest.raises(driver_errors.ProgramFailed,
                       match='fpgaconf cannot address segment 0001'):
        driver.fpgaconf_argv(intel.pci.parse_address('0001:5e:00.0'),
                             image)


def test_program_failure_carries_the_tool_message(conf, tmp_path):
    tree, image = _programmable(
        tmp_path, rc=1, stderr='Error writing bitstream to FPGA: '
        'reconfiguration error\n')
    with pytest.raises(driver_errors.ProgramFailed,
                       match='fpgaconf exited with status 1: Error writing '
                       'bitstream to FPGA: reconfiguration error'):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF), image)
    # The port still has its old function.
    assert tree.read(fpga_hosts.afu_id_path(
        tree, hosts.DFL_PF, 0)).strip() == hosts.DFL_AFU_ID


def test_program_success_without_the_new_function_is_a_failure(
        conf, tmp_path):
    tree, image = _programmable(tmp_path)
    # fpgaconf exits 0 but the port keeps the old AFU.
    fpga_hosts.write_fpgaconf(tree, ARGV + [image])
    with pytest.raises(driver_errors.ProgramFailed,
                       match='no port reports the image\'s function'):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF), image)


def test_program_timeout(conf, tmp_path):
    tree, image = _programmable(tmp_path, sleep=5.0)
    driver = _driver(conf, tree, fpgaconf_timeout=1.0)
    with pytest.raises(driver_errors.ProgramFailed,
                       match='fpgaconf did not finish within 1.0s'):
        driver.program(_cpid(hosts.DFL_PF), image)


def test_program_without_fpgaconf(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path / 'host'))
    image = fpga_hosts.write_gbs(str(tmp_path / 'nlb.gbs'),
                                 hosts.DFL_PR_INTERFACE_ID, NEW_AFU)
    with pytest.raises(driver_errors.ProgramFailed,
                       match='fpgaconf is not installed'):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF), image)


def test_program_refuses_an_image_for_another_interface(conf, tmp_path):
    tree, _image = _programmable(tmp_path)
    other = fpga_hosts.write_gbs(str(tmp_path / 'other.gbs'),
                                 fpga_hosts.N6001_PR, NEW_AFU)
    with pytest.raises(driver_errors.ProgramFailed,
                       match='built for PR interface %s'
                       % fpga_hosts.N6001_PR):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF), other)
    assert tools.calls(tree.tools_dir) == []


@pytest.mark.parametrize('content,reason', [
    (b'xclbin2\x00' + b'\x00' * 32, 'not a GBS image'),
    (b'XeonFPGA\xb7GBSv001' + b'\x05\x00\x00\x00{bad', 'not readable'),
])
def test_program_refuses_what_is_not_a_gbs(conf, tmp_path, content, reason):
    tree, _image = _programmable(tmp_path)
    path = tmp_path / 'bad.gbs'
    path.write_bytes(content)
    with pytest.raises(driver_errors.ProgramFailed, match=reason):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF), str(path))


def test_program_missing_image(conf, tmp_path):
    tree, _image = _programmable(tmp_path)
    with pytest.raises(driver_errors.ProgramFailed,
                       match='cannot read the image'):
        _driver(conf, tree).program(_cpid(hosts.DFL_PF),
                                    str(tmp_path / 'none.gbs'))


@pytest.mark.parametrize('address,reason', [
    ('0000:5f:00.0', 'no such device'),
    ('0000:5d:00.0', 'not an Intel FPGA card'),  # the root port
])
def test_program_on_something_else(conf, tmp_path, address, reason):
    tree, image = _programmable(tmp_path)
    with pytest.raises(driver_errors.ProgramFailed, match=reason):
        _driver(conf, tree).program(_cpid(address), image)


def test_program_through_a_non_pci_control_path(conf, tmp_path):
    tree, image = _programmable(tmp_path)
    with pytest.raises(driver_errors.ProgramFailed, match='not MDEV'):
        _driver(conf, tree).program(
            device_tree.ControlPathID('MDEV', {}), image)


# Options ---------------------------------------------------------------------

@pytest.mark.parametrize('option,value,message', [
    ('addresses', ['5e:00'], 'is not a PCI address'),
    ('resource_class', 'fpga', 'is not a resource class'),
])
def test_bad_options_stop_the_driver(conf, tmp_path, option, value,
                                     message):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError, match=message):
        _driver(conf, tree, **{option: value})


def test_address_of_another_device_stops_the_driver(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    with pytest.raises(exception.ConfigInvalid,
                       match=r'\[intel_fpga_driver\] addresses: '
                       '0000:5d:00.0 is 8086:2030, not an Intel FPGA'):
        _driver(conf, tree, addresses=['0000:5d:00.0'])


def test_card_outside_segment_0_needs_the_segment(conf, tmp_path):
    tree = HostTree(str(tmp_path))
    tree.add_pci('0001:5e:00.0', hosts.INTEL, 0x0b30, hosts.CLASS_ACCELERATOR,
                 driver='dfl-pci')
    with pytest.raises(driver_errors.DriverConfigError,
                       match='fpgaconf_segment'):
        _driver(conf, tree, addresses=['0001:5e:00.0'],
                fpgaconf_segment=False)


# Functions given to instances ------------------------------------------------

def _to_vfio(tree, address):
    """dfl-pci lets go of the function: its region disappears."""
    tree.bind(address, 'vfio-pci')
    tree.remove(tree.dev(address, 'fpga_region'))


def test_vf_on_vfio_pci_keeps_its_deployable_and_last_function(conf,
                                                               tmp_path):
    tree = fpga_hosts.dfl_two_port_host(str(tmp_path))
    driver = _driver(conf, tree)
    before = device_tree.tree_to_wire(driver.discover())
    _to_vfio(tree, fpga_hosts.N6001_VFS[0])
    after = device_tree.tree_to_wire(driver.discover())
    assert after[0]['deployables'] == before[0]['deployables']
    assert after[0]['health'] == 'healthy'
    # A new agent has not seen the port: no function trait, same handle.
    [device] = _driver(conf, tree).discover()
    first = device.deployables[0]
    assert first.attach_handles[0].attach_info == \
        device_tree.pci_address_info(fpga_hosts.N6001_VFS[0])
    assert not any(t.startswith('CUSTOM_FPGA_FUNCTION_ID')
                   for t in first.traits)
    assert device.health == 'healthy'


def test_vf_on_a_host_driver_is_not_offered(conf, tmp_path):
    tree = fpga_hosts.dfl_two_port_host(str(tmp_path))
    tree.bind(fpga_hosts.N6001_VFS[1], 'some-host-driver')
    tree.remove(tree.dev(fpga_hosts.N6001_VFS[1], 'fpga_region'))
    [device] = _driver(conf, tree).discover()
    assert [d.name for d in device.deployables] == ['0000_3b_00_1']


def test_card_given_whole_to_an_instance_stays_healthy(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    driver = _driver(conf, tree)
    before = device_tree.tree_to_wire(driver.discover())
    _to_vfio(tree, hosts.DFL_PF)
    after = device_tree.tree_to_wire(driver.discover())
    assert after[0]['health'] == 'healthy'
    assert after[0]['deployables'] == before[0]['deployables']


def test_two_ports_left_on_the_pf_share_its_deployable(conf, tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    port = tree.dev(hosts.DFL_PF, 'fpga_region', 'region0', 'dfl-port.1')
    tree.write(port + '/afu_id', NEW_AFU)
    [device] = _driver(conf, tree).discover()
    [deployable] = device.deployables
    assert deployable.num_accelerators == 1
    assert sorted(t for t in deployable.traits
                  if t.startswith('CUSTOM_FPGA_FUNCTION_ID')) == [
        'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + AFU,
        'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + NEW_AFU.upper()]


def test_unreadable_afu_id_is_a_health_reason(conf, tmp_path, monkeypatch,
                                              caplog):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    real = sysfs.read_text

    def read_text(host, path):
        if path.endswith('/afu_id'):
            raise errors.SysfsReadError(path, errno.EIO, 'I/O error')
        return real(host, path)

    monkeypatch.setattr(sysfs, 'read_text', read_text)
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'
    assert 'afu_id failed: I/O error' in caplog.text
