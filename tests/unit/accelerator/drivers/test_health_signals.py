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

"""The PCIe health signals every driver reads from sysfs (presence, AER
counters rising, link below its maximum), on each driver's fixture host,
through the agent's discovery and the default remediation catalog:
GPU (passthrough on vfio-pci too), QAT, NIC VF, NVMe, FPGA and NPU."""

import inspect
import json
import tempfile

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from cyborg.accelerator.drivers.amd_gpu import driver as amd
from cyborg.accelerator.drivers.ascend import huawei
from cyborg.accelerator.drivers.fpga import intel as intel_fpga
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.accelerator.drivers.nic import intel as nic
from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia
from cyborg.accelerator.drivers.pci import driver as pci_driver
from cyborg.accelerator.drivers.qat import intel as qat
from cyborg.accelerator.drivers.ssd import inspur
from cyborg.accelerator.drivers.utils import runner
from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import remediate
from cyborg.domain import remediation
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts as more

# (driver, fixture host, {group: {option: value}}, the device's address)
CASES = {
    'gpu-passthrough': (nvidia.NvidiaGpuDriver, hosts.passthrough_gpu_host,
                        {'nvidia_gpu': {'rebind_nvidia_gpus': False}},
                        hosts.PGPU),
    'amd-gpu': (amd.AmdGpuDriver, hosts.amd_gpu_host, {}, hosts.MI210),
    'qat': (qat.IntelQATDriver, hosts.qat_4xxx_host, {}, hosts.QAT_PF),
    'nic': (nic.IntelNICDriver, hosts.sriov_nic_host, {}, hosts.X710_PF),
    'nic-vf': (pci_driver.PCIDriver, hosts.sriov_nic_host,
               {'pci_driver': {'device_spec': [json.dumps(
                   {'address': hosts.X710_VFS[1]})]}}, hosts.X710_VFS[1]),
    'nvme': (inspur.InspurNVMeSSDDriver, more.inspur_nvme_host, {},
             more.INSPUR_FREE),
    'fpga-dfl': (intel_fpga.IntelFPGADriver, hosts.intel_fpga_dfl_host, {},
                 hosts.DFL_PF),
    'fpga-alveo': (xilinx.XilinxFPGADriver, fpga_hosts.alveo_u250_host, {},
                   hosts.ALVEO_MGMT),
    'npu': (huawei.HuaweiAscendDriver, hosts.ascend_host, {}, hosts.ASCEND),
}


@pytest.fixture(params=sorted(CASES))
def host(request, conf, tmp_path):
    """(tree, discovery, address) of one driver on its fixture host."""
    cls, builder, options, address = CASES[request.param]
    tree = builder(str(tmp_path / 'host'))
    conf.set_override('host_root', tree.root, group='agent')
    for group, values in options.items():
        for name, value in values.items():
            conf.set_override(name, value, group=group)
    kwargs = {}
    if 'runner' in inspect.signature(cls).parameters:
        kwargs['runner'] = runner.CommandRunner(search_path=[tree.tools_dir])
    driver = cls(conf, **kwargs)
    driver.name = request.param
    locks = driver_calls.DriverLocks()
    finder = discovery.Discovery(
        'h1', 'h1', [driver], None, locks=locks,
        remediator=remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(()), 3), locks))
    return tree, finder, address


def _report(finder, address):
    """(health, [(key, effect)]) of the device in one discovery."""
    wire, failed = finder.collect()
    assert failed == []
    (device,) = [d for d in wire if d['address'] == address]
    return device['health'], [(t['key'], t['effect'])
                              for t in device.get('taints', [])]


def test_a_healthy_device_has_no_taint(host):
    tree, finder, address = host
    tree.set_aer(address, fatal=3, nonfatal=7)  # before the agent: baseline
    assert _report(finder, address) == ('healthy', [])
    assert _report(finder, address) == ('healthy', [])


def test_rising_fatal_aer_errors_taint_until_three_clean_reports(host):
    tree, finder, address = host
    tree.set_aer(address)
    assert _report(finder, address) == ('healthy', [])
    tree.set_aer(address, fatal=1)
    tainted = ('unhealthy', [('cyborg.pcie.aer-fatal', 'NoSchedule')])
    assert _report(finder, address) == tainted
    assert _report(finder, address) == tainted
    assert _report(finder, address) == tainted
    assert _report(finder, address) == ('healthy', [])


def test_rising_nonfatal_aer_errors_degrade(host):
    tree, finder, address = host
    tree.set_aer(address)
    _report(finder, address)
    tree.set_aer(address, nonfatal=4)
    assert _report(finder, address) == (
        'healthy', [('cyborg.pcie.aer-nonfatal', 'None')])


def test_a_narrow_link_degrades_while_it_lasts(host):
    tree, finder, address = host
    tree.write(tree.dev(address, 'max_link_width'), '16')
    tree.write(tree.dev(address, 'max_link_speed'), '16.0 GT/s PCIe')
    tree.set_link(address, width=16, speed='16.0 GT/s PCIe')
    assert _report(finder, address) == ('healthy', [])
    tree.set_link(address, width=4, speed='2.5 GT/s PCIe')
    degraded = ('healthy', [('cyborg.pcie.link-speed', 'None'),
                            ('cyborg.pcie.link-width', 'None')])
    for _ in range(4):
        assert _report(finder, address) == degraded
    tree.set_link(address, width=16, speed='16.0 GT/s PCIe')
    for _ in range(2):
        assert _report(finder, address) == degraded
    assert _report(finder, address) == ('healthy', [])


STORM_KEYS = {'fatal': 'cyborg.pcie.aer-fatal',
              'nonfatal': 'cyborg.pcie.aer-nonfatal',
              'width': 'cyborg.pcie.link-width'}


# The options it sets are set again in every example.
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 4),
       storm=st.lists(st.sets(st.sampled_from(sorted(STORM_KEYS))),
                      min_size=1, max_size=12))
def test_no_flapping_under_a_random_storm_of_sysfs_signals(conf, n, storm):
    """A passthrough GPU whose AER counters rise and whose link narrows
    at random: each taint is on exactly while its signal was seen in one
    of the last n discoveries, never dropping in between."""
    with tempfile.TemporaryDirectory() as root:
        tree = hosts.passthrough_gpu_host(root)
        conf.set_override('host_root', tree.root, group='agent')
        conf.set_override('rebind_nvidia_gpus', False, group='nvidia_gpu')
        driver = nvidia.NvidiaGpuDriver(conf, runner=runner.CommandRunner(
            search_path=[tree.tools_dir]))
        driver.name = 'nvidia_gpu_driver'
        locks = driver_calls.DriverLocks()
        finder = discovery.Discovery(
            'h1', 'h1', [driver], None, locks=locks,
            remediator=remediate.Remediator(remediation.Tracker(
                remediation.load_catalog(()), n), locks))
        counts = {'fatal': 0, 'nonfatal': 0}
        tree.set_aer(hosts.PGPU)
        finder.collect()  # the baseline
        for index, seen in enumerate(storm):
            for kind in ('fatal', 'nonfatal'):
                counts[kind] += kind in seen
            tree.set_aer(hosts.PGPU, **counts)
            tree.set_link(hosts.PGPU, width=4 if 'width' in seen else 16)
            _health, taints = _report(finder, hosts.PGPU)
            window = set().union(*storm[max(0, index - n + 1):index + 1])
            assert {key for key, _effect in taints} == {
                STORM_KEYS[kind] for kind in window}
