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

"""The FPGA and NPU drivers as the agent loads them: entry points,
option groups, a bad option stopping the start (their fixture hosts:
``tests/unit/test_fpga_host_fixtures.py``)."""

import pytest

from cyborg.accelerator.drivers.ascend import huawei
from cyborg.accelerator.drivers.fpga import inspur
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.agent import discovery
from cyborg.allinone import fake_tools as tools
from cyborg.common import exception
from cyborg.conf import opts
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts

DRIVERS = {
    'intel_fpga_driver': intel.IntelFPGADriver,
    'xilinx_fpga_driver': xilinx.XilinxFPGADriver,
    'inspur_fpga_driver': inspur.InspurFPGADriver,
    'huawei_ascend_driver': huawei.HuaweiAscendDriver,
}


def _everything_host(root):
    """One host with a card of every driver (fpgainfo and npu-smi
    included: none of the tools may be real)."""
    tree = fpga_hosts.dfl_two_port_host(root)
    for address, vendor, device, driver in (
            (hosts.ALVEO_MGMT, hosts.XILINX, 0x5004, 'xclmgmt'),
            (hosts.ALVEO_USER, hosts.XILINX, 0x5005, 'xocl'),
            (fpga_hosts.INSPUR_FPGA, fpga_hosts.INSPUR, 0x0911, 'vfio-pci'),
            (hosts.ASCEND, hosts.HUAWEI, 0xd801, 'vfio-pci')):
        tree.add_pci(address, vendor, device, hosts.CLASS_ACCELERATOR,
                     driver=driver)
    tools.write_tool(tree.tools_dir, 'fpgainfo', {('fme',): tools.Reply(
        tools.fpgainfo_fme(fpga_hosts.N6001_PF, 0xbcce, 1,
                           fpga_hosts.N6001_PR))})
    tools.write_tool(tree.tools_dir, 'npu-smi', {
        ('info', '-l'): tools.Reply('\tTotal Count : 0\n')})
    return tree


def test_entry_points_load_with_the_agent(conf, tmp_path, monkeypatch):
    tree = _everything_host(str(tmp_path))
    conf.set_override('host_root', tree.root, group='agent')
    conf.set_override('enabled_drivers', list(DRIVERS), group='agent')
    # Only the fixture's tools can be found.
    monkeypatch.setenv('PATH', tree.tools_dir)
    monkeypatch.setattr('cyborg.accelerator.drivers.utils.runner.EXTRA_PATH',
                        ())
    drivers = discovery.load_drivers(conf)
    assert [d.name for d in drivers] == list(DRIVERS)
    for driver, cls in zip(drivers, DRIVERS.values(), strict=True):
        assert type(driver) is cls
    wire, failed = discovery.Discovery('h', 'h', drivers, None).collect()
    assert failed == []
    assert sorted((d['driver'], d['address'], d['health']) for d in wire) \
        == [('huawei_ascend_driver', hosts.ASCEND, 'healthy'),
            ('inspur_fpga_driver', fpga_hosts.INSPUR_FPGA, 'healthy'),
            ('intel_fpga_driver', fpga_hosts.N6001_PF, 'healthy'),
            ('xilinx_fpga_driver', hosts.ALVEO_MGMT, 'healthy')]
    assert {c[0] for c in tools.calls(tree.tools_dir)} == {'fpgainfo',
                                                           'npu-smi'}


@pytest.mark.parametrize('name, option, value', [
    ('intel_fpga_driver', 'addresses', ['x']),
    ('xilinx_fpga_driver', 'resource_class', 'fpga'),
    ('inspur_fpga_driver', 'device_ids', ['x']),
    ('huawei_ascend_driver', 'device_ids', ['ffff']),
])
def test_bad_options_stop_the_agent(conf, tmp_path, name, option, value):
    conf.set_override('host_root', str(tmp_path), group='agent')
    conf.set_override('enabled_drivers', [name], group='agent')
    conf.set_override(option, value, group=name)
    with pytest.raises(exception.ConfigInvalid) as error:
        discovery.load_drivers(conf)
    assert 'accelerator driver %s cannot be loaded' % name in str(
        error.value)
    assert '[%s] %s: ' % (name, option) in str(error.value)


def test_option_groups_are_listed():
    groups = [group.name for group, _ in opts.list_opts()
              if hasattr(group, 'name')]
    for name in DRIVERS:
        assert name in groups
