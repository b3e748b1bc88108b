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

"""nvidia_gpu_driver on fixture hosts: discovery of every shape, its
configuration, preparation and release, and health."""

from __future__ import annotations

import logging
import time

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import config as vgpu_config
from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf
from cyborg.accelerator.drivers.utils import mdev
from cyborg.accelerator.drivers.utils import runner
from cyborg.agent import discovery
from cyborg.allinone import fake_tools as tools
from cyborg.common import exception
from cyborg.conf import agent as agent_conf
from cyborg.conf import default as default_conf
from cyborg.domain import device_tree
from cyborg.domain import resource_names
from tests.fixtures.hosts import hosts

T4_TRAITS = ['CUSTOM_GPU_NVIDIA', 'CUSTOM_NVIDIA_1EB8', 'OWNER_CYBORG']
UUID1 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
UUID2 = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1002'


@pytest.fixture
def make(tmp_path):
    """Build a fixture host and a configuration reading it:
    ``make(builder, ini)`` -> (tree, conf). Unless ``rebind``, GPUs the
    nvidia driver holds are not offered for passthrough
    (``rebind_nvidia_gpus = false``), so that the fixture hosts' GPU on
    nvidia stays out of the tests of vGPUs and health."""
    def _make(builder, ini: str = '', rebind: bool = False):
        root = str(tmp_path / 'host')
        tree = builder(root)
        conf = cfg.ConfigOpts()
        default_conf.register_opts(conf)
        agent_conf.register_opts(conf)
        nvidia_conf.register_opts(conf)
        path = tmp_path / 'cyborg.conf'
        path.write_text('[DEFAULT]\nstate_path = %s\n[agent]\nhost_root = %s\n'
                        'enabled_drivers = nvidia_gpu_driver\n%s'
                        '[nvidia_gpu]\nrebind_nvidia_gpus = %s\n'
                        % (tmp_path / 'state', root, ini, rebind))
        conf(['--config-file', str(path)], project='cyborg',
             default_config_files=[])
        return tree, conf
    return _make


def driver_for(tree, conf) -> nvidia.NvidiaGpuDriver:
    return nvidia.NvidiaGpuDriver(
        conf, runner.CommandRunner(search_path=[tree.tools_dir]))


def summary(devices):
    """(address, model, mode, [(name, num, rc, traits, handles)]), the
    deployables parents first."""
    return [(d['address'], d['model'], d['std_board_info']['mode'],
             [(dep['name'], dep['num_accelerators'], dep['resource_class'],
               dep['traits'], len(dep['attach_handles']))
              for dep, _parent, _depth in device_tree.walk_wire(
                  d['deployables'])])
            for d in device_tree.tree_to_wire(devices)]


def offered(device):
    """The deployable Nova's requests land on: the GPU's vGPU type
    child, or the GPU itself when it is passed through."""
    (top,) = device.deployables
    if not top.children:
        return top
    (child,) = top.children
    return child


def handle_infos(device):
    return [h.attach_info for h in offered(device).attach_handles]


def gpu_parent(address, traits):
    """The summary line of a GPU running vGPUs: no inventory."""
    return (address.replace(':', '_').replace('.', '_'), 0, 'PGPU',
            traits, 0)


MDEV_222 = ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n'
            '[vgpu_nvidia-222]\ndevice_addresses = %s\n'
            % hosts.VGPU_PARENT)


# Discovery: passthrough ---------------------------------------------------

def test_without_rebind_gpus_held_by_nvidia_are_not_passed_through(
        make, caplog):
    tree, conf = make(hosts.nvidia_gpu_host)
    driver = driver_for(tree, conf)
    with caplog.at_level(logging.WARNING):
        assert driver.discover() == []
        assert driver.discover() == []
    warnings = [r for r in caplog.records if 'rebind_nvidia_gpus is false'
                in r.getMessage()]
    assert len(warnings) == 2  # once per GPU, not once per discovery


def test_pgpu_on_vfio_pci(make):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    (device,) = driver_for(tree, conf).discover()
    wire = device_tree.tree_to_wire([device])[0]
    assert wire == {
        'type': 'GPU', 'vendor': '0x10de', 'model': 'Tesla T4',
        'address': hosts.PGPU,
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info': {
            'domain': '0000', 'bus': '3b', 'device': '00',
            'function': '0'}}],
        'deployables': [{
            'name': '0000_3b_00_0', 'num_accelerators': 1,
            'resource_class': 'PGPU', 'traits': T4_TRAITS,
            'attach_handles': [{'attach_type': 'PCI', 'attach_info': {
                'domain': '0000', 'bus': '3b', 'device': '00',
                'function': '0'}}],
            'attributes': {}, 'driver_name': 'nvidia_gpu_driver',
            'preparation': 'none'}],
        'std_board_info': {
            'vendor_id': '0x10de', 'device_id': '0x1eb8',
            'subsystem_vendor_id': '0x10de',
            'subsystem_device_id': '0x12a2', 'class': '0x030200',
            'numa_node': 0, 'mode': 'passthrough'},
        'vendor_board_info': {
            'gpu_uuid': 'GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e0'},
        'health': 'healthy', 'driver': 'nvidia_gpu_driver'}


def test_unbound_gpu_is_passed_through_and_drivers_are_configurable(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      '[nvidia_gpu]\npassthrough_drivers = nvidia\n')
    tree.unbind(hosts.PGPU)
    assert [d.address for d in driver_for(tree, conf).discover()] == [
        hosts.PGPU, hosts.VGPU_PARENT]


def test_model_falls_back_to_nvidia_smi_then_to_the_device_id(make):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    tree.remove('proc/driver/nvidia/gpus/%s' % hosts.PGPU)
    driver = driver_for(tree, conf)
    (device,) = driver.discover()
    assert device.model == 'Tesla T4'
    assert device.vendor_board_info == {}
    tree.remove('usr/bin/nvidia-smi')
    (device,) = driver.discover()
    assert device.model == '0x1eb8'


def test_virtual_functions_are_never_gpus_of_their_own(make):
    tree, conf = make(hosts.nvidia_vgpu17_host,
                      '[nvidia_gpu]\npassthrough_drivers = nvidia\n')
    assert summary(driver_for(tree, conf).discover()) == [
        (hosts.VGPU17_PF, 'NVIDIA H200', 'passthrough', [
            ('0000_41_00_0', 1, 'PGPU', ['CUSTOM_GPU_NVIDIA',
                                         'CUSTOM_NVIDIA_2335',
                                         'OWNER_CYBORG'], 1)])]


# Discovery: mdev on the GPU -----------------------------------------------

def test_mdev_type_on_a_listed_gpu(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.bind(hosts.PGPU, 'vfio-pci')
    devices = driver_for(tree, conf).discover()
    assert summary(devices) == [
        (hosts.PGPU, 'Tesla T4', 'passthrough',
         [('0000_3b_00_0', 1, 'PGPU', T4_TRAITS, 1)]),
        (hosts.VGPU_PARENT, 'Tesla T4', 'mdev', [
            gpu_parent(hosts.VGPU_PARENT, T4_TRAITS),
            ('0000_d8_00_0_nvidia-222', 16, 'VGPU', sorted(T4_TRAITS + [
                'CUSTOM_NVIDIA_1EB8_T4_1B', 'CUSTOM_VGPU_NVIDIA_222']),
             16)])]
    infos = handle_infos(devices[1])
    assert infos[0] == {'domain': '0000', 'bus': 'd8', 'device': '00',
                        'function': '0', 'asked_type': 'nvidia-222',
                        'vgpu_mark': 'nvidia-222_0'}
    assert len({i['vgpu_mark'] for i in infos}) == 16
    assert offered(devices[1]).attributes == {
        'vgpu_type': 'nvidia-222', 'vgpu_mode': 'mdev'}
    assert {h.attach_type for h in offered(devices[1]).attach_handles
            } == {'MDEV'}
    assert offered(devices[1]).preparation == 'mdev'
    assert offered(devices[0]).preparation == 'none'
    # The GPU running vGPUs: a provider with no inventory, nothing to
    # prepare, the type's provider under it.
    (gpu,) = devices[1].deployables
    assert (gpu.name, gpu.num_accelerators, gpu.resource_class,
            gpu.preparation, gpu.attach_handles) == (
                '0000_d8_00_0', 0, 'PGPU', 'none', [])
    assert [c.name for c in gpu.children] == ['0000_d8_00_0_nvidia-222']


def test_a_type_without_addresses_applies_to_every_gpu_offering_it(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = nvidia-223\n'
                      '[vgpu_nvidia-223]\nresource_class = CUSTOM_T4_2B\n')
    tree.bind(hosts.PGPU, 'vfio-pci')
    assert summary(driver_for(tree, conf).discover()) == [
        (hosts.PGPU, 'Tesla T4', 'passthrough',
         [('0000_3b_00_0', 1, 'PGPU', T4_TRAITS, 1)]),
        (hosts.VGPU_PARENT, 'Tesla T4', 'mdev', [
            gpu_parent(hosts.VGPU_PARENT, T4_TRAITS),
            ('0000_d8_00_0_nvidia-223', 8, 'CUSTOM_T4_2B', sorted(
                T4_TRAITS + ['CUSTOM_NVIDIA_1EB8_T4_2B',
                             'CUSTOM_VGPU_NVIDIA_223']), 8)])]


def test_existing_mdevs_count_in_the_capacity(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.create_mdev(hosts.VGPU_PARENT, 'nvidia-222', UUID1)
    (device,) = driver_for(tree, conf).discover()
    assert offered(device).num_accelerators == 16


def test_a_type_with_no_capacity_left_has_no_deployable(make):
    # Time-sliced GPUs are homogeneous: another type in use leaves none.
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.create_mdev(hosts.VGPU_PARENT, 'nvidia-230', UUID1)
    (device,) = driver_for(tree, conf).discover()
    # The GPU stays, with no type child (no inventory of 0).
    (gpu,) = device.deployables
    assert (gpu.num_accelerators, gpu.children) == (0, [])


def test_max_instances_caps_the_capacity(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      MDEV_222 + 'max_instances = 4\n')
    (device,) = driver_for(tree, conf).discover()
    assert offered(device).num_accelerators == 4
    assert len(offered(device).attach_handles) == 4


def test_discovery_is_deterministic(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.bind(hosts.PGPU, 'vfio-pci')
    first = device_tree.tree_to_wire(driver_for(tree, conf).discover())
    driver = driver_for(tree, conf)
    assert device_tree.tree_to_wire(driver.discover()) == first
    assert device_tree.tree_to_wire(driver.discover()) == first
    assert device_tree.tree_digest(first) == device_tree.tree_digest(
        device_tree.tree_to_wire(driver.discover()))


# Discovery: mdev on the VFs (Ampere) --------------------------------------

def test_mdev_types_on_virtual_functions(make):
    tree, conf = make(hosts.nvidia_ampere_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = nvidia-568\n')
    (device,) = driver_for(tree, conf).discover()
    assert summary([device]) == [
        (hosts.AMPERE_PF, 'NVIDIA A40', 'mdev-vf', [
            gpu_parent(hosts.AMPERE_PF, [
                'CUSTOM_GPU_NVIDIA', 'CUSTOM_NVIDIA_2235', 'OWNER_CYBORG']),
            ('0000_25_00_0_nvidia-568', 2, 'VGPU', [
                'CUSTOM_GPU_NVIDIA', 'CUSTOM_NVIDIA_2235',
                'CUSTOM_NVIDIA_2235_A40_24Q', 'CUSTOM_VGPU_NVIDIA_568',
                'OWNER_CYBORG'], 4)])]
    # One handle per VF (the parent is the VF); max_instance=2 caps.
    assert [(i['function'], i['vgpu_mark']) for i in handle_infos(device)
            ] == [('4', 'nvidia-568_0'), ('5', 'nvidia-568_1'),
                  ('6', 'nvidia-568_2'), ('7', 'nvidia-568_3')]


def test_a_vf_running_another_type_is_no_handle(make):
    tree, conf = make(hosts.nvidia_ampere_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = nvidia-566\n')
    tree.create_mdev(hosts.AMPERE_VFS[0], 'nvidia-568', UUID1)
    (device,) = driver_for(tree, conf).discover()
    assert [i['function'] for i in handle_infos(device)] == ['5', '6', '7']
    assert offered(device).num_accelerators == 3


# Discovery: vGPU 17+ ------------------------------------------------------

@pytest.mark.parametrize('type_name', ['H200X-1-18C', '1414',
                                       'NVIDIA H200X-1-18C'])
def test_vgpu17_type_by_name_or_id(make, type_name):
    tree, conf = make(hosts.nvidia_vgpu17_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = %s\n'
                      '[vgpu_%s]\nmax_instances = 7\n' % (type_name,
                                                          type_name))
    (device,) = driver_for(tree, conf).discover()
    deployable = offered(device)
    assert device.deployables[0].children == [deployable]
    assert deployable.num_accelerators == 7
    assert deployable.resource_class == 'VGPU'
    assert deployable.name == '0000_41_00_0_' + type_name.replace(' ', '_')
    assert 'CUSTOM_NVIDIA_2335_H200X_1_18C' in deployable.traits
    assert 'CUSTOM_VGPU_NVIDIA_1414' in deployable.traits
    # Every VF, in VF index order (virtfn10 after virtfn9), as PCI.
    vfs = [h.attach_info for h in deployable.attach_handles]
    assert ['0000:%(bus)s:%(device)s.%(function)s' % i for i in vfs] == (
        hosts.vgpu17_vfs())
    assert {h.attach_type for h in deployable.attach_handles} == {'PCI'}
    assert {i['vgpu_type'] for i in vfs} == {'1414'}
    assert device.std_board_info['mode'] == 'sriov-vgpu'
    # The bind flow has the agent write the type to the VF it claims.
    assert deployable.preparation == 'vgpu_type'


def test_vgpu17_handles_follow_what_each_vf_can_take(make):
    tree, conf = make(hosts.nvidia_vgpu17_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = H200X-141C\n')
    vfs = hosts.vgpu17_vfs()
    tree.set_vgpu_type(vfs[0], 1414)  # another type on VF 0
    tree.set_vgpu_type(vfs[1], 1428)  # this type on VF 1
    (device,) = driver_for(tree, conf).discover()
    addresses = ['0000:%(bus)s:%(device)s.%(function)s' % i
                 for i in handle_infos(device)]
    assert addresses == vfs[1:]


# Configuration ------------------------------------------------------------

@pytest.mark.parametrize('ini, message', [
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-999\n'
     '[vgpu_nvidia-999]\ndevice_addresses = 0000:d8:00.0\n',
     'GPU 0000:d8:00.0 does not offer vGPU type nvidia-999'),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222,nvidia-223\n'
     '[vgpu_nvidia-222]\ndevice_addresses = 0000:d8:00.0\n'
     '[vgpu_nvidia-223]\ndevice_addresses = 0000:D8:00.0\n',
     'GPU 0000:d8:00.0 is listed for vGPU types nvidia-222 and '
     'nvidia-223'),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n'
     '[vgpu_nvidia-222]\ndevice_addresses = 0000:d7:00.0\n',
     '0000:d7:00.0 (in [vgpu_nvidia-222] device_addresses) is not an '
     'NVIDIA GPU of this host'),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n'
     '[vgpu_nvidia-222]\ndevice_addresses = 0000:99:00.0\n',
     '0000:99:00.0 (in [vgpu_nvidia-222] device_addresses) is not an '
     'NVIDIA GPU'),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n'
     '[vgpu_nvidia-222]\ndevice_addresses = d8:00\n',
     "'d8:00' is not a PCI address"),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222,nvidia-223\n',
     'vGPU types nvidia-222, nvidia-223 have no device_addresses'),
    ('[nvidia_gpu]\nenabled_vgpu_types = nvidia-222,nvidia-222\n',
     'names a type twice'),
])
def test_configuration_that_cannot_match_the_host(make, ini, message):
    tree, conf = make(hosts.nvidia_gpu_host, ini)
    with pytest.raises(vgpu_config.NvidiaGpuConfigError) as error:
        driver_for(tree, conf)
    assert message in str(error.value)
    assert isinstance(error.value, exception.ConfigInvalid)


def test_a_virtual_function_is_no_gpu_to_list(make):
    vf = hosts.vgpu17_vfs()[0]
    tree, conf = make(hosts.nvidia_vgpu17_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = 1414\n'
                      '[vgpu_1414]\ndevice_addresses = %s\n' % vf)
    with pytest.raises(vgpu_config.NvidiaGpuConfigError,
                       match='is not an NVIDIA GPU'):
        driver_for(tree, conf)


def test_a_bad_resource_class_is_refused(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      MDEV_222 + 'resource_class = PGPU\n')
    with pytest.raises(cfg.ConfigFileValueError):
        driver_for(tree, conf)


def test_the_agent_reports_a_bad_configuration_at_start(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = nvidia-999\n'
                      '[vgpu_nvidia-999]\ndevice_addresses = %s\n'
                      % hosts.VGPU_PARENT)
    with pytest.raises(exception.ConfigInvalid) as error:
        discovery.load_drivers(conf)
    assert 'nvidia_gpu_driver cannot be loaded' in str(error.value)
    assert 'does not offer vGPU type nvidia-999' in str(error.value)


def test_the_agent_loads_the_driver(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    (driver,) = discovery.load_drivers(conf)
    assert isinstance(driver, nvidia.NvidiaGpuDriver)
    assert driver.name == 'nvidia_gpu_driver'


def test_a_type_gone_at_run_time_fails_the_discovery(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver = driver_for(tree, conf)
    tree.remove(tree.dev(hosts.VGPU_PARENT, 'mdev_supported_types',
                         'nvidia-222'))
    with pytest.raises(vgpu_config.NvidiaGpuConfigError):
        driver.discover()


def test_a_listed_gpu_gone_at_run_time_is_skipped(make, caplog):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver = driver_for(tree, conf)
    tree.remove_pci(hosts.VGPU_PARENT)
    with caplog.at_level(logging.WARNING):
        assert driver.discover() == []
    assert 'is gone' in caplog.text


# Preparation --------------------------------------------------------------

MDEV = device_tree.Preparation.MDEV
VGPU_TYPE = device_tree.Preparation.VGPU_TYPE
VFIO = device_tree.Preparation.VFIO


def _mdev_handle(tree, conf, index=0):
    driver = driver_for(tree, conf)
    (device,) = driver.discover()
    return driver, offered(device).attach_handles[index]


def _available(tree, parent, type_id):
    return int(tree.read(tree.dev(parent, 'mdev_supported_types', type_id,
                                  'available_instances')))


def test_prepare_creates_the_mdev_and_release_removes_it(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver, handle = _mdev_handle(tree, conf)
    host = driver._host
    driver.prepare_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.VGPU_PARENT) == [UUID1]
    assert [m.type_id for m in mdev.list_mdevs(host, hosts.VGPU_PARENT)
            ] == ['nvidia-222']
    assert _available(tree, hosts.VGPU_PARENT, 'nvidia-222') == 15
    driver.prepare_attach_handle(handle, UUID1, MDEV)  # idempotent
    tree.settle()
    assert tree.refused == []
    assert tree.mdevs_of(hosts.VGPU_PARENT) == [UUID1]
    driver.release_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.VGPU_PARENT) == []
    assert _available(tree, hosts.VGPU_PARENT, 'nvidia-222') == 16
    driver.release_attach_handle(handle, UUID1, MDEV)  # idempotent
    tree.settle()
    assert tree.refused == []


def test_prepare_refuses_an_mdev_of_another_type(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver, handle = _mdev_handle(tree, conf)
    tree.create_mdev(hosts.VGPU_PARENT, 'nvidia-223', UUID1)
    with pytest.raises(errors.PrepareFailed, match='not as type nvidia-222'):
        driver.prepare_attach_handle(handle, UUID1, MDEV)


def test_prepare_fails_when_no_instance_is_left(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver, handle = _mdev_handle(tree, conf)
    tree.create_mdev(hosts.VGPU_PARENT, 'nvidia-223', UUID1)
    with pytest.raises(errors.PrepareFailed, match='no available instance'):
        driver.prepare_attach_handle(handle, UUID2, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.VGPU_PARENT) == [UUID1]


def test_prepare_of_a_gpu_that_is_gone(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver, handle = _mdev_handle(tree, conf)
    tree.remove_pci(hosts.VGPU_PARENT)
    with pytest.raises(errors.PrepareFailed,
                       match='cannot create mdev %s of type nvidia-222 on '
                       '%s' % (UUID1, hosts.VGPU_PARENT)):
        driver.prepare_attach_handle(handle, UUID1, MDEV)
    # Its mdevs went with it: the release has nothing left to undo.
    driver.release_attach_handle(handle, UUID1, MDEV)
    assert tree.refused == []


def test_prepare_on_a_virtual_function(make):
    tree, conf = make(hosts.nvidia_ampere_host,
                      '[nvidia_gpu]\nenabled_vgpu_types = nvidia-568\n')
    driver, handle = _mdev_handle(tree, conf, index=2)
    driver.prepare_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.AMPERE_VFS[2]) == [UUID1]
    driver.release_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.AMPERE_VFS[2]) == []


def _vgpu17(tree, conf, index=0):
    driver = driver_for(tree, conf)
    (device,) = driver.discover()
    return driver, offered(device).attach_handles[index]


def _current(tree, vf):
    return int(tree.read(tree.dev(vf, 'nvidia', 'current_vgpu_type')))


VGPU17 = '[nvidia_gpu]\nenabled_vgpu_types = H200X-1-18C\n'


def test_prepare_sets_the_vgpu_type_and_release_resets_it(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    vf = hosts.vgpu17_vfs()[3]
    driver, handle = _vgpu17(tree, conf, index=3)
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    tree.settle()
    assert _current(tree, vf) == 1414
    assert tree.read(tree.dev(vf, 'vfio-dev', 'vfio0', 'dev'))
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)  # idempotent
    tree.settle()
    assert tree.refused == []
    # The VF in use stays a handle of its type.
    (device,) = driver.discover()
    assert handle.attach_info in handle_infos(device)
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)
    tree.settle()
    assert _current(tree, vf) == 0
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)  # idempotent
    tree.settle()
    assert tree.refused == []


def test_prepare_refuses_a_vf_running_another_type(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    driver, handle = _vgpu17(tree, conf)
    tree.set_vgpu_type(hosts.vgpu17_vfs()[0], 1428)
    with pytest.raises(errors.PrepareFailed, match='runs vGPU type 1428'):
        driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    with pytest.raises(errors.PrepareFailed, match='left as it is'):
        driver.release_attach_handle(handle, UUID1, VGPU_TYPE)
    assert _current(tree, hosts.vgpu17_vfs()[0]) == 1428


def test_prepare_fails_when_the_vf_has_no_type_files(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    driver, handle = _vgpu17(tree, conf)
    tree.remove(tree.dev(hosts.vgpu17_vfs()[0], 'nvidia'))
    with pytest.raises(errors.PrepareFailed, match='cannot set vGPU type'):
        driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)


def test_prepare_of_a_vf_that_is_gone(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    driver, handle = _vgpu17(tree, conf, index=1)
    tree.remove_pci(hosts.vgpu17_vfs()[1])
    with pytest.raises(errors.PrepareFailed,
                       match='cannot set vGPU type 1414 on %s'
                       % hosts.vgpu17_vfs()[1]):
        driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    # Its vGPU went with it: the release has nothing left to undo.
    driver.release_attach_handle(handle, UUID1, VGPU_TYPE)
    assert tree.refused == []


def test_a_passthrough_handle_needs_no_preparation(make):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    driver = driver_for(tree, conf)
    (device,) = driver.discover()
    handle = offered(device).attach_handles[0]
    before = tree.read(tree.dev(hosts.PGPU, 'driver_override'))
    driver.prepare_attach_handle(handle, UUID1, VFIO)
    driver.release_attach_handle(handle, UUID1, VFIO)
    assert tree.read(tree.dev(hosts.PGPU, 'driver_override')) == before


def test_a_handle_without_an_address_is_refused(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver = driver_for(tree, conf)
    handle = device_tree.AttachHandle('MDEV', {'asked_type': 'nvidia-222'})
    with pytest.raises(errors.PrepareFailed, match='no PCI address'):
        driver.prepare_attach_handle(handle, UUID1, MDEV)


# Restore after a reboot ---------------------------------------------------

def test_an_mdev_the_host_lost_is_not_prepared_and_is_restored(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver, handle = _mdev_handle(tree, conf)
    assert driver.is_prepared(handle, UUID1, MDEV) is False
    driver.prepare_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert driver.is_prepared(handle, UUID1, MDEV) is True
    tree.remove_mdev(UUID1)  # the reboot
    assert driver.is_prepared(handle, UUID1, MDEV) is False
    driver.restore_attach_handle(handle, UUID1, MDEV)
    tree.settle()
    assert tree.mdevs_of(hosts.VGPU_PARENT) == [UUID1]
    assert driver.is_prepared(handle, UUID1, MDEV) is True
    assert tree.refused == []


def test_a_vgpu_type_the_vf_lost_is_not_prepared_and_is_restored(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    vf = hosts.vgpu17_vfs()[3]
    driver, handle = _vgpu17(tree, conf, index=3)
    assert driver.is_prepared(handle, UUID1, VGPU_TYPE) is False
    driver.prepare_attach_handle(handle, UUID1, VGPU_TYPE)
    tree.settle()
    assert driver.is_prepared(handle, UUID1, VGPU_TYPE) is True
    tree.set_vgpu_type(vf, 0)  # the reboot
    assert driver.is_prepared(handle, UUID1, VGPU_TYPE) is False
    driver.restore_attach_handle(handle, UUID1, VGPU_TYPE)
    tree.settle()
    assert _current(tree, vf) == 1414


def test_a_vf_that_is_gone_cannot_be_restored(make):
    tree, conf = make(hosts.nvidia_vgpu17_host, VGPU17)
    driver, handle = _vgpu17(tree, conf, index=1)
    tree.remove_pci(hosts.vgpu17_vfs()[1])
    assert driver.is_prepared(handle, UUID1, VGPU_TYPE) is False
    with pytest.raises(errors.PrepareFailed,
                       match='cannot set vGPU type 1414 on %s'
                       % hosts.vgpu17_vfs()[1]):
        driver.restore_attach_handle(handle, UUID1, VGPU_TYPE)


def test_a_passthrough_gpu_on_vfio_pci_is_prepared(make):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    driver = driver_for(tree, conf)
    (device,) = driver.discover()
    handle = offered(device).attach_handles[0]
    assert driver.is_prepared(handle, UUID1, VFIO) is True


# Health -------------------------------------------------------------------

def _t4_gpus(**changes):
    """The T4 of the vGPU parent as nvidia-smi shows it, changed."""
    return [tools.Gpu(1, hosts.VGPU_PARENT,
                      'GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e1',
                      'Tesla T4', **changes)]


def _health(tree, conf):
    driver = driver_for(tree, conf)
    devices = driver.discover()
    return driver, driver.health(devices)


def test_healthy_and_read_only(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_dmesg(tree.tools_dir, ['[    1.0] pci 0000:d8:00.0: ok'])
    _driver, health = _health(tree, conf)
    assert health == {hosts.VGPU_PARENT: 'healthy'}
    calls = tools.calls(tree.tools_dir)
    smi = [c[1:] for c in calls if c[0] == 'nvidia-smi']
    assert smi and all(len(c) == 2 and c[0].startswith('--query-gpu=')
                       and c[1] == '--format=csv,noheader,nounits'
                       for c in smi)
    assert ['dmesg'] in calls


@pytest.mark.parametrize('changes, reason', [
    ({'ecc_uncorrected': '2'}, 'uncorrected ECC errors'),
    ({'retired_pending': 'Yes'}, 'retired pages pending'),
    ({'remapped_pending': 'Yes'}, 'row remapping pending'),
    ({'remapped_failure': 'Yes'}, 'row remapping failed'),
    ({'throttle_reasons': '0x0000000000000008'}, 'hardware slowdown'),
    ({'throttle_reasons': '0x0000000000000040'}, 'hardware slowdown'),
])
def test_nvidia_smi_signals(make, caplog, changes, reason):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_nvidia_smi(tree.tools_dir, _t4_gpus(**changes))
    with caplog.at_level(logging.WARNING):
        _driver, health = _health(tree, conf)
    assert health == {hosts.VGPU_PARENT: 'unhealthy'}
    assert reason in caplog.text


@pytest.mark.parametrize('changes', [
    {'throttle_reasons': '0x0000000000000004'},  # SW power cap
    {'ecc_uncorrected': '[N/A]', 'retired_pending': '[N/A]',
     'remapped_pending': '[N/A]', 'remapped_failure': '[N/A]',
     'throttle_reasons': '[Not Supported]'},
])
def test_normal_values_are_healthy(make, changes):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_nvidia_smi(tree.tools_dir, _t4_gpus(**changes))
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: 'healthy'}


def test_an_unknown_field_loses_only_its_own_signal(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_tool(tree.tools_dir, 'nvidia-smi', tools.health_replies(
        _t4_gpus(ecc_uncorrected='1'),
        invalid=('remapped_rows.failure', 'retired_pages.pending')))
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: 'unhealthy'}


@pytest.mark.parametrize('xid, health', [(79, 'unhealthy'),
                                         (48, 'unhealthy'),
                                         (13, 'healthy'),
                                         (43, 'healthy')])
def test_xids_in_the_kernel_log(make, xid, health):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_dmesg(tree.tools_dir, [
        tools.xid_line(hosts.VGPU_PARENT, xid),
        tools.xid_line(hosts.PGPU, 79)])  # another GPU's
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: health}


def test_xids_are_not_read_when_disabled(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      MDEV_222 + '[nvidia_gpu]\nxid_health = false\n')
    tools.write_dmesg(tree.tools_dir, [tools.xid_line(hosts.VGPU_PARENT,
                                                      79)])
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: 'healthy'}
    assert ['dmesg'] not in tools.calls(tree.tools_dir)


def test_an_unreadable_kernel_log_is_no_signal(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_dmesg(tree.tools_dir, [], rc=1)
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: 'healthy'}


def test_without_nvidia_smi_health_comes_from_sysfs(make, caplog):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.remove('usr/bin/nvidia-smi')
    driver = driver_for(tree, conf)
    devices = driver.discover()
    with caplog.at_level(logging.WARNING):
        assert driver.health(devices) == {hosts.VGPU_PARENT: 'healthy'}
        assert driver.health(devices) == {hosts.VGPU_PARENT: 'healthy'}
    assert caplog.text.count('nvidia-smi cannot be used') == 1
    tree.unbind(hosts.VGPU_PARENT)
    assert driver.health(devices) == {hosts.VGPU_PARENT: 'unhealthy'}


def test_a_hanging_nvidia_smi_is_killed_and_ignored(make):
    tree, conf = make(hosts.nvidia_gpu_host,
                      MDEV_222 + '[nvidia_gpu]\nnvidia_smi_timeout = 1\n')
    tools.write_tool(tree.tools_dir, 'nvidia-smi',
                     {None: tools.Reply(sleep=30)})
    driver = driver_for(tree, conf)
    devices = driver.discover()  # the model comes from /proc
    start = time.monotonic()
    assert driver.health(devices) == {hosts.VGPU_PARENT: 'healthy'}
    assert time.monotonic() - start < 15


@pytest.mark.parametrize('reply', [
    tools.Reply(stderr='NVIDIA-SMI has failed because it could not '
                'communicate with the NVIDIA driver.\n', rc=9),
    tools.Reply(stdout='garbage, without, the, right, columns\n'),
])
def test_a_failing_nvidia_smi_is_no_signal(make, reply):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_tool(tree.tools_dir, 'nvidia-smi', {None: reply})
    assert _health(tree, conf)[1] == {hosts.VGPU_PARENT: 'healthy'}


def test_sysfs_signals(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tree.bind(hosts.PGPU, 'vfio-pci')
    driver = driver_for(tree, conf)
    devices = driver.discover()
    assert set(driver.health(devices).values()) == {'healthy'}
    tree.bind(hosts.PGPU, 'nvidia')          # taken back by the host
    tree.bind(hosts.VGPU_PARENT, 'vfio-pci')  # vGPU manager gone
    assert driver.health(devices) == {hosts.PGPU: 'unhealthy',
                                      hosts.VGPU_PARENT: 'unhealthy'}
    tree.remove_pci(hosts.PGPU)
    assert driver.health(devices)[hosts.PGPU] == 'unhealthy'


def test_health_changes_are_logged_once(make, caplog):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    driver = driver_for(tree, conf)
    devices = driver.discover()
    tools.write_nvidia_smi(tree.tools_dir, _t4_gpus(ecc_uncorrected='3'))
    with caplog.at_level(logging.INFO):
        driver.health(devices)
        driver.health(devices)
        tools.write_nvidia_smi(tree.tools_dir, _t4_gpus())
        assert driver.health(devices) == {hosts.VGPU_PARENT: 'healthy'}
    assert caplog.text.count('is unhealthy') == 1
    assert caplog.text.count('is healthy again') == 1


def test_the_agent_applies_the_health(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_nvidia_smi(tree.tools_dir, _t4_gpus(ecc_uncorrected='1'))
    finder = discovery.Discovery('h1', 'h1', [driver_for(tree, conf)],
                                 conductor_api=None)
    wire, failed = finder.collect()
    assert failed == []
    assert [(d['address'], d['health'], d['driver']) for d in wire] == [
        (hosts.VGPU_PARENT, 'unhealthy', 'nvidia_gpu_driver')]


def test_a_gpu_in_no_iommu_group_is_not_passed_through(make, caplog):
    """As a real H200 in a virtual machine without a virtual IOMMU
    showed: no iommu_group link, so vfio-pci cannot take it."""
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    tree.remove(tree.dev(hosts.PGPU, 'iommu_group'))
    driver = driver_for(tree, conf)
    with caplog.at_level(logging.WARNING):
        assert hosts.PGPU not in [d.address for d in driver.discover()]
        driver.discover()
    warned = [r.getMessage() for r in caplog.records
              if 'has no iommu_group' in r.getMessage()]
    # Once, though discovery runs every period.
    assert warned == [
        'nvidia_gpu_driver: device %s has no iommu_group, so it cannot be '
        'passed through (turn the iommu on: its firmware setting, and '
        'intel_iommu=on or amd_iommu=on on the kernel command line); it is '
        'not reported' % hosts.PGPU]


def test_a_gpu_whose_iommu_group_the_host_holds_is_not_passed_through(
        make, caplog):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    group = tree.iommu_group(hosts.PGPU)
    audio = '0000:3b:00.1'
    tree.add_pci(audio, hosts.NVIDIA, 0x10f8, 0x040300,
                 driver='snd_hda_intel', iommu_group=group)
    driver = driver_for(tree, conf)
    with caplog.at_level(logging.WARNING):
        assert driver.discover() == []
    assert 'shares its iommu_group with 0000:3b:00.1 (snd_hda_intel)' in (
        caplog.text)
    tree.bind(audio, 'vfio-pci')
    assert [d.address for d in driver.discover()] == [hosts.PGPU]


def test_no_tool_runs_for_gpus_the_nvidia_driver_does_not_hold(make):
    tree, conf = make(hosts.nvidia_gpu_host)
    tree.bind(hosts.PGPU, 'vfio-pci')
    tools.write_dmesg(tree.tools_dir, [tools.xid_line(hosts.PGPU, 79)])
    tools.write_nvidia_smi(tree.tools_dir, [tools.Gpu(
        0, hosts.PGPU, 'GPU-0', 'Tesla T4', ecc_uncorrected='5')])
    assert _health(tree, conf)[1] == {hosts.PGPU: 'healthy'}
    assert tools.calls(tree.tools_dir) == []


def test_xid_lines_are_read_by_slot():
    from cyborg.accelerator.drivers.nvidia_gpu import health as gpu_health
    log = '\n'.join([
        '[  10.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen '
        'off the bus.',
        '[  11.0] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception',
        '[  12.0] NVRM: Xid (PCI:10000:d8:00): 48, An uncorrectable '
        'double bit error',
        '[  13.0] NVRM: GPU at PCI:0000:3b:00: GPU-3a1f9e02',
        '[  14.0] pci 0000:3b:00.0: [10de:1eb8] type 00 class 0x030200'])
    assert gpu_health.parse_xids(log) == {(0, 0x3b, 0): {13, 79},
                                          (0x10000, 0xd8, 0): {48}}


@pytest.mark.parametrize('builder, ini', [
    (hosts.nvidia_gpu_host, MDEV_222 + '[nvidia_gpu]\n'
     'passthrough_drivers = nvidia\n'),
    (hosts.nvidia_ampere_host, '[nvidia_gpu]\nenabled_vgpu_types = '
     'nvidia-566\n[vgpu_nvidia-566]\nresource_class = CUSTOM_A40_12Q\n'),
    (hosts.nvidia_vgpu17_host, '[nvidia_gpu]\nenabled_vgpu_types = '
     'NVIDIA H200X-141C\n'),
])
def test_placement_accepts_every_name(make, builder, ini):
    tree, conf = make(builder, ini)
    deployables = [dep for device in driver_for(tree, conf).discover()
                   for top in device.deployables
                   for dep in [top, *top.children]]
    assert deployables
    for dep in deployables:
        assert resource_names.is_valid_resource_class(dep.resource_class)
        assert all(resource_names.is_valid_trait(t) for t in dep.traits)
        if dep.children:  # a GPU running vGPUs: no inventory of its own
            assert (dep.num_accelerators, dep.attach_handles) == (0, [])
        else:
            assert 0 < dep.num_accelerators <= len(dep.attach_handles)


# Utilization --------------------------------------------------------------

UTILIZATION_QUERY = ['nvidia-smi', '--query-gpu=pci.bus_id,utilization.gpu,'
                     'memory.used,memory.total',
                     '--format=csv,noheader,nounits']


def _utilization(tree, conf):
    driver = driver_for(tree, conf)
    return driver.utilization(driver.discover())


def test_utilization_from_nvidia_smi(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    assert _utilization(tree, conf) == {hosts.VGPU_PARENT: {
        'gpu_percent': 37.0, 'memory_used_mib': 1024,
        'memory_total_mib': 15360}}
    assert UTILIZATION_QUERY in tools.calls(tree.tools_dir)


def test_unsupported_utilization_values_are_left_out(make):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    tools.write_nvidia_smi(tree.tools_dir, _t4_gpus(
        utilization_gpu='[N/A]', memory_used='[Not Supported]'))
    assert _utilization(tree, conf) == {hosts.VGPU_PARENT: {
        'memory_total_mib': 15360}}


@pytest.mark.parametrize('reply', [
    tools.Reply(stdout='Field "utilization.gpu" is not a valid field to '
                'query.\n\n', rc=2),
    tools.Reply(stdout='garbage\n'),
    None,  # no nvidia-smi at all
])
def test_no_utilization_when_nvidia_smi_cannot_tell(make, reply):
    tree, conf = make(hosts.nvidia_gpu_host, MDEV_222)
    if reply is None:
        tree.remove('usr/bin/nvidia-smi')
    else:
        tools.write_tool(tree.tools_dir, 'nvidia-smi', {
            **tools.health_replies(_t4_gpus()),
            tuple(UTILIZATION_QUERY[1:]): reply})
    assert _utilization(tree, conf) == {}


def test_passthrough_gpus_are_not_measured(make):
    """A GPU on vfio-pci is the guest's: the host's nvidia-smi does not
    see it, so it is not even asked."""
    tree, conf = make(hosts.nvidia_gpu_host,
                      '[nvidia_gpu]\npassthrough_drivers = vfio-pci\n')
    tree.bind(hosts.PGPU, 'vfio-pci')
    tree.bind(hosts.VGPU_PARENT, 'vfio-pci')
    driver = driver_for(tree, conf)
    devices = driver.discover()
    assert devices
    assert driver.utilization(devices) == {}
    assert UTILIZATION_QUERY not in tools.calls(tree.tools_dir)
