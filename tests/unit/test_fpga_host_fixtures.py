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

"""The fixture hosts of the FPGA and NPU drivers' tests
(``tests/fixtures/hosts/fpga_hosts.py``): shaped as the kernel lays
them out, with fake tools that behave."""

import json
import subprocess

import pytest

from cyborg.accelerator.drivers.ascend import huawei
from cyborg.accelerator.drivers.fpga import intel
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts
from tests.unit import test_host_fixtures as fixture_checks

BUILDERS = [fpga_hosts.dfl_two_port_host, fpga_hosts.alveo_u250_host,
            fpga_hosts.inspur_fpga_host, fpga_hosts.ascend_pair_host]
CHECKS = fixture_checks.REAL_HOST_CHECKS


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
