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

"""The SR-IOV NIC driver on fixture hosts: X710, E810 and ConnectX-6 Dx,
physical networks by interface and by address, a PF without a driver,
link state, bad options."""

import logging

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers.nic import intel
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_tools
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts as more

VF = device_tree.Preparation.VF

GROUP = 'intel_nic_driver'


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return intel.IntelNICDriver(conf)


def _by_address(devices):
    return {d.address: d for d in devices}


def _pool(device):
    """The child deployable of the PF's VFs."""
    (pf,) = device.deployables
    (pool,) = pf.children
    return pool


def _handle_addresses(device):
    return ['%(domain)s:%(bus)s:%(device)s.%(function)s' % h.attach_info
            for h in _pool(device).attach_handles]


def test_x710_and_e810_with_physnets(conf, tmp_path, caplog):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _driver(conf, tree, physical_device_mappings=[
        'physnet1:ens785f0', 'physnet2:0000:af:00.0'])
    wire = device_tree.tree_to_wire(driver.discover())
    assert [d['address'] for d in wire] == [hosts.X710_PF, hosts.E810_PF]
    x710, e810 = wire
    assert x710['type'] == 'NIC' and x710['model'] == 'X710'
    assert x710['health'] == 'healthy'
    assert x710['controlpath_ids'] == [{'cpid_type': 'PCI', 'cpid_info': {
        'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0'}}]
    # The PF is a provider with no inventory; its VFs are the inventory
    # of its child, which carries the physical network.
    assert x710['deployables'] == [{
        'name': '0000_3b_00_0', 'num_accelerators': 0,
        'resource_class': 'CUSTOM_NIC',
        'traits': ['CUSTOM_NIC_INTEL', 'CUSTOM_NIC_INTEL_X710',
                   'CUSTOM_NIC_PRODUCT_ID_1572', 'HW_NIC_SRIOV'],
        'attach_handles': [], 'attributes': {}, 'driver_name': 'intel',
        'preparation': 'none',
        'children': [{
            'name': '0000_3b_00_0_vfs', 'num_accelerators': 2,
            'resource_class': 'CUSTOM_NIC',
            'traits': ['CUSTOM_NIC_INTEL', 'CUSTOM_NIC_INTEL_X710',
                       'CUSTOM_NIC_PRODUCT_ID_1572',
                       'CUSTOM_PHYSNET_PHYSNET1', 'HW_NIC_SRIOV'],
            'attach_handles': [
                {'attach_type': 'PCI', 'attach_info': {
                    'domain': '0000', 'bus': '3b', 'device': '02',
                    'function': str(f), 'physical_network': 'physnet1'}}
                for f in (0, 1)],
            'attributes': {}, 'driver_name': 'intel',
            'preparation': 'vf'}]}]
    (e810_vfs,) = e810['deployables'][0]['children']
    assert 'CUSTOM_PHYSNET_PHYSNET2' in e810_vfs['traits']
    assert 'CUSTOM_NIC_INTEL_E810_C' in e810_vfs['traits']
    assert [h['attach_info']['physical_network'] for h in
            e810_vfs['attach_handles']] == ['physnet2'] * 2
    # The orphan VF of the PF without a driver is left out, said once.
    assert ('Network card %s has no driver; its 1 virtual functions are '
            'not reported' % hosts.E810_UNBOUND_PF) in caplog.text
    caplog.clear()
    assert device_tree.tree_to_wire(driver.discover()) == wire
    assert 'has no driver' not in caplog.text


def test_unmapped_pf_has_no_physnet(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _by_address(_driver(conf, tree).discover())
    deployable = _pool(devices[hosts.X710_PF])
    assert not [t for t in deployable.traits if 'PHYSNET' in t]
    assert all('physical_network' not in h.attach_info
               for h in deployable.attach_handles)


def test_mapped_only(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _driver(conf, tree, mapped_only=True,
                      physical_device_mappings=['physnet1:ens785f0'])
    assert [d.address for d in devices.discover()] == [hosts.X710_PF]


def test_connectx_vfs_and_link_down(conf, tmp_path, caplog):
    tree = more.connectx_host(str(tmp_path))
    devices = _by_address(_driver(conf, tree, physical_device_mappings=[
        'physnet-a:ens2f0np0', 'physnet-a:ens2f1np1']).discover())
    up, down = devices[more.CX6_PF0], devices[more.CX6_PF1]
    assert _handle_addresses(up) == more.CX6_PF0_VFS
    assert _handle_addresses(down) == more.CX6_PF1_VFS
    assert up.model == 'ConnectX-6 Dx' and up.vendor == '0x15b3'
    assert set(_pool(up).traits) == {
        'HW_NIC_SRIOV', 'CUSTOM_NIC_MELLANOX',
        'CUSTOM_NIC_MELLANOX_CONNECTX_6_DX', 'CUSTOM_NIC_PRODUCT_ID_101D',
        'CUSTOM_PHYSNET_PHYSNET_A'}
    assert _pool(up).driver_name == 'mellanox'
    assert (up.health, down.health) == ('healthy', 'unhealthy')
    assert ('Network card %s is unhealthy: the link of ens2f1np1 is down'
            % more.CX6_PF1) in caplog.text


def test_pf_without_netdev_is_unhealthy(conf, tmp_path, caplog):
    tree = hosts.sriov_nic_host(str(tmp_path))
    tree.remove(tree.dev(hosts.X710_PF, 'net'))
    devices = _by_address(_driver(conf, tree).discover())
    assert devices[hosts.X710_PF].health == 'unhealthy'
    assert 'it has no network interface' in caplog.text


def test_pf_without_vfs_is_not_reported(conf, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tree = hosts.sriov_nic_host(str(tmp_path))
    tree.set_num_vfs(hosts.X710_PF, 0)
    devices = _driver(conf, tree).discover()
    assert hosts.X710_PF not in [d.address for d in devices]
    assert 'Network card %s has no virtual functions' % hosts.X710_PF in (
        caplog.text)


def test_vfs_created_later_are_found(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _driver(conf, tree)
    tree.set_num_vfs(hosts.X710_PF, 0)
    assert hosts.X710_PF not in [d.address for d in driver.discover()]
    tree.set_num_vfs(hosts.X710_PF, 12)
    device = _by_address(driver.discover())[hosts.X710_PF]
    assert _pool(device).num_accelerators == 12
    # Ordered by VF index, virtfn10 after virtfn9.
    assert _handle_addresses(device) == [tree.vf_address(hosts.X710_PF, i)
                                         for i in range(12)]


def test_discovery_writes_nothing(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    _driver(conf, tree).discover()
    tree.settle()
    assert tree.refused == []
    assert tree.read(tree.dev(hosts.X710_PF, 'sriov_numvfs')) == '2\n'


def test_conflicting_mappings_drop_the_physnet(conf, tmp_path, caplog):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _by_address(_driver(conf, tree, physical_device_mappings=[
        'physnet1:ens785f0', 'physnet2:0000:3b:00.0']).discover())
    traits = _pool(devices[hosts.X710_PF]).traits
    assert not [t for t in traits if 'PHYSNET' in t]
    assert 'puts network card %s in several physical networks' % (
        hosts.X710_PF) in caplog.text


def test_mapping_to_nothing_is_warned(conf, tmp_path, caplog):
    tree = hosts.sriov_nic_host(str(tmp_path))
    _driver(conf, tree, physical_device_mappings=[
        'physnet1:eth9', 'physnet2:0000:99:00.0']).discover()
    assert 'names 0000:99:00.0, which is no network card' in caplog.text
    assert 'names eth9, which is no network card' in caplog.text


def test_device_ids_option(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    devices = _driver(conf, tree, device_ids=['8086:1592']).discover()
    assert [d.address for d in devices] == [hosts.E810_PF]


@pytest.mark.parametrize('option, value, message', [
    ('physical_device_mappings', ['ens1f0'], 'expected <physnet>:'),
    ('physical_device_mappings', [':ens1f0'], 'expected <physnet>:'),
    ('physical_device_mappings', ['physnet1:'], 'expected <physnet>:'),
    ('physical_device_mappings', ['physnet1:a/b'],
     "'a/b' is neither an interface name nor a PCI address"),
    ('physical_device_mappings', ['physnet1:ens1f0', 'physnet2:ens1f0'],
     'ens1f0 is already in physical network physnet1'),
    ('physical_device_mappings', ['p1:0000:5e:00.0', 'p2:5e:00.0'],
     '5e:00.0 is already in physical network p1'),
    ('device_ids', ['8086:154c'], 'is not an SR-IOV physical function'),
    ('device_ids', ['1572'], 'expected <vendor>:<device>'),
    ('device_ids', ['8086:zz'], "'zz' is not a PCI id"),
    ('resource_class', 'NIC', "'NIC' is not a resource class"),
])
def test_bad_options_stop_the_start(conf, tmp_path, option, value, message):
    tree = hosts.sriov_nic_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _driver(conf, tree, **{option: value})
    assert '[intel_nic_driver] %s: ' % option in str(error.value)
    assert message in str(error.value)


def test_parse_mappings():
    mappings = intel.parse_mappings(['physnet1:ens1f0', 'physnet1:ens1f1',
                                     'physnet2:0000:5E:00.0'])
    assert mappings.by_ifname == {'ens1f0': 'physnet1',
                                  'ens1f1': 'physnet1'}
    assert {str(k): v for k, v in mappings.by_address.items()} == {
        '0000:5e:00.0': 'physnet2'}
    assert intel.physnet_trait('phys-net.1') == 'CUSTOM_PHYSNET_PHYS_NET_1'


# Preparation (vf) ----------------------------------------------------------

def _vf_handle(vf, physnet='physnet1'):
    return passthrough.pci_handle(pci.parse_address(vf),
                                  physical_network=physnet)


def _prepared_driver(conf, tree, ip_rc=0, **options):
    """The driver with the X710 in physnet1 and a fake ``ip`` (exit
    status ``ip_rc``; None: no ip command at all)."""
    if ip_rc is not None:
        fake_tools.write_tool(tree.tools_dir, 'ip', {None: fake_tools.Reply(
            stderr='' if ip_rc == 0 else 'RTNETLINK answers: Invalid '
            'argument\n', rc=ip_rc)})
    conf.set_override('host_root', tree.root, group='agent')
    options.setdefault('physical_device_mappings', ['physnet1:ens785f0'])
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return intel.IntelNICDriver(conf, runner=runner.CommandRunner(
        search_path=[tree.tools_dir]))


def _ip_calls(tree):
    return [call[1:] for call in fake_tools.calls(tree.tools_dir)
            if call[0] == 'ip']


SET_VF1 = ['link', 'set', 'dev', 'ens785f0', 'vf', '1']


def test_vf_preparation_sets_and_clears_vlan_and_trust(conf, tmp_path,
                                                       caplog):
    caplog.set_level(logging.INFO)
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, vf_vlans=['physnet1:100'],
                              vf_trust=True)
    (device,) = [d for d in driver.discover() if d.address == hosts.X710_PF]
    assert _pool(device).preparation == 'vf'
    assert device.deployables[0].preparation == 'none'
    handle = _pool(device).attach_handles[1]  # VF 1, on vfio-pci
    assert _handle_addresses(device)[1] == hosts.X710_VFS[1]
    driver.prepare_attach_handle(handle, 'unused', VF)
    assert _ip_calls(tree) == [SET_VF1 + ['vlan', '100', 'trust', 'on']]
    assert ('Network card %s: virtual function %s prepared (vlan 100 trust '
            'on)' % (hosts.X710_PF, hosts.X710_VFS[1])) in caplog.text
    # Repeated (a retried bind job): the same settings again.
    driver.prepare_attach_handle(handle, 'unused', VF)
    driver.release_attach_handle(handle, 'unused', VF)
    driver.release_attach_handle(handle, 'unused', VF)
    assert _ip_calls(tree) == [
        SET_VF1 + ['vlan', '100', 'trust', 'on']] * 2 + [
        SET_VF1 + ['vlan', '0', 'trust', 'off']] * 2
    assert ('Network card %s: virtual function %s released (vlan 0 trust '
            'off)' % (hosts.X710_PF, hosts.X710_VFS[1])) in caplog.text


def test_a_vf_is_configured_again_after_a_reboot(conf, tmp_path):
    """The driver cannot read a VF's VLAN back: the agent's restore at
    start configures it again (the same ``ip`` call as at bind)."""
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, vf_vlans=['physnet1:100'],
                              vf_trust=True)
    (device,) = [d for d in driver.discover() if d.address == hosts.X710_PF]
    handle = _pool(device).attach_handles[1]
    assert driver.is_prepared(handle, 'h1', VF) is None
    driver.restore_attach_handle(handle, 'h1', VF)
    assert _ip_calls(tree) == [SET_VF1 + ['vlan', '100', 'trust', 'on']]


def test_a_vf_the_card_refuses_after_a_reboot_is_not_restored(
        conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, ip_rc=2,
                              vf_vlans=['physnet1:100'])
    (device,) = [d for d in driver.discover() if d.address == hosts.X710_PF]
    handle = _pool(device).attach_handles[1]
    with pytest.raises(driver_errors.PrepareFailed,
                       match='cannot configure virtual function'):
        driver.restore_attach_handle(handle, 'h1', VF)


def test_vf_preparation_without_settings_only_checks(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    # No ip command on the host: nothing to configure, nothing run.
    driver = _prepared_driver(conf, tree, ip_rc=None)
    for vf in hosts.X710_VFS:  # on iavf and on vfio-pci
        driver.prepare_attach_handle(_vf_handle(vf), 'unused', VF)
        driver.release_attach_handle(_vf_handle(vf), 'unused', VF)
    # A physical network without a VLAN: trust only.
    driver = _prepared_driver(conf, tree, vf_trust=True)
    driver.prepare_attach_handle(_vf_handle(hosts.X710_VFS[1], 'other'),
                                 'unused', VF)
    assert _ip_calls(tree) == [SET_VF1 + ['trust', 'on']]


def test_vf_preparation_of_a_vf_that_is_gone(conf, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, vf_vlans=['physnet1:100'])
    handle = _vf_handle(hosts.X710_VFS[1])
    tree.remove_pci(hosts.X710_VFS[1])
    with pytest.raises(errors.PrepareFailed,
                       match='virtual function %s is gone'
                       % hosts.X710_VFS[1]):
        driver.prepare_attach_handle(handle, 'unused', VF)
    # Its unbind has nothing left to undo.
    driver.release_attach_handle(handle, 'unused', VF)
    assert _ip_calls(tree) == []
    assert ('Network card virtual function %s is gone; nothing to release'
            % hosts.X710_VFS[1]) in caplog.text


def test_vf_preparation_refuses_a_vf_held_by_another_driver(conf,
                                                            tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    tree.bind(hosts.X710_VFS[1], 'dpdk-thing')
    driver = _prepared_driver(conf, tree, vf_vlans=['physnet1:100'])
    with pytest.raises(errors.PrepareFailed,
                       match='is bound to dpdk-thing, not to one of '
                       r'\[intel_nic_driver\] vf_drivers'):
        driver.prepare_attach_handle(_vf_handle(hosts.X710_VFS[1]), 'x', VF)
    assert _ip_calls(tree) == []


@pytest.mark.parametrize('ip_rc, message', [
    (2, 'RTNETLINK answers: Invalid argument'),
    (None, 'ip'),
])
def test_vf_preparation_tool_failure(conf, tmp_path, ip_rc, message):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, ip_rc=ip_rc,
                              vf_vlans=['physnet1:100'])
    handle = _vf_handle(hosts.X710_VFS[1])
    for hook in (driver.prepare_attach_handle,
                 driver.release_attach_handle):
        with pytest.raises(errors.PrepareFailed) as error:
            hook(handle, 'unused', VF)
        assert str(error.value).startswith(
            'cannot configure virtual function %s of %s: '
            % (hosts.X710_VFS[1], hosts.X710_PF))
        assert message in str(error.value)


def test_vf_preparation_needs_the_pf_interface(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree, vf_trust=True,
                              physical_device_mappings=[
                                  'physnet1:0000:3b:00.0'])
    tree.remove('sys/class/net/ens785f0')
    tree.remove(tree.dev(hosts.X710_PF, 'net', 'ens785f0'))
    with pytest.raises(errors.PrepareFailed,
                       match='has no network interface'):
        driver.prepare_attach_handle(_vf_handle(hosts.X710_VFS[1]), 'x', VF)


def test_vf_preparation_of_a_handle_without_address(conf, tmp_path):
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _prepared_driver(conf, tree)
    with pytest.raises(errors.PrepareFailed, match='has no PCI address'):
        driver.prepare_attach_handle(
            device_tree.AttachHandle('PCI', {'bus': '3b'}), 'x', VF)


@pytest.mark.parametrize('value, message', [
    (['physnet1'], 'expected <physnet>:<vlan id>'),
    (['physnet1:0'], 'VLAN id from 1 to 4094'),
    (['physnet1:4095'], 'VLAN id from 1 to 4094'),
    (['physnet1:ten'], 'expected <physnet>:<vlan id>'),
    (['physnet9:100'], 'physnet9 is no physical network of '
                       'physical_device_mappings'),
    (['physnet1:100', 'physnet1:200'], 'already has VLAN 100'),
])
def test_bad_vf_vlans_stop_the_start(conf, tmp_path, value, message):
    tree = hosts.sriov_nic_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _prepared_driver(conf, tree, vf_vlans=value)
    assert '[intel_nic_driver] vf_vlans: ' in str(error.value)
    assert message in str(error.value)


def test_utilization_counts_the_vfs_by_driver(conf, tmp_path):
    """X710: one VF with its iavf netdev (the host's), one on vfio-pci
    (an instance's); E810: both on iavf."""
    tree = hosts.sriov_nic_host(str(tmp_path))
    driver = _driver(conf, tree)
    assert driver.utilization(driver.discover()) == {
        hosts.X710_PF: {'vfs_total': 2, 'vfs_in_use': 1, 'vfs_host': 1},
        hosts.E810_PF: {'vfs_total': 2, 'vfs_in_use': 0, 'vfs_host': 2}}
