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

"""The Intel QAT driver on fixture hosts: 4xxx (sysfs qat/) and C62x
(adf_ctl), VFs by driver, health, the tool failing, bad options."""

import logging
import os

import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.qat import intel
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_tools as tools
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts as more

NONE = device_tree.Preparation.NONE

GROUP = 'intel_qat_driver'


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return intel.IntelQATDriver(
        conf, runner=runner.CommandRunner(search_path=[tree.tools_dir]))


def _pool(device):
    """The child deployable of the PF's VFs."""
    (pf,) = device.deployables
    (pool,) = pf.children
    return pool


def _handles(device):
    return ['%(domain)s:%(bus)s:%(device)s.%(function)s' % h.attach_info
            for h in _pool(device).attach_handles]


def test_4xxx_pf_with_its_vfs(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    devices = _driver(conf, tree).discover()
    assert device_tree.tree_to_wire(devices) == [{
        'type': 'QAT', 'vendor': '0x8086', 'model': 'QAT 4xxx',
        'address': hosts.QAT_PF,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info': {
            'domain': '0000', 'bus': '6b', 'device': '00',
            'function': '0'}}],
        # The PF, a provider with no inventory, and its VFs' child.
        'deployables': [{
            'name': '0000_6b_00_0', 'num_accelerators': 0,
            'resource_class': 'CUSTOM_QAT', 'traits': ['CUSTOM_QAT_4XXX'],
            'attach_handles': [], 'attributes': {}, 'driver_name': 'intel',
            'preparation': 'none',
            'children': [{
                'name': '0000_6b_00_0_vfs', 'num_accelerators': 4,
                'resource_class': 'CUSTOM_QAT',
                'traits': ['CUSTOM_QAT_4XXX', 'CUSTOM_QAT_ASYM',
                           'CUSTOM_QAT_SYM'],
                'attach_handles': [
                    {'attach_type': 'PCI', 'attach_info': {
                        'domain': '0000', 'bus': '6b', 'device': '00',
                        'function': str(f)}} for f in range(1, 5)],
                'attributes': {}, 'driver_name': 'intel',
                'preparation': 'none'}]}],
        'std_board_info': {
            'vendor_id': '0x8086', 'device_id': '0x4940',
            'class': '0x0b4000', 'numa_node': None,
            'subsystem_vendor_id': '0x8086',
            'subsystem_device_id': '0x4940'},
        'vendor_board_info': None, 'health': 'healthy', 'driver': None}]


def test_discovery_is_stable_and_changes_nothing(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    driver = _driver(conf, tree)
    before = _snapshot(tree.root)
    first = device_tree.tree_to_wire(driver.discover())
    assert device_tree.tree_to_wire(driver.discover()) == first
    assert _snapshot(tree.root) == before


def _snapshot(root):
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == '.calls':
                continue
            path = os.path.join(dirpath, name)
            with open(path, 'rb') as f:
                found[path] = f.read()
    return found


def test_c6xx_vfs_on_a_host_driver_are_left_out(conf, tmp_path):
    tree = more.qat_c6xx_host(str(tmp_path))
    devices = {d.address: d for d in _driver(conf, tree).discover()}
    up = devices[more.C6XX_UP]
    # 3d:01.2 is on c6xxvf: the host uses it.
    assert _handles(up) == ['0000:3d:01.0', '0000:3d:01.1', '0000:3d:01.3']
    assert _pool(up).num_accelerators == 3
    # Gen2 has no qat/cfg_services: no service traits.
    assert _pool(up).traits == ['CUSTOM_QAT_C62X']
    assert up.model == 'QAT C62x'


def test_pf_without_vfs_is_not_reported(conf, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tree = more.qat_c6xx_host(str(tmp_path))
    driver = _driver(conf, tree)
    addresses = [d.address for d in driver.discover()]
    assert more.C6XX_NO_VFS not in addresses
    assert ('QuickAssist device %s has no virtual function'
            % more.C6XX_NO_VFS) in caplog.text
    caplog.clear()
    driver.discover()  # a lasting condition is logged once
    assert 'has no virtual function' not in caplog.text


def test_adf_ctl_state_down_is_unhealthy(conf, tmp_path, caplog):
    tree = more.qat_c6xx_host(str(tmp_path))
    devices = {d.address: d for d in _driver(conf, tree).discover()}
    assert devices[more.C6XX_UP].health == 'healthy'
    assert devices[more.C6XX_DOWN].health == 'unhealthy'
    assert 'adf_ctl reports down' in caplog.text
    assert ['adf_ctl', 'status'] in tools.calls(tree.tools_dir)


def test_without_adf_ctl_health_comes_from_sysfs(conf, tmp_path):
    tree = more.qat_c6xx_host(str(tmp_path), adf_ctl=False)
    devices = _driver(conf, tree).discover()
    assert [d.health for d in devices] == ['healthy', 'healthy']


def test_use_adf_ctl_false_does_not_run_it(conf, tmp_path):
    tree = more.qat_c6xx_host(str(tmp_path))
    devices = _driver(conf, tree, use_adf_ctl=False).discover()
    assert [d.health for d in devices] == ['healthy', 'healthy']
    assert tools.calls(tree.tools_dir) == []


@pytest.mark.parametrize('reply', [
    tools.Reply(stderr='adf_ctl: no devices\n', rc=1),
    tools.Reply(stdout='', sleep=5.0),
], ids=['fails', 'hangs'])
def test_adf_ctl_failing_falls_back_to_sysfs(conf, tmp_path, caplog, reply):
    tree = more.qat_c6xx_host(str(tmp_path))
    tools.write_tool(tree.tools_dir, 'adf_ctl', {('status',): reply})
    devices = _driver(conf, tree, adf_ctl_timeout=1.0).discover()
    assert [d.health for d in devices] == ['healthy', 'healthy']
    assert 'adf_ctl status failed' in caplog.text


def test_state_down_in_sysfs_is_unhealthy(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    tree.write(tree.dev(hosts.QAT_PF, 'qat/state'), 'down')
    tools.write_adf_ctl(tree.tools_dir, [('4xxx', hosts.QAT_PF, 0, 'down')])
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'


def test_pf_without_driver_is_unhealthy(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    tree.unbind(hosts.QAT_PF)
    [device] = _driver(conf, tree).discover()
    assert device.health == 'unhealthy'


def test_services_become_traits(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    tree.write(tree.dev(hosts.QAT_PF, 'qat/cfg_services'), 'dc')
    [device] = _driver(conf, tree).discover()
    assert _pool(device).traits == ['CUSTOM_QAT_4XXX',
                                    'CUSTOM_QAT_DC']


def test_options_choose_devices_and_resource_class(conf, tmp_path):
    tree = more.qat_c6xx_host(str(tmp_path))
    devices = _driver(conf, tree, addresses=['3f:00.0'],
                      resource_class='CUSTOM_CRYPTO').discover()
    assert [d.address for d in devices] == [more.C6XX_DOWN]
    assert _pool(devices[0]).resource_class == 'CUSTOM_CRYPTO'
    assert _driver(conf, tree, addresses=[],
                   device_ids=['4940']).discover() == []


def test_vf_drivers_option(conf, tmp_path):
    tree = more.qat_c6xx_host(str(tmp_path))
    devices = _driver(conf, tree, vf_drivers=['c6xxvf']).discover()
    assert _handles(devices[0]) == ['0000:3d:01.2', '0000:3d:01.3']


@pytest.mark.parametrize('option, value, message', [
    ('device_ids', ['37c9'], '37c9: not a QAT physical function id'),
    ('device_ids', ['qat'], "'qat' is not a PCI id"),
    ('addresses', ['0000:3d:00'], "'0000:3d:00' is not a PCI address"),
    ('resource_class', 'QAT', "'QAT' is not a resource class"),
])
def test_bad_options_stop_the_start(conf, tmp_path, option, value, message):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError) as error:
        _driver(conf, tree, **{option: value})
    assert '[intel_qat_driver] %s: ' % option in str(error.value)
    assert message in str(error.value)


def test_adf_ctl_status_parser():
    text = tools.adf_ctl_status([('c6xx', '3d:00.0', 0, 'up'),
                                 ('4xxx', '0000:6b:00.0', 1, 'down')])
    states = intel.parse_adf_ctl_status(text + 'garbage bsf: x,\n')
    assert {str(k): v for k, v in states.items()} == {
        '0000:3d:00.0': 'up', '0000:6b:00.0': 'down'}


def test_service_traits():
    assert intel.service_traits('sym;asym') == ['CUSTOM_QAT_ASYM',
                                                'CUSTOM_QAT_SYM']
    assert intel.service_traits('asym;dc') == ['CUSTOM_QAT_ASYM',
                                               'CUSTOM_QAT_DC']
    assert intel.service_traits('') == []
    assert intel.service_traits(None) == []


def test_vfs_declare_no_preparation_and_the_hooks_change_nothing(
        conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    driver = _driver(conf, tree)
    (device,) = driver.discover()
    assert [d.preparation for d in device.deployables] == ['none']
    assert _pool(device).preparation == 'none'
    before = _snapshot(tree.root)
    for handle in _pool(device).attach_handles:
        driver.prepare_attach_handle(handle, 'unused', NONE)
        driver.release_attach_handle(handle, 'unused', NONE)
    assert _snapshot(tree.root) == before


def test_utilization_counts_the_vfs_by_driver(conf, tmp_path):
    """One VF on vfio-pci (an instance's), three unbound (free)."""
    tree = hosts.qat_4xxx_host(str(tmp_path))
    driver = _driver(conf, tree)
    assert driver.utilization(driver.discover()) == {hosts.QAT_PF: {
        'vfs_total': 4, 'vfs_in_use': 1, 'vfs_host': 0}}
    tree.bind(hosts.QAT_VFS[1], 'qat_vfio_pci')
    assert driver.utilization(driver.discover()) == {hosts.QAT_PF: {
        'vfs_total': 4, 'vfs_in_use': 2, 'vfs_host': 0}}


def test_utilization_of_a_pf_gone_meanwhile_is_left_out(conf, tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    tree.remove_pci(hosts.QAT_PF)
    assert driver.utilization(devices) == {}
