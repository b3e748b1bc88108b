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

"""Remediation of NVIDIA GPUs on fixture hosts with the fake tools: each
default catalog entry for an Xid in the kernel log, resets through
``nvidia-smi --gpu-reset`` (done, failed and escalated, waiting for a
bound accelerator request), and recovery after N clean reports."""

import logging

import pytest

from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import remediate
from cyborg.allinone import fake_tools as tools
from cyborg.domain import remediation
from tests.fixtures.hosts import hosts
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import MDEV_222
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import driver_for
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import make  # noqa

GPU = hosts.VGPU_PARENT
RESET = ['nvidia-smi', '--gpu-reset', '-i', GPU]
REBOOT = ('cyborg.reboot-required', 'NoSchedule')


class Conductor:
    """Takes reports; says which devices hold accelerator requests."""

    def __init__(self, bound=()):
        self.bound = list(bound)
        self.reports = []

    def report_inventory(self, context, host, rp_name, devices, digest,
                         failed, utilization=None, acknowledged=False):
        self.reports.append(devices)
        return {'changed': True, 'synced': True}

    def bound_devices(self, context, host):
        return self.bound


@pytest.fixture
def gpu(make):  # noqa: F811
    """``gpu(*overrides, gpus=..., conductor=...)`` -> (tree, finder,
    conductor) of the vGPU host's T4, which the nvidia driver holds."""
    def _gpu(*overrides, reset_ok=True, conductor=None, n=3):
        tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
        tools.write_nvidia_smi(tree.tools_dir, [tools.Gpu(
            1, GPU, 'GPU-1', 'Tesla T4', reset_ok=reset_ok)])
        tools.write_dmesg(tree.tools_dir, [])
        conductor = conductor or Conductor()
        locks = driver_calls.DriverLocks()
        remediator = remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(overrides), n),
            locks, bound_devices=lambda context: conductor.bound_devices(
                context, 'h1'))
        finder = discovery.Discovery(
            'h1', 'h1', [driver_for(tree, conf)], conductor, locks=locks,
            remediator=remediator)
        return tree, finder, conductor
    return _gpu


def log(tree, *lines):
    tools.write_dmesg(tree.tools_dir, list(lines))


def report(finder, conductor):
    """(health, [(key, effect)]) of the GPU in one report."""
    finder.report(context=object())
    (device,) = conductor.reports[-1]
    return device['health'], [(t['key'], t['effect'])
                              for t in device.get('taints', [])]


def resets(tree):
    return [c for c in tools.calls(tree.tools_dir) if c[:2] == RESET[:2]]


def test_the_applications_xids_are_ignored(gpu):
    tree, finder, conductor = gpu()
    log(tree, *[tools.xid_line(GPU, xid, seconds=float(xid))
                for xid in (13, 31, 43, 45, 68, 109)])
    assert report(finder, conductor) == ('healthy', [])


@pytest.mark.parametrize('xid, expected', [
    (94, ('healthy', [('cyborg.xid.94', 'None')])),
    (92, ('healthy', [('cyborg.xid.92', 'None')])),
    (62, ('unhealthy', [('cyborg.xid.62', 'NoSchedule')])),
    (79, ('unhealthy', [REBOOT, ('cyborg.xid.79', 'NoSchedule')])),
])
def test_each_default_xid_entry(gpu, xid, expected):
    tree, finder, conductor = gpu()
    log(tree, tools.xid_line(GPU, xid),
        tools.xid_line(hosts.PGPU, 79))  # another GPU's
    assert report(finder, conductor) == expected
    assert resets(tree) == []


@pytest.mark.parametrize('xid', [48, 119])
def test_a_reset_that_works_clears_the_taint(gpu, xid, caplog):
    tree, finder, conductor = gpu(conductor=Conductor(bound=[GPU]))
    log(tree, tools.xid_line(GPU, xid))
    tainted = ('unhealthy', [('cyborg.xid.%d' % xid, 'NoSchedule')])
    # Bound: no reset, whatever the reports.
    for _ in range(2):
        assert report(finder, conductor) == tainted
    assert resets(tree) == []
    conductor.bound = []
    with caplog.at_level(logging.INFO):
        assert report(finder, conductor) == ('healthy', [])
    assert resets(tree) == [RESET]
    assert 'Reset device %s' % GPU in caplog.text
    # The old line is no new signal.
    assert report(finder, conductor) == ('healthy', [])
    assert resets(tree) == [RESET]


def test_a_reset_that_fails_escalates_to_a_host_reboot(gpu, caplog):
    tree, finder, conductor = gpu(reset_ok=False)
    log(tree, tools.xid_line(GPU, 48))
    escalated = ('unhealthy', [REBOOT, ('cyborg.xid.48', 'NoSchedule')])
    with caplog.at_level(logging.INFO):
        assert report(finder, conductor) == escalated
    assert 'being used by some other process' in caplog.text
    for _ in range(2):
        assert report(finder, conductor) == escalated
    assert resets(tree) == [RESET]  # tried once


def test_a_failed_reset_can_escalate_to_its_taint_only(gpu):
    tree, finder, conductor = gpu('xid.48: escalate=taint', reset_ok=False)
    log(tree, tools.xid_line(GPU, 48))
    assert report(finder, conductor) == (
        'unhealthy', [('cyborg.xid.48', 'NoSchedule')])


def test_no_reset_without_an_answer_from_the_conductor(gpu):
    conductor = Conductor()
    conductor.bound = None  # a conductor capped below RPC 1.4
    tree, finder, conductor = gpu(conductor=conductor)
    log(tree, tools.xid_line(GPU, 48))
    assert report(finder, conductor)[0] == 'unhealthy'
    assert resets(tree) == []


def test_no_reset_of_a_discovery_that_is_not_sent(gpu):
    tree, finder, _conductor = gpu()
    log(tree, tools.xid_line(GPU, 48))
    finder.collect()
    assert resets(tree) == []


def test_a_new_xid_after_a_reset_asks_for_another(gpu):
    tree, finder, conductor = gpu()
    first = tools.xid_line(GPU, 48, seconds=10.0)
    log(tree, first)
    report(finder, conductor)
    log(tree, first, tools.xid_line(GPU, 48, seconds=20.0))
    report(finder, conductor)
    assert resets(tree) == [RESET, RESET]


def test_recovery_after_n_clean_reports(gpu):
    tree, finder, conductor = gpu(n=2)
    log(tree, tools.xid_line(GPU, 62, seconds=1.0))
    tainted = ('unhealthy', [('cyborg.xid.62', 'NoSchedule')])
    assert report(finder, conductor) == tainted
    assert report(finder, conductor) == tainted  # the line is old now
    # Seen again before recovery: the clean count starts over.
    log(tree, tools.xid_line(GPU, 62, seconds=1.0),
        tools.xid_line(GPU, 62, seconds=2.0))
    assert report(finder, conductor) == tainted
    assert report(finder, conductor) == tainted
    assert report(finder, conductor) == ('healthy', [])


def test_xid_154_states_and_cancels_the_recovery_action(gpu):
    tree, finder, conductor = gpu(conductor=Conductor(bound=[GPU]))
    wants = tools.xid_line(GPU, 154, seconds=1.0, detail=(
        'GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset '
        'Required)'))
    log(tree, wants)
    assert report(finder, conductor) == (
        'unhealthy', [('cyborg.xid.154.gpu-reset-required', 'NoSchedule')])
    log(tree, wants, tools.xid_line(GPU, 154, seconds=2.0, detail=(
        'GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 '
        '(None)')))
    assert report(finder, conductor) == ('healthy', [])
    assert resets(tree) == []


def test_the_drivers_own_verdict_is_the_unhealthy_taint(gpu):
    tree, finder, conductor = gpu()
    tools.write_nvidia_smi(tree.tools_dir, [tools.Gpu(
        1, GPU, 'GPU-1', 'Tesla T4', ecc_uncorrected='2')])
    assert report(finder, conductor) == (
        'unhealthy', [('cyborg.unhealthy', 'NoSchedule')])
    (device,) = conductor.reports[-1]
    assert 'uncorrected ECC errors' in device['taints'][0]['reason']
    tools.write_nvidia_smi(tree.tools_dir, [tools.Gpu(
        1, GPU, 'GPU-1', 'Tesla T4')])
    assert report(finder, conductor) == ('healthy', [])


def test_a_passthrough_gpu_needing_a_reset_keeps_its_taint(make, caplog):  # noqa: F811
    tree, conf = make(hosts.passthrough_gpu_host)
    tree.set_aer(hosts.PGPU)
    conductor = Conductor()
    locks = driver_calls.DriverLocks()
    finder = discovery.Discovery(
        'h1', 'h1', [driver_for(tree, conf)], conductor, locks=locks,
        remediator=remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(
                ['pcie.aer-fatal: action=reset_device'])),
            locks, bound_devices=lambda context: []))
    finder.report(object())
    tree.set_aer(hosts.PGPU, fatal=1)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            finder.report(object())
    (device,) = conductor.reports[-1]
    assert device['health'] == 'unhealthy'
    assert 'cannot do' in device['taints'][0]['reason']
    assert caplog.text.count('its taint stays until the agent restarts') == 1
    assert not any(c[0] == 'nvidia-smi' for c in tools.calls(tree.tools_dir))


@pytest.mark.parametrize('detail, signal', [
    ('GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot '
     'Required)', 'xid.154.node-reboot-required'),
    ('GPU recovery action changed from 0x0 (None) to 0x4 (Drain and '
     'Reset)', 'xid.154.drain-and-reset'),
    ('GPU recovery action changed from 0x0 (None) to 0x9 (!!)', 'xid.154'),
    ('something else', 'xid.154'),
])
def test_xid_154_names_its_recovery_action(detail, signal):
    from cyborg.accelerator.drivers.nvidia_gpu import health as gpu_health
    assert gpu_health.xid_signal(154, detail) == signal


def _154(action):
    return ('GPU recovery action changed from 0x0 (None) to 0x1 (%s)'
            % action)


@pytest.mark.parametrize('xid, detail', [
    (95, 'Uncontained ECC error'), (120, 'GSP error'),
    (154, _154('GPU Reset Required')), (154, _154('Drain and Reset'))])
def test_the_other_reset_entries_reset_a_free_gpu_at_once(gpu, xid, detail):
    tree, finder, conductor = gpu()
    log(tree, tools.xid_line(GPU, xid, detail=detail))
    assert report(finder, conductor) == ('healthy', [])
    assert resets(tree) == [RESET]


def test_xid_154_node_reboot_required_taints_the_host(gpu):
    tree, finder, conductor = gpu()
    log(tree, tools.xid_line(GPU, 154,
                             detail=_154('Node Reboot Required')))
    assert report(finder, conductor) == ('unhealthy', [
        REBOOT, ('cyborg.xid.154.node-reboot-required', 'NoSchedule')])
    assert resets(tree) == []
