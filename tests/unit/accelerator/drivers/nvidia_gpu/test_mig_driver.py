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

"""nvidia_gpu_driver in ``homogeneous`` partition mode on a fixture
vGPU 17+ host whose H200 runs MIG mode (the fake nvidia-smi keeps its
GPU instances): what is reported, bind and unbind, profile switches
and the roll-back at start."""

from __future__ import annotations

import threading

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.nvidia_gpu import mig_vgpu
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_mig
from cyborg.allinone import fake_tools
from cyborg.domain import device_tree
from cyborg.domain import partitions as partition_rules
from tests.fixtures.hosts import hosts
from tests.unit.accelerator.drivers.nvidia_gpu import test_driver
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import driver_for
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import offered

UUID1 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
TYPES = hosts.VGPU17_TYPES + [(1415, 'NVIDIA H200X-2-35C')]
HOMOGENEOUS = ('[nvidia_gpu]\npartition_mode = homogeneous\n'
               'mig_profiles = 1g.18gb,2g.35gb\n')
VGPU_TYPE = device_tree.Preparation.VGPU_TYPE


def mig_host(root):
    tree = hosts.nvidia_vgpu17_host(root)
    for vf in hosts.vgpu17_vfs():
        tree.add_vendor_vgpu(vf, TYPES)
    fake_mig.write_nvidia_smi_mig(
        tree.tools_dir, [fake_tools.Gpu(0, hosts.VGPU17_PF, 'GPU-h',
                                        'NVIDIA H200')],
        root + '.mig.state', {0: 'NVIDIA H200'})
    return tree


def _tool(tree):
    return mig.MigTool(runner.CommandRunner(search_path=[tree.tools_dir]),
                       10.0)


_made: list = []

make = pytest.fixture(test_driver.make.__wrapped__, name='make')


@pytest.fixture(autouse=True)
def _overrides():
    """Overrides live in the option group, which every configuration
    of the driver's options shares: cleared after each test."""
    yield
    while _made:
        conf, name = _made.pop()
        conf.clear_override(name, 'nvidia_gpu')


def _override(conf, name, value):
    conf.set_override(name, value, 'nvidia_gpu')
    _made.append((conf, name))


def _current(tree, vf):
    return int(tree.read(tree.dev(vf, 'nvidia', 'current_vgpu_type')))


def _child(driver):
    (device,) = driver.discover()
    assert device.std_board_info['mode'] == 'sriov-vgpu'
    return offered(device)


def test_static_mode_asks_nothing_of_nvidia_smi_mig(make):
    tree, conf = make(mig_host, '[nvidia_gpu]\nenabled_vgpu_types = '
                      'H200X-1-18C\n')
    driver_for(tree, conf).discover()
    assert not [c for c in fake_tools.calls(tree.tools_dir)
                if c[1:2] == ['mig'] or 'mig.mode' in ' '.join(c)]


def test_a_mig_gpu_serves_one_profile_and_partitions_at_bind(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    child = _child(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_1G_18GB', 7)
    assert len(child.attach_handles) == 12
    handle = child.attach_handles[2]
    assert handle.attach_info['mig_profile'] == '1g.18gb'
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)  # repeated
    (gi,) = _tool(tree).gpu_instances(0)
    assert gi.name == '1g.18gb'
    vf = hosts.vgpu17_vfs()[2]
    assert _current(tree, vf) == 1414
    # Held + still creatable: the total stays 7.
    child = _child(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_1G_18GB', 7)
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)  # repeated
    assert _tool(tree).gpu_instances(0) == []
    assert _current(tree, vf) == 0


def test_an_empty_gpu_switches_profile_one_holding_partitions_never(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handle = _child(driver).attach_handles[0]
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    # Demand for 2g.35gb first (the policy's order): not while it holds
    # a 1g.18gb partition.
    _override(conf, 'mig_profiles', ['2g.35gb', '1g.18gb'])
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)
    child = _child(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_2G_35GB', 3)
    assert child.attach_handles[0].attach_info['vgpu_type'] == '1415'


def test_a_partition_that_cannot_be_made_fails_the_bind_and_leaves_none(
        make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handle = _child(driver).attach_handles[0]
    _tool(tree).create_gpu_instance(0, 0)  # the whole GPU taken meanwhile
    with pytest.raises(errors.PrepareFailed, match='Insufficient'):
        driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    vf = hosts.vgpu17_vfs()[0]
    assert _current(tree, vf) == 0
    assert len(_tool(tree).gpu_instances(0)) == 1


def test_a_partition_handle_in_static_mode_is_refused(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    handle = _child(driver_for(tree, conf)).attach_handles[0]
    _override(conf, 'partition_mode', 'static')
    with pytest.raises(errors.PrepareFailed, match='not homogeneous'):
        driver_for(tree, conf).prepare_attach_handle(handle, UUID1,
                                                     VGPU_TYPE)


def test_the_agent_rolls_back_a_half_made_partition_at_start(make, caplog):
    tree, conf = make(mig_host, HOMOGENEOUS)
    journal = mig_vgpu.Journal(conf.state_path + '/nvidia_gpu/mig')
    journal.write(UUID1, {'gpu': 0, 'profile': 19,
                          'vf': hosts.vgpu17_vfs()[0], 'type': 1414,
                          'gi': None, 'step': mig_vgpu.STEP_INTENT})
    _tool(tree).create_gpu_instance(0, 19)  # then the agent was killed
    driver = driver_for(tree, conf)
    assert _tool(tree).gpu_instances(0) == []
    assert journal.entries() == {}
    assert 'rolled back the unfinished MIG partition %s' % UUID1 \
        in caplog.text
    assert _child(driver).num_accelerators == 7


def test_without_nvidia_smi_mig_gpus_are_not_reported(make, caplog):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    fake_tools.write_nvidia_smi(tree.tools_dir, [])  # no MIG answers
    # Not offered as partitions; with no vGPU type configured and the
    # nvidia driver holding it, not for passthrough either.
    assert driver.discover() == []
    assert 'nvidia-smi mig cannot be used' in caplog.text


def _reboot(tree, state):
    """What a host reboot does: the GPU instances and vGPUs are gone
    (MIG mode stays)."""
    gpus = fake_mig.read_state(state)
    for gpu in gpus:
        gpu.gis = []
    fake_mig.write_state(state, gpus)
    for vf in hosts.vgpu17_vfs():
        tree.set_vgpu_type(vf, 0)


UUID2 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1002'


def test_the_agent_restores_the_partitions_a_reboot_lost(make, caplog):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handles = _child(driver).attach_handles
    driver.prepare_attach_handle(handles[0], UUID1, VGPU_TYPE)
    driver.prepare_attach_handle(handles[1], UUID2, VGPU_TYPE)
    _reboot(tree, tree.root + '.mig.state')
    # A GPU instance no partition holds (made by hand) is destroyed.
    _tool(tree).create_gpu_instance(0, 0)
    caplog.set_level('INFO')
    driver = driver_for(tree, conf)
    assert 'destroying GPU instance 1 (7g.141gb) of GPU 0' in caplog.text
    assert 'restored MIG partition %s' % UUID2 in caplog.text
    gis = _tool(tree).gpu_instances(0)
    assert [g.name for g in gis] == ['1g.18gb', '1g.18gb']
    vfs = hosts.vgpu17_vfs()
    assert (_current(tree, vfs[0]), _current(tree, vfs[1])) == (1414, 1414)
    # Restored before the first report: held + creatable as before.
    assert _child(driver).num_accelerators == 7
    driver.release_attach_handle(handles[0], UUID1, VGPU_TYPE)
    driver.release_attach_handle(handles[1], UUID2, VGPU_TYPE)
    assert _tool(tree).gpu_instances(0) == []


def test_a_partition_the_start_cannot_recreate_is_a_failed_restore(
        make, caplog):
    """The driver still loads; the agent's restore reports the handle
    with the reason, and restores the others."""
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handles = _child(driver).attach_handles
    driver.prepare_attach_handle(handles[0], UUID1, VGPU_TYPE)
    driver.prepare_attach_handle(handles[1], UUID2, VGPU_TYPE)
    _reboot(tree, tree.root + '.mig.state')
    tree.remove(tree.dev(hosts.vgpu17_vfs()[0], 'nvidia'))
    driver = driver_for(tree, conf)
    assert 'cannot restore MIG partition %s' % UUID1 in caplog.text
    assert driver.is_prepared(handles[1], UUID2, VGPU_TYPE) is True
    with pytest.raises(errors.PrepareFailed,
                       match='cannot restore MIG partition %s: cannot set '
                       'vGPU type 1414' % UUID1):
        driver.restore_attach_handle(handles[0], UUID1, VGPU_TYPE)


def test_a_restart_without_a_reboot_changes_nothing(make, caplog):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handle = _child(driver).attach_handles[0]
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    before = _tool(tree).gpu_instances(0)
    caplog.set_level('INFO')
    driver_for(tree, conf)
    assert _tool(tree).gpu_instances(0) == before
    assert 'restored' not in caplog.text and 'destroying' not in caplog.text


def test_a_gpu_with_a_partition_under_way_does_not_switch(make):
    """A creation recorded but whose GPU instance is not made yet: the
    GPU is not empty, whatever the demand."""
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    driver._mig_vgpus.journal.write(UUID1, {
        'gpu': 0, 'profile': 19, 'vf': hosts.vgpu17_vfs()[0],
        'type': 1414, 'gi': None, 'step': mig_vgpu.STEP_INTENT})
    _override(conf, 'mig_profiles', ['2g.35gb', '1g.18gb'])
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    driver._mig_vgpus.journal.remove(UUID1)
    assert _child(driver).resource_class == 'CUSTOM_MIG_2G_35GB'


def test_discovery_reads_free_counts_and_instances_of_one_moment(make):
    """No partition is made or destroyed between the read of the free
    counts (-lgip) and that of the instances (-lgi): an instance made
    in between would count as held and as still creatable, and
    Placement could grant it twice."""
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    tool = driver._mig_vgpus.tool
    read_profiles = tool.profiles
    free_during_read = []

    def profiles(index):
        # Whether another thread could start a creation now.
        outside = []
        thread = threading.Thread(target=lambda: outside.append(
            driver._mig_vgpus._lock.acquire(blocking=False)))
        thread.start()
        thread.join()
        if outside[0]:
            driver._mig_vgpus._lock.release()
        free_during_read.append(outside[0])
        return read_profiles(index)

    tool.profiles = profiles
    assert _child(driver).num_accelerators == 7
    assert free_during_read == [False]


class Guard:
    """A switch guard that records what it is asked and answers
    ``answer``."""

    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    def may_serve(self, address, deployable):
        self.asked.append((address, deployable))
        return self.answer


NAME_1G = '0000_41_00_0_1g.18gb'
NAME_2G = '0000_41_00_0_2g.35gb'


def test_an_empty_gpu_asks_before_it_switches_and_keeps_what_is_claimed(
        make, caplog):
    """Placement may have granted what an empty GPU serves to a claim
    whose bind has not come: refused, the GPU keeps serving what the
    conductor says it serves."""
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    guard = Guard(partition_rules.ALLOWED)
    driver.use_switch_guard(guard)
    # The first discovery asks (it knows nothing it served); later ones
    # serving the same profile do not.
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    assert guard.asked == [('0000:41:00.0', NAME_1G)]
    # Demand for 2g.35gb, and a claim of 1g.18gb not bound yet.
    guard.answer = partition_rules.SwitchAnswer(
        False, ('0000_41_00_0', NAME_1G))
    _override(conf, 'mig_profiles', ['2g.35gb', '1g.18gb'])
    caplog.set_level('INFO')
    for _round in range(2):
        assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    assert guard.asked[1:] == [('0000:41:00.0', NAME_2G)] * 2
    # Logged once while it lasts.
    assert caplog.text.count('GPU 0000:41:00.0 keeps serving 1g.18gb, '
                             'not 2g.35gb') == 1
    guard.answer = partition_rules.ALLOWED
    child = _child(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_2G_35GB', 3)


def test_a_gpu_refused_at_start_serves_what_the_conductor_says(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    _override(conf, 'mig_profiles', ['2g.35gb', '1g.18gb'])
    driver = driver_for(tree, conf)
    driver.use_switch_guard(Guard(partition_rules.SwitchAnswer(
        False, ('0000_41_00_0', NAME_1G))))
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    # Nothing known (a conductor that did not answer): nothing offered.
    driver = driver_for(tree, conf)
    driver.use_switch_guard(Guard(partition_rules.SwitchAnswer(False)))
    (device,) = driver.discover()
    assert device.deployables[0].children == []


def test_a_pin_is_guarded_as_the_policy_is(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    guard = Guard(partition_rules.ALLOWED)
    driver.use_switch_guard(guard)
    _child(driver)
    guard.answer = partition_rules.SwitchAnswer(False, (NAME_1G,))
    driver.set_partitions('0000:41:00.0', '2g.35gb', True)
    assert _child(driver).resource_class == 'CUSTOM_MIG_1G_18GB'
    assert guard.asked[-1] == ('0000:41:00.0', NAME_2G)
    guard.answer = partition_rules.ALLOWED
    assert _child(driver).resource_class == 'CUSTOM_MIG_2G_35GB'
