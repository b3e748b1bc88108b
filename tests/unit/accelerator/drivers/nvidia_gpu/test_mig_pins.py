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

"""nvidia_gpu_driver in ``homogeneous`` mode: what each MIG GPU reports
of its partitions, and the profile an administrator sets or pins."""

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.unit.accelerator.drivers.nvidia_gpu import test_mig_driver
from tests.unit.accelerator.drivers.nvidia_gpu.test_driver import driver_for

make = test_mig_driver.make
HOMOGENEOUS = test_mig_driver.HOMOGENEOUS
UUID1 = test_mig_driver.UUID1
VGPU_TYPE = test_mig_driver.VGPU_TYPE
mig_host = test_mig_driver.mig_host
_overrides = test_mig_driver._overrides
GPU = hosts.VGPU17_PF


def _device(driver):
    (device,) = driver.discover()
    return device


def _served(driver):
    device = _device(driver)
    return device.partitions, test_mig_driver.offered(device)


def test_a_mig_gpu_reports_its_partitions(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    partitions, child = _served(driver)
    assert partitions == {'mode': 'homogeneous', 'profile': '1g.18gb',
                          'pinned': False, 'in_use': 0, 'creatable': 7}
    driver.prepare_attach_handle(child.attach_handles[0], UUID1, VGPU_TYPE)
    partitions, _child = _served(driver)
    assert (partitions['in_use'], partitions['creatable']) == (1, 6)
    # On the wire to the conductor; left out for a device without.
    (wire,) = device_tree.tree_to_wire([_device(driver)])
    assert wire['partitions']['in_use'] == 1


def test_a_gpu_in_static_mode_reports_no_partitions(make):
    tree, conf = make(mig_host, '[nvidia_gpu]\nenabled_vgpu_types = '
                      'H200X-1-18C\n')
    (device,) = driver_for(tree, conf).discover()
    assert device.partitions is None
    (wire,) = device_tree.tree_to_wire([device])
    assert 'partitions' not in wire


def test_a_pinned_gpu_keeps_its_profile_against_the_policy(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    driver.set_partitions(GPU, '2g.35gb', True)
    partitions, child = _served(driver)
    assert (child.resource_class, child.num_accelerators) == (
        'CUSTOM_MIG_2G_35GB', 3)
    assert partitions == {'mode': 'homogeneous', 'profile': '2g.35gb',
                          'pinned': True, 'in_use': 0, 'creatable': 3}
    # The pin outlives the agent (a new driver reads it back), and the
    # policy (1g.18gb first, one free wanted) does not switch it.
    partitions, child = _served(driver_for(tree, conf))
    assert (partitions['profile'], partitions['pinned']) == ('2g.35gb', True)
    # Unpinned: the policy chooses again.
    driver.set_partitions(GPU, None, False)
    partitions, child = _served(driver)
    assert (partitions['profile'], partitions['pinned']) == (
        '1g.18gb', False)
    assert child.resource_class == 'CUSTOM_MIG_1G_18GB'


def test_a_profile_set_without_pin_is_served_until_the_policy_switches(
        make):
    tree, conf = make(mig_host, HOMOGENEOUS + 'mig_min_free = 0\n')
    driver = driver_for(tree, conf)
    driver.set_partitions(GPU, '2g.35gb', False)
    partitions, _child = _served(driver)
    assert (partitions['profile'], partitions['pinned']) == (
        '2g.35gb', False)


def test_a_gpu_holding_partitions_refuses_a_profile(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    _partitions, child = _served(driver)
    driver.prepare_attach_handle(child.attach_handles[0], UUID1, VGPU_TYPE)
    with pytest.raises(errors.PartitionRefused,
                       match='holds 1 partition.*once they are released'):
        driver.set_partitions(GPU, '2g.35gb', True)
    partitions, child = _served(driver)
    assert (partitions['profile'], partitions['pinned']) == (
        '1g.18gb', False)


@pytest.mark.parametrize('profile', ['3g.71gb', '7g.141gb', '9g.1gb'])
def test_a_profile_the_gpu_does_not_serve_is_refused(make, profile):
    tree, conf = make(mig_host, HOMOGENEOUS)
    driver = driver_for(tree, conf)
    with pytest.raises(errors.PartitionProfileUnknown,
                       match='cannot serve profile %s; it serves '
                       '1g.18gb, 2g.35gb' % profile.replace('.', r'\.')):
        driver.set_partitions(GPU, profile, True)
    assert _served(driver)[0]['profile'] == '1g.18gb'


def test_partitions_are_refused_outside_homogeneous_mode(make):
    tree, conf = make(mig_host, '[nvidia_gpu]\nenabled_vgpu_types = '
                      'H200X-1-18C\n')
    with pytest.raises(errors.PartitionRefused, match='not homogeneous'):
        driver_for(tree, conf).set_partitions(GPU, '1g.18gb', True)


def test_a_gpu_that_is_not_partitioned_is_refused(make):
    tree, conf = make(mig_host, HOMOGENEOUS)
    with pytest.raises(errors.PartitionRefused,
                       match='0000:01:00.0 is not in MIG mode'):
        driver_for(tree, conf).set_partitions('0000:01:00.0', '1g.18gb',
                                              True)
