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

"""MIG-backed vGPUs created as mdevs (vGPU 13 to 16) in ``homogeneous``
partition mode, on a fixture A100 in MIG mode whose VFs list the
MIG-backed mdev types: what is reported, a bind that creates the GPU
instance and then the mdev, the unbind, a reboot restored, and a
creation a killed agent left half done rolled back."""

from __future__ import annotations

import os

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.nvidia_gpu import mig_vgpu
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_mig
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.unit.accelerator.drivers.nvidia_gpu import test_driver
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import driver_for
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import offered

UUID1 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
UUID2 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1002'
HOMOGENEOUS = ('[nvidia_gpu]\npartition_mode = homogeneous\n'
               'mig_profiles = 3g.20gb,1g.5gb\n')
MDEV = device_tree.Preparation.MDEV

make = pytest.fixture(test_driver.make.__wrapped__, name='make')


def _tool(tree):
    return mig.MigTool(runner.CommandRunner(search_path=[tree.tools_dir]),
                       10.0)


def _child(driver):
    (device,) = driver.discover()
    assert device.std_board_info['mode'] == 'mdev-vf'
    return offered(device)


def _available(tree, vf, type_id):
    return int(tree.read(tree.dev(vf, 'mdev_supported_types', type_id,
                                  'available_instances')))


def _mdev_type(tree, mdev_uuid):
    """(parent VF, type id) of an existing mdev."""
    path = os.path.realpath(tree.abs('sys/bus/mdev/devices/' + mdev_uuid))
    return (os.path.basename(os.path.dirname(path)), os.path.basename(
        os.path.realpath(os.path.join(path, 'mdev_type'))))


def test_a_mig_gpu_with_mdev_types_serves_a_profile_made_at_bind(make):
    tree, conf = make(hosts.nvidia_a100_mig_mdev_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    child = _child(driver)
    # The first profile of mig_profiles: 2 of 3g.20gb fit the GPU.
    assert (child.resource_class, child.num_accelerators,
            child.preparation) == ('CUSTOM_MIG_3G_20GB', 2, MDEV)
    assert child.attributes['vgpu_type'] == 'nvidia-476'
    assert len(child.attach_handles) == 16
    handle = child.attach_handles[5]
    assert handle.attach_type == device_tree.AttachType.MDEV
    info = handle.attach_info
    assert (info['asked_type'], info['mig_profile'], info['mig_gpu']) == (
        'nvidia-476', '3g.20gb', '0')
    vf = hosts.a100_vfs()[5]
    # No GPU instance yet: NVIDIA's vGPU manager offers no 3g.20gb vGPU.
    assert _available(tree, vf, 'nvidia-476') == 0

    driver.prepare_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    driver.prepare_attach_handle(handle, UUID1, MDEV)  # repeated
    tree.settle()
    assert tree.refused == []
    (gi,) = _tool(tree).gpu_instances(0)
    assert gi.name == '3g.20gb'
    # The mdev Nova attaches: the handle's uuid, on the handle's VF.
    assert _mdev_type(tree, UUID1) == (vf, 'nvidia-476')
    assert driver.is_prepared(handle, UUID1, MDEV) is True
    # The VF runs it; the GPU has no idle 3g.20gb instance left.
    assert {_available(tree, v, 'nvidia-476')
            for v in hosts.a100_vfs()} == {0}
    # Held + still creatable: the total stays 2.
    assert _child(driver).num_accelerators == 2

    driver.release_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    driver.release_attach_handle(handle, UUID1, MDEV)  # repeated
    tree.settle()
    assert tree.mdevs_of(vf) == []
    assert _tool(tree).gpu_instances(0) == []
    assert driver._mig_vgpus.journal.entries() == {}


def test_a_vgpu_the_vf_cannot_make_rolls_the_instance_back(make):
    tree, conf = make(hosts.nvidia_a100_mig_mdev_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handle = _child(driver).attach_handles[0]
    # Another vGPU on the VF (made by hand, in a GPU instance made by
    # hand): no type is available there, even once the GPU instance of
    # the bind exists.
    _tool(tree).create_gpu_instance(0, 19)  # 1g.5gb
    assert tree.create_mdev(hosts.a100_vfs()[0], 'nvidia-474', UUID2)
    with pytest.raises(errors.PrepareFailed, match='cannot create mdev'):
        driver.prepare_attach_handle(handle, UUID1, MDEV)
    assert [g.name for g in _tool(tree).gpu_instances(0)] == ['1g.5gb']
    assert driver._mig_vgpus.journal.entries() == {}


def _reboot(tree):
    """What a host reboot does: every mdev and GPU instance gone (MIG
    mode stays)."""
    tree.reboot()
    gpus = fake_mig.read_state(hosts.mig_state(tree))
    for gpu in gpus:
        gpu.gis = []
    fake_mig.write_state(hosts.mig_state(tree), gpus)
    fake_mig.refresh_mdev_types(hosts.mig_state(tree))


def test_the_agent_restores_mdev_partitions_a_reboot_lost(make, caplog):
    tree, conf = make(hosts.nvidia_a100_mig_mdev_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    handles = _child(driver).attach_handles
    driver.prepare_attach_handle(handles[0], UUID1, MDEV)
    driver.prepare_attach_handle(handles[1], UUID2, MDEV)
    tree.settle()
    _reboot(tree)
    assert tree.mdevs_of(hosts.a100_vfs()[0]) == []
    caplog.set_level('INFO')
    driver = driver_for(tree, conf)  # the agent's start
    tree.settle()
    assert caplog.text.count('restored MIG partition') == 2
    assert [g.name for g in _tool(tree).gpu_instances(0)] == [
        '3g.20gb', '3g.20gb']
    vfs = hosts.a100_vfs()
    assert (_mdev_type(tree, UUID1), _mdev_type(tree, UUID2)) == (
        (vfs[0], 'nvidia-476'), (vfs[1], 'nvidia-476'))
    # A restart without a reboot changes nothing.
    caplog.clear()
    driver_for(tree, conf)
    tree.settle()
    assert 'restored' not in caplog.text
    assert len(_tool(tree).gpu_instances(0)) == 2


@pytest.mark.parametrize('mdev_made', [False, True])
def test_a_creation_a_killed_agent_left_is_rolled_back(make, caplog,
                                                       mdev_made):
    """Killed after the GPU instance was recorded, before or after the
    mdev was written: the next start undoes both."""
    tree, conf = make(hosts.nvidia_a100_mig_mdev_host, HOMOGENEOUS)
    vf = hosts.a100_vfs()[3]
    gi = _tool(tree).create_gpu_instance(0, 9)  # 3g.20gb
    journal = mig_vgpu.Journal(conf.state_path + '/nvidia_gpu/mig')
    journal.write(UUID1, {'gpu': 0, 'profile': 9, 'vf': vf,
                          'type': 'nvidia-476', 'kind': mig_vgpu.MDEV,
                          'gi': gi.id, 'step': mig_vgpu.STEP_INSTANCE})
    if mdev_made:
        assert tree.create_mdev(vf, 'nvidia-476', UUID1)
    driver = driver_for(tree, conf)
    tree.settle()
    assert 'rolled back the unfinished MIG partition %s' % UUID1 \
        in caplog.text
    assert tree.mdevs_of(vf) == []
    assert _tool(tree).gpu_instances(0) == []
    assert journal.entries() == {}
    assert _child(driver).num_accelerators == 2


def test_everything_reported_can_be_made(make):
    """Placement may grant every unit the child reports: seven 1g.5gb
    vGPUs on seven VFs of the A100, and then no more are reported."""
    tree, conf = make(hosts.nvidia_a100_mig_mdev_host,
                      '[nvidia_gpu]\npartition_mode = homogeneous\n'
                      'mig_profiles = 1g.5gb\n')
    driver = driver_for(tree, conf)
    child = _child(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_1G_5GB', 7)
    keys = ['83b8f4f2-509f-382f-3c1e-e6bfe0fa10%02d' % n for n in range(7)]
    # Handles in the order the conductor might pick them: any free one.
    for key, handle in zip(keys, child.attach_handles[::2], strict=False):
        driver.prepare_attach_handle(handle, key, MDEV)
        tree.settle()
    assert tree.refused == []
    assert len(_tool(tree).gpu_instances(0)) == 7
    assert sorted(m for vf in hosts.a100_vfs()
                  for m in tree.mdevs_of(vf)) == keys
    child = _child(driver)
    assert child.num_accelerators == 7  # held + none creatable
    assert {_available(tree, vf, 'nvidia-474')
            for vf in hosts.a100_vfs()} == {0}
    for key, handle in zip(keys, child.attach_handles[::2], strict=False):
        driver.release_attach_handle(handle, key, MDEV)
    tree.settle()
    assert _tool(tree).gpu_instances(0) == []
    assert _child(driver).num_accelerators == 7
