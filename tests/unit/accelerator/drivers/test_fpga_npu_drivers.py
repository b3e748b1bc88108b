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

"""The FPGA and NPU drivers as the agent loads them (entry points,
option groups, a bad option stopping the start), and their fixture
hosts: shaped as the kernel lays them out, fake tools that behave."""

import json
import subprocess

import pytest

from cyborg.accelerator.drivers.ascend import huawei
from cyborg.accelerator.drivers.fpga import inspur
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.allinone import fake_tools as tools
from cyborg.agent import discovery
from cyborg.common import exception
from cyborg.conf import opts

from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts
from tests.unit import test_host_fixtures as fixture_checks

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


# Fixture hosts ---------------------------------------------------------------

BUILDERS = [fpga_hosts.dfl_two_port_host, fpga_hosts.alveo_u250_host,
            fpga_hosts.inspur_fpga_host, fpga_hosts.ascend_pair_host]
CHECKS = [
    fixture_checks.test_every_link_is_relative_and_stays_inside,
    fixture_checks.test_bus_links_lead_into_the_topology,
    fixture_checks.test_attributes_end_in_newline_and_have_kernel_formats,
    fixture_checks.test_bound_devices_and_their_drivers_point_at_each_other,
    fixture_checks.test_iommu_groups_list_their_devices,
    fixture_checks.test_vfs_have_physfn_and_no_sriov_files,
    fixture_checks.test_vf_addresses_follow_offset_and_stride,
]


@pytest.mark.parametrize('build', BUILDERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize('check', CHECKS, ids=lambda f: f.__name__[5:])
def test_fixture_hosts_look_real(tmp_path, build, check):
    check(build(str(tmp_path / 'host')))


def test_fake_fpgaconf_rewrites_afu_id_only_on_success(tmp_path):
    tree = hosts.intel_fpga_dfl_host(str(tmp_path))
    afu = fpga_hosts.afu_id_path(tree, hosts.DFL_PF, 0)
    fake = fpga_hosts.write_fpgaconf(tree, ['--bus', '0x5e', 'a.gbs'],
                                     afu_path=afu, afu_id='1' * 32)
    assert subprocess.run([fake, '--bus', '0x5f', 'a.gbs']).returncode == 1
    assert tree.read(afu).strip() == hosts.DFL_AFU_ID
    assert subprocess.run([fake, '--bus', '0x5e', 'a.gbs']).returncode == 0
    assert tree.read(afu) == '1' * 32 + '\n'
    fpga_hosts.write_fpgaconf(tree, ['a.gbs'], afu_path=afu,
                              afu_id='2' * 32, rc=1)
    assert subprocess.run([fake, 'a.gbs']).returncode == 1
    assert tree.read(afu) == '1' * 32 + '\n'


def test_gbs_image_round_trips(tmp_path):
    path = fpga_hosts.write_gbs(str(tmp_path / 'a.gbs'), '3' * 32, '4' * 32)
    with open(path, 'rb') as f:
        data = f.read()
    assert data.startswith(b'XeonFPGA\xb7GBSv001')
    length = int.from_bytes(data[16:20], 'little')
    meta = json.loads(data[20:20 + length])
    assert meta['afu-image']['interface-uuid'] == fpga_hosts.dashed('3' * 32)
    assert intel.read_gbs(path) == intel.GbsInfo('3' * 32, ('4' * 32,))


def test_ascend_pair_npu_ids_run_against_pci_order(tmp_path):
    tree = fpga_hosts.ascend_pair_host(str(tmp_path))
    npu = tree.abs('usr/bin/npu-smi')
    board0 = subprocess.run([npu, 'info', '-t', 'board', '-i', '0'],
                            capture_output=True, text=True).stdout
    assert huawei.bus_info(board0) == intel.pci.parse_address(
        fpga_hosts.ASCEND_310P)
    listing = subprocess.run([npu, 'info', '-l'], capture_output=True,
                             text=True).stdout
    assert huawei.npu_ids(listing) == [0, 1]
