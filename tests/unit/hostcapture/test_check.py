# Copyright 2026 The Cyborg Authors.
#
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

"""``host check``: on each fixture host (and on its capture) it lists
the devices each driver reports and what it leaves out and why; it
fails on a driver that fails, matches nothing, or a configuration that
cannot work; and the cyborg-manage commands around it."""

from __future__ import annotations

import json
import os
import sys
import tarfile

import pytest

from cyborg.accelerator.drivers.fake import driver as fake_driver
from cyborg.accelerator.drivers.fake import opts as fake_opts
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.hostcapture import capture
from cyborg.hostcapture import check
from cyborg.hostcapture import replay
from tests.fixtures import captures
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts
from tests.functional import servers

#: host -> {driver: (the addresses of its devices, what it leaves out and
#: why: its notes)}.
EXPECTED = {
    'nvidia_gpu': {'nvidia_gpu_driver': (
        [hosts.PGPU, hosts.VGPU_PARENT], [])},
    'nvidia_passthrough': {'nvidia_gpu_driver': ([hosts.PGPU], [])},
    'nvidia_vgpu17': {'nvidia_gpu_driver': ([hosts.VGPU17_PF], [])},
    'nvidia_ampere': {'nvidia_gpu_driver': ([hosts.AMPERE_PF], [])},
    'amd_gpu': {'amd_gpu_driver': ([hosts.S7150, hosts.MI210], [
        'amd_gpu_driver: device 0000:05:00.0 is bound to amdgpu, not to '
        'one of [amd_gpu] passthrough_drivers; it is not reported'])},
    'qat_4xxx': {'intel_qat_driver': ([hosts.QAT_PF], [])},
    'qat_c6xx': {'intel_qat_driver': (
        [passthrough_hosts.C6XX_UP, passthrough_hosts.C6XX_DOWN], [
            'QuickAssist virtual function 0000:3d:01.2 is bound to the '
            'host driver c6xxvf; it is not offered to instances',
            'QuickAssist device 0000:3f:00.0 is unhealthy: adf_ctl '
            'reports down',
            'QuickAssist device 0000:da:00.0 has no virtual function an '
            'instance can use (0 VFs); it is not reported',
            # The remediation catalog's taint of the down device.
            'Device 0000:3f:00.0 (intel_qat_driver) tainted '
            'cyborg.unhealthy=unhealthy:NoSchedule: the driver reports it '
            'unhealthy'])},
    'sriov_nic': {'intel_nic_driver': ([hosts.X710_PF, hosts.E810_PF], [
        'Network card 0000:af:00.1 has no driver; its 1 virtual '
        'functions are not reported'])},
    'connectx': {'pci_driver': (
        passthrough_hosts.CX6_PF0_VFS + passthrough_hosts.CX6_PF1_VFS,
        [])},
    'nvme': {'inspur_nvme_ssd_driver': ([hosts.NVME_DATA], [
        'NVMe controller 0000:01:00.0 is in use on the host (nvme0n1p1, '
        'nvme0n1p2); it is not reported'])},
    'inspur_nvme': {'inspur_nvme_ssd_driver': (
        [passthrough_hosts.INSPUR_FREE, passthrough_hosts.INSPUR_VFIO], [
            'NVMe controller 0000:01:00.0 is in use on the host '
            '(nvme0n1p1, nvme0n1p2); it is not reported',
            'NVMe controller 0000:3c:00.0 is in use on the host '
            '(nvme2n1); it is not reported',
            'NVMe controller 0000:3d:00.0 is in use on the host '
            '(nvme3n1p1); it is not reported'])},
    'intel_fpga_dfl': {'intel_fpga_driver': ([hosts.DFL_PF], [])},
    'dfl_two_port': {'intel_fpga_driver': (['0000:3b:00.0'], [])},
    'alveo_u250': {'xilinx_fpga_driver': ([hosts.ALVEO_MGMT], [])},
    'inspur_fpga': {'inspur_fpga_driver': (['0000:86:00.0'], [])},
    'ascend_pair': {'huawei_ascend_driver': (
        ['0000:41:00.0', '0000:c1:00.0'], [])},
    'demo': {'nvidia_gpu_driver': (['0000:3b:00.0', '0000:d8:00.0'], []),
             'intel_qat_driver': (['0000:6b:00.0'], []),
             'intel_nic_driver': (['0000:af:00.0'], []),
             'intel_fpga_driver': (['0000:5e:00.0'], [])},
}


def summary(result: check.CheckResult) -> dict:
    return {d.name: (sorted(dev['address'] for dev in d.devices), d.notes)
            for d in result.drivers}


def test_every_fixture_host_has_its_expectation():
    assert sorted(EXPECTED) == sorted(captures.BY_NAME)


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_check_lists_what_each_driver_reports_and_leaves_out(
        name, tmp_path):
    host = captures.BY_NAME[name]
    tree = host.build(str(tmp_path / 'host'))
    conf = captures.configure(host, tree.root, str(tmp_path))
    result = check.check(conf, runner.CommandRunner([tree.tools_dir]),
                         sysfs.HostRoot(tree.root))
    expected = {driver: (sorted(addresses), notes) for driver, (
        addresses, notes) in EXPECTED[name].items()}
    assert summary(result) == expected
    assert result.problems == []
    # The capture of the host checks the same.
    opened = replay.open_capture(host.archive, str(tmp_path / 'replay'))
    replayed = check.check(conf, opened.runner(), opened.host())
    assert summary(replayed) == expected


def _check(tmp_path, name, drivers=None, ini=None, build=None):
    host = captures.BY_NAME[name]
    tree = (build or host.build)(str(tmp_path / 'host'))
    conf = captures.configure(
        captures.FixtureHost(name, host.build, drivers or host.drivers,
                             host.ini if ini is None else ini),
        tree.root, str(tmp_path))
    return check.check(conf, runner.CommandRunner([tree.tools_dir]),
                       sysfs.HostRoot(tree.root))


def test_a_driver_that_matches_nothing_fails_the_check(tmp_path):
    result = _check(tmp_path, 'qat_4xxx',
                    drivers=('intel_qat_driver', 'nvidia_gpu_driver'),
                    ini='')
    assert result.problems == [
        'nvidia_gpu_driver matches nothing on this host']
    assert check.render(result)[-1] == (
        'PROBLEM: nvidia_gpu_driver matches nothing on this host')


def test_a_configuration_that_cannot_work_fails_the_check(tmp_path):
    # A vGPU type on a device of this host that is no NVIDIA GPU.
    result = _check(tmp_path, 'qat_4xxx', drivers=('nvidia_gpu_driver',),
                    ini='[nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n'
                    '[vgpu_nvidia-222]\ndevice_addresses = %s\n'
                    % hosts.QAT_PF)
    assert result.drivers == []
    (problem,) = result.problems
    assert problem.startswith('the configuration cannot work on this '
                              'host: ')
    assert hosts.QAT_PF in problem


def test_a_driver_that_fails_fails_the_check(tmp_path):
    def broken(root):
        tree = hosts.qat_4xxx_host(root)
        tree.write(tree.dev(hosts.QAT_PF, 'vendor'), 'intel')
        return tree
    result = _check(tmp_path, 'qat_4xxx', build=broken)
    (driver,) = result.drivers
    assert driver.devices == []
    assert driver.error.startswith('SysfsValueError: ')
    assert result.problems == ['intel_qat_driver failed: %s'
                               % driver.error]


def test_the_rendering_names_devices_deployables_and_notes(tmp_path):
    lines = check.render(_check(tmp_path, 'nvme'))
    assert lines[0] == 'inspur_nvme_ssd_driver: 1 device(s)'
    assert lines[1] == '  0000:5e:00.0 SSD 0x19e5 NVMe 19e5:3714: healthy'
    assert lines[2].startswith(
        '    deployable 0000_5e_00_0: 1 x CUSTOM_SSD; traits '
        'CUSTOM_SSD_HUAWEI, CUSTOM_SSD_PRODUCT_ID_3714; preparation none; '
        '1 attach handle(s) PCI (first: bus=5e')
    assert lines[3].startswith('  left out or noted: NVMe controller '
                               '0000:01:00.0 is in use')
    assert lines[-1] == 'OK: 1 driver(s), 1 device(s)'


# cyborg-manage ---------------------------------------------------------

def _manage(tmp_path, host, host_root, *args):
    conf = tmp_path / 'manage.conf'
    conf.write_text('[DEFAULT]\nstate_path = %s\n[agent]\nhost_root = %s\n'
                    'enabled_drivers = %s\n%s' % (
                        tmp_path / 'state', host_root,
                        ','.join(host.drivers), host.ini))
    return servers.run(
        [sys.executable, '-m', 'cyborg.cmd.manage', '--config-file',
         str(conf), 'host', *args], cwd=str(tmp_path))


def test_manage_captures_a_capture_and_checks_it_without_a_database(
        tmp_path):
    host = captures.BY_NAME['qat_c6xx']
    output = tmp_path / 'again.tar.gz'
    # The host root is itself a capture: its replay is captured.
    done = _manage(tmp_path, host, host.archive, 'capture', '--output',
                   str(output), '--mask')
    assert done.returncode == 0, done.stderr
    # What the drivers log comes first, as the agent logs it.
    summary_line = done.stdout.splitlines()[-1]
    assert summary_line.startswith('Captured ')
    assert 'of driver(s) intel_qat_driver in %s' % output in summary_line
    assert summary_line.endswith(
        'serial numbers and MAC addresses masked.')
    with tarfile.open(output) as tar:
        manifest = json.loads(tar.extractfile(capture.MANIFEST).read())
    with tarfile.open(host.archive) as tar:
        original = json.loads(tar.extractfile(capture.MANIFEST).read())
    assert manifest['report'] == original['report']
    assert manifest['masked'] is True

    checked = _manage(tmp_path, host, str(tmp_path), 'check',
                      '--host-root', str(output), '--json')
    assert checked.returncode == 0, checked.stderr
    answer = json.loads(checked.stdout)
    assert answer['problems'] == []
    assert [d['name'] for d in answer['drivers']] == ['intel_qat_driver']
    assert not os.path.exists(tmp_path / 'state')  # nothing kept


def test_manage_check_fails_with_one_line_per_problem(tmp_path):
    host = captures.FixtureHost('x', hosts.qat_4xxx_host,
                                ('intel_qat_driver', 'amd_gpu_driver'))
    checked = _manage(tmp_path, host,
                      captures.BY_NAME['qat_4xxx'].archive, 'check')
    assert checked.returncode == 1
    assert checked.stdout.splitlines()[-1] == (
        'PROBLEM: amd_gpu_driver matches nothing on this host')
    refused = _manage(tmp_path, host, str(tmp_path / 'nowhere'), 'capture',
                      '--output', str(tmp_path / 'no' / 'x.tar.gz'))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        'cyborg-manage: cannot write %s: %s is no directory' % (
            tmp_path / 'no' / 'x.tar.gz', tmp_path / 'no')]


def test_a_driver_that_fails_while_it_is_built_fails_the_check(tmp_path):
    def broken(root):
        tree = hosts.nvidia_gpu_host(root)
        tree.write(tree.dev(hosts.PGPU, 'vendor'), 'nvidia')
        return tree
    result = _check(tmp_path, 'nvidia_gpu', build=broken)
    assert result.drivers == []
    (problem,) = result.problems
    assert problem == (
        "the configuration cannot work on this host: Invalid configuration: "
        "accelerator driver nvidia_gpu_driver cannot be loaded: "
        "/sys/bus/pci/devices/%s/vendor: 'nvidia': not a base 16 integer"
        % hosts.PGPU)


def test_a_utilization_that_cannot_be_read_is_a_note_not_a_failure(
        tmp_path):
    conf = captures.configure(
        captures.FixtureHost('fake', hosts.qat_4xxx_host, ('fake_driver',)),
        str(tmp_path), str(tmp_path))
    fake_opts.register_opts(conf)

    class NoUtilization(fake_driver.FakeDriver):
        def utilization(self, devices):
            raise RuntimeError('no counters')

    driver = NoUtilization(conf)
    driver.name = 'fake_driver'
    result = check._check_driver(conf, driver)
    assert result.problem is None
    assert len(result.devices) == 1
    assert result.notes == [
        'Driver fake_driver failed to read the utilization of its devices; '
        'they are reported without it (RuntimeError: no counters)']


def test_configured_addresses_the_host_lacks_fail_the_check(tmp_path):
    result = _check(tmp_path, 'qat_4xxx', ini='[intel_qat_driver]\n'
                    'addresses = %s,0000:99:00.0\n' % hosts.QAT_PF)
    (driver,) = result.drivers
    assert [d['address'] for d in driver.devices] == [hosts.QAT_PF]
    assert result.problems == [
        'intel_qat_driver: [intel_qat_driver] addresses names '
        '0000:99:00.0, which is no PCI device of this host']
    assert '  configuration: [intel_qat_driver] addresses names ' \
        '0000:99:00.0, which is no PCI device of this host' in (
            check.render(result))
