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

"""The Huawei Ascend driver: NPUs by id, npu-smi health mapped by PCIe
bus info (not NPU order), the tool missing or failing, options."""

import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.ascend import huawei
from cyborg.accelerator.drivers.utils import runner
from cyborg.agent import discovery
from cyborg.allinone import fake_tools as tools
from cyborg.domain import device_tree
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts

GROUP = 'huawei_ascend_driver'


def _driver(conf, tree, **options):
    conf.set_override('host_root', tree.root, group='agent')
    for name, value in options.items():
        conf.set_override(name, value, group=GROUP)
    return huawei.HuaweiAscendDriver(
        conf, runner=runner.CommandRunner(search_path=[tree.tools_dir]))


def test_910_of_the_fact_sheet_host(conf, tmp_path, caplog):
    tree = hosts.ascend_host(str(tmp_path))
    devices = _driver(conf, tree).discover()
    assert device_tree.tree_to_wire(devices) == [{
        'type': 'AICHIP', 'vendor': '0x19e5', 'model': 'Ascend 910',
        'address': hosts.ASCEND,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info':
                             device_tree.pci_address_info(hosts.ASCEND)}],
        'deployables': [{
            'name': '0000_61_00_0', 'num_accelerators': 1,
            'resource_class': 'CUSTOM_NPU',
            'traits': ['CUSTOM_NPU_ASCEND', 'CUSTOM_NPU_ASCEND_910'],
            'attach_handles': [{'attach_type': 'PCI', 'attach_info':
                                device_tree.pci_address_info(hosts.ASCEND)}],
            'attributes': {}, 'driver_name': 'huawei',
            'preparation': 'none'}],
        'std_board_info': {
            'vendor_id': '0x19e5', 'device_id': '0xd801',
            'class': '0x120000', 'numa_node': 0,
            'subsystem_vendor_id': '0x19e5',
            'subsystem_device_id': '0xd801'},
        'vendor_board_info': None, 'health': 'healthy', 'driver': None}]
    # That npu-smi knows no "-t health": logged, sysfs only.
    assert ('huawei_ascend_driver: npu-smi cannot be used' in caplog.text)


def test_health_is_mapped_by_bus_info_not_npu_order(conf, tmp_path,
                                                    caplog):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path),
                                       health=('Critical', 'OK'))
    devices = {d.address: d for d in _driver(conf, tree).discover()}
    # NPU 0 is the 310P on bus c1.
    assert devices[fpga_hosts.ASCEND_310P].health == 'unhealthy'
    assert devices[fpga_hosts.ASCEND_310P].model == 'Ascend 310P'
    assert devices[fpga_hosts.ASCEND_910B].health == 'healthy'
    assert devices[fpga_hosts.ASCEND_910B].deployables[0].traits == [
        'CUSTOM_NPU_ASCEND', 'CUSTOM_NPU_ASCEND_910B']
    assert ('huawei_ascend_driver: device %s is unhealthy: npu-smi reports '
            'Critical' % fpga_hosts.ASCEND_310P) in caplog.text


@pytest.mark.parametrize('value,state', [
    ('Warning', 'healthy'), ('Alarm', 'unhealthy'), ('UNKNOWN', 'healthy'),
])
def test_health_values(conf, tmp_path, value, state):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path), health=('OK', value))
    devices = {d.address: d for d in _driver(conf, tree).discover()}
    assert devices[fpga_hosts.ASCEND_910B].health == state


def test_npu_smi_failing_or_missing(conf, tmp_path, caplog):
    tree = fpga_hosts.ascend_pair_host(
        str(tmp_path), health=('Critical', 'Critical'),
        list_reply=tools.Reply(stderr='dcmi module initialize failed\n',
                               rc=255))
    driver = _driver(conf, tree)
    assert [d.health for d in driver.discover()] == ['healthy', 'healthy']
    assert 'dcmi module initialize failed' in caplog.text
    caplog.clear()
    driver.discover()
    assert 'npu-smi cannot be used' not in caplog.text
    tree = fpga_hosts.ascend_pair_host(str(tmp_path / 'other'),
                                       health=('Critical', 'Critical'))
    assert [d.health for d in _driver(conf, tree, use_npu_smi=False)
            .discover()] == ['healthy', 'healthy']
    assert tools.calls(tree.tools_dir) == []


def test_health_of_an_npu_that_is_gone(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    tree.remove_pci(fpga_hosts.ASCEND_910B)
    assert driver.health(devices) == {fpga_hosts.ASCEND_910B: 'unhealthy',
                                      fpga_hosts.ASCEND_310P: 'healthy'}


def test_device_ids_and_determinism(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    driver = _driver(conf, tree, device_ids=['d802'])
    first = device_tree.tree_to_wire(driver.discover())
    assert [d['address'] for d in first] == [fpga_hosts.ASCEND_910B]
    assert device_tree.tree_to_wire(driver.discover()) == first


@pytest.mark.parametrize('option,value,message', [
    ('device_ids', ['d900'], 'd900: not an Ascend NPU id'),
    ('device_ids', ['npu'], 'is not a PCI id'),
    ('resource_class', 'npu', 'is not a resource class'),
    ('addresses', ['zz'], 'is not a PCI address'),
])
def test_bad_options(conf, tmp_path, option, value, message):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    with pytest.raises(driver_errors.DriverConfigError, match=message):
        _driver(conf, tree, **{option: value})


# Utilization --------------------------------------------------------------

def _usages(npu):
    return ['npu-smi', 'info', '-t', 'usages', '-i', str(npu)]


def _utilization(driver):
    return driver.utilization(driver.discover())


def test_utilization_per_npu_mapped_by_bus_info(conf, tmp_path):
    """NPU 0 is the 310P on bus c1 (its device memory is Memory, DDR);
    NPU 1 the 910B on bus 41 (HBM; its Memory is the board's DDR)."""
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    assert _utilization(_driver(conf, tree)) == {
        fpga_hosts.ASCEND_310P: {'gpu_percent': 12.0,
                                 'memory_total_mib': 44280,
                                 'memory_used_mib': 1328},
        fpga_hosts.ASCEND_910B: {'gpu_percent': 37.0,
                                 'memory_total_mib': 65536,
                                 'memory_used_mib': 16384}}
    calls = tools.calls(tree.tools_dir)
    assert _usages(0) in calls and _usages(1) in calls
    # Read-only: npu-smi is only asked for info.
    assert all(call[1] == 'info' for call in calls)


def test_utilization_only_for_the_devices_asked(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = [d for d in driver.discover()
               if d.address == fpga_hosts.ASCEND_910B]
    assert list(driver.utilization(devices)) == [fpga_hosts.ASCEND_910B]
    assert _usages(0) not in tools.calls(tree.tools_dir)


@pytest.mark.parametrize('rows,expected', [
    # NA values are left out, each on its own.
    ([('Aicore Usage Rate(%)', 'NA'), ('HBM Capacity(MB)', 65536),
      ('HBM Usage Rate(%)', 'NA')], {'memory_total_mib': 65536}),
    ([('Aicore Usage Rate(%)', 4), ('HBM Capacity(MB)', 'NA'),
      ('HBM Usage Rate(%)', 10)], {'gpu_percent': 4.0}),
    # A board with HBM has no device memory in Memory (its DDR), even
    # when its HBM says NA.
    ([('Memory Capacity(MB)', 15171), ('Memory Usage Rate(%)', 6),
      ('HBM Capacity(MB)', 'NA'), ('HBM Usage Rate(%)', 'NA')], {}),
    # Without HBM keys: Memory.
    ([('Memory Capacity(MB)', 8192), ('Memory Usage Rate(%)', 50),
      ('Aicore Usage Rate(%)', 'NA')],
     {'memory_total_mib': 8192, 'memory_used_mib': 4096}),
    # Out of range or not a number.
    ([('Aicore Usage Rate(%)', 101), ('Memory Capacity(MB)', '-1'),
      ('Memory Usage Rate(%)', 5)], {}),
    ([('Aicore Usage Rate(%)', '7.5'), ('Memory Capacity(MB)', 1000),
      ('Memory Usage Rate(%)', 'x')],
     {'gpu_percent': 7.5, 'memory_total_mib': 1000}),
])
def test_usage_values(conf, tmp_path, rows, expected):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path), usages=(
        tools.Reply(fpga_hosts.npu_usages(*rows)),
        tools.Reply(fpga_hosts.USAGES_910B)))
    found = _utilization(_driver(conf, tree))
    assert found.get(fpga_hosts.ASCEND_310P, {}) == expected
    assert found[fpga_hosts.ASCEND_910B]['gpu_percent'] == 37.0


@pytest.mark.parametrize('reply', [
    tools.Reply(stderr='This device does not support querying usages.\n',
                rc=255),
    tools.Reply('garbage\n'),
    None,  # a query this npu-smi does not know
])
def test_one_npu_failing_leaves_only_it_out(conf, tmp_path, reply):
    tree = fpga_hosts.ascend_pair_host(
        str(tmp_path), usages=(reply, tools.Reply(fpga_hosts.USAGES_910B)))
    assert list(_utilization(_driver(conf, tree))) == [
        fpga_hosts.ASCEND_910B]


def test_no_utilization_without_npu_smi(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    tree.remove('usr/bin/npu-smi')
    driver = _driver(conf, tree)
    devices = driver.discover()
    assert len(devices) == 2
    assert driver.utilization(devices) == {}


def test_no_utilization_when_npu_smi_fails_or_is_off(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(
        str(tmp_path), list_reply=tools.Reply(
            stderr='dcmi module initialize failed\n', rc=255))
    assert _utilization(_driver(conf, tree)) == {}
    assert _usages(0) not in tools.calls(tree.tools_dir)
    tree = fpga_hosts.ascend_pair_host(str(tmp_path / 'other'))
    assert _utilization(_driver(conf, tree, use_npu_smi=False)) == {}
    assert tools.calls(tree.tools_dir) == []


def test_utilization_with_health_unknown_to_npu_smi(conf, tmp_path):
    """The fact sheet's host: npu-smi without ``-t health`` still maps
    NPU 0 by bus info for its usages."""
    tree = hosts.ascend_host(str(tmp_path))
    tools.write_tool(tree.tools_dir, 'npu-smi', {
        ('info', '-l'): tools.Reply('\tNPU ID : 0\n'),
        ('info', '-t', 'board', '-i', '0'): tools.Reply(
            '\tPCIe Bus Info : %s\n' % hosts.ASCEND),
        ('info', '-t', 'usages', '-i', '0'): tools.Reply(
            fpga_hosts.USAGES_910B)})
    assert _utilization(_driver(conf, tree)) == {hosts.ASCEND: {
        'gpu_percent': 37.0, 'memory_total_mib': 65536,
        'memory_used_mib': 16384}}


def test_an_npu_that_is_gone_has_no_utilization(conf, tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    driver = _driver(conf, tree)
    devices = driver.discover()
    tree.remove_pci(fpga_hosts.ASCEND_910B)
    assert list(driver.utilization(devices)) == [fpga_hosts.ASCEND_310P]
    assert _usages(1) not in tools.calls(tree.tools_dir)


def test_the_agent_reports_the_utilization(conf, tmp_path):
    """Through the agent's report: the readings pass its cleaning."""
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    wire, failed, utilization = discovery.Discovery(
        'h', 'h', [_driver(conf, tree)], None).collect_all()
    assert failed == [] and len(wire) == 2
    assert utilization[fpga_hosts.ASCEND_910B] == {
        'gpu_percent': 37.0, 'memory_total_mib': 65536,
        'memory_used_mib': 16384}
    assert utilization[fpga_hosts.ASCEND_310P]['memory_used_mib'] == 1328
