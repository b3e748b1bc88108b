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

"""nvidia_gpu_driver and GPUs the host's nvidia driver holds: offered for
passthrough, moved to vfio-pci at bind only when no host process has the
GPU open, given back to nvidia at release.

The fixture host's kernel is emulated by a thread (``DemoKernel``) that
applies the driver's sysfs writes as the kernel would; processes that
hold device files are ``proc/<pid>/fd`` links of the tree.
"""

from __future__ import annotations

import logging
import os

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf
from cyborg.accelerator.drivers.nvidia_gpu import procfs
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import demo_host
from cyborg.allinone import fake_tools as tools
from cyborg.conf import agent as agent_conf
from cyborg.conf import default as default_conf
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts

VFIO = device_tree.Preparation.VFIO
UUID = '83b8f4f2-509f-382f-3c1e-e6bfe0fa1001'
PGPU_MINOR = 0  # hosts.nvidia_gpu_host: Device Minor of hosts.PGPU


@pytest.fixture
def host(tmp_path):
    """``host(ini)`` -> (tree, driver, state dir): the NVIDIA fixture host,
    both GPUs on nvidia, vfio-pci loaded, and its emulated kernel
    running."""
    kernels = []

    def _host(ini: str = ''):
        root = str(tmp_path / 'host')
        tree = hosts.nvidia_gpu_host(root)
        state = tmp_path / 'state'
        path = tmp_path / 'cyborg.conf'
        path.write_text('[DEFAULT]\nstate_path = %s\n[agent]\nhost_root = %s\n'
                        '[nvidia_gpu]\nrebind_timeout = 2\n%s'
                        % (state, root, ini))
        conf = cfg.ConfigOpts()
        for module in (default_conf, agent_conf, nvidia_conf):
            module.register_opts(conf)
        conf(['--config-file', str(path)], project='cyborg',
             default_config_files=[])
        kernels.append(demo_host.DemoKernel(tree, interval=0.01).start())
        driver = nvidia.NvidiaGpuDriver(
            conf, runner.CommandRunner(search_path=[tree.tools_dir]))
        return tree, driver, str(state / 'nvidia_gpu' / 'rebound')

    yield _host
    for kernel in kernels:
        kernel.stop()


def _pgpu(driver) -> tuple[device_tree.Deployable, device_tree.AttachHandle]:
    """The passthrough GPU's deployable and its handle."""
    (deployable,) = next(d for d in driver.discover()
                         if d.address == hosts.PGPU).deployables
    return deployable, deployable.attach_handles[0]


def _driver_of(tree, address: str) -> str | None:
    link = tree.abs(tree.dev(address, 'driver'))
    return os.path.basename(os.readlink(link)) if os.path.islink(
        link) else None


# Discovery ------------------------------------------------------------------

def test_gpus_on_nvidia_are_offered_with_the_vfio_preparation(host):
    tree, driver, _state = host()
    devices = driver.discover()
    assert [d.address for d in devices] == [hosts.PGPU, hosts.VGPU_PARENT]
    for device in devices:
        (deployable,) = device.deployables
        assert (deployable.resource_class, deployable.num_accelerators,
                deployable.preparation) == ('PGPU', 1, 'vfio')
        assert [h.attach_info for h in deployable.attach_handles] == [
            dict(domain='0000', bus=device.address[5:7], device='00',
                 function='0')]
    assert set(driver.health(devices).values()) == {'healthy'}


def test_without_rebind_gpus_on_nvidia_are_not_offered(host, caplog):
    tree, driver, _state = host('rebind_nvidia_gpus = false\n')
    with caplog.at_level(logging.WARNING):
        assert driver.discover() == []
    assert ('device 0000:3b:00.0 is bound to nvidia and has no vGPU type, '
            'and [nvidia_gpu] rebind_nvidia_gpus is false; it is not '
            'reported' in caplog.text)


def test_nvidia_as_a_passthrough_driver_leaves_the_gpu_to_libvirt(host):
    tree, driver, _state = host('passthrough_drivers = vfio-pci, nvidia\n')
    deployable, handle = _pgpu(driver)
    assert deployable.preparation == 'none'
    driver.prepare_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'


def test_a_gpu_already_on_vfio_pci_needs_no_preparation(host):
    tree, driver, state = host()
    tree.bind(hosts.PGPU, 'vfio-pci')
    deployable, handle = _pgpu(driver)
    assert deployable.preparation == 'none'
    # Prepared anyway (a deployable reported before): nothing moves, and
    # release does not hand the operator's GPU to nvidia.
    driver.prepare_attach_handle(handle, UUID, VFIO)
    driver.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'vfio-pci'
    assert not os.path.exists(state)


# Bind and release ---------------------------------------------------------

def test_bind_moves_the_gpu_to_vfio_pci_and_release_gives_it_back(host,
                                                                  caplog):
    tree, driver, state = host()
    _deployable, handle = _pgpu(driver)
    group = tree.iommu_group(hosts.PGPU)
    with caplog.at_level(logging.INFO):
        driver.prepare_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'vfio-pci'
    assert tree.override(hosts.PGPU) == 'vfio-pci'
    assert os.path.exists(tree.abs('dev/vfio/%d' % group))
    assert tree.read(tree.dev(hosts.PGPU, 'uevent')).startswith(
        'DRIVER=vfio-pci\n')
    assert os.listdir(state) == [hosts.PGPU]
    assert ('nvidia_gpu_driver: moved GPU 0000:3b:00.0 from nvidia to '
            'vfio-pci' in caplog.text)
    # While the guest has it, it is still the GPU to give back.
    deployable, _handle = _pgpu(driver)
    assert deployable.preparation == 'vfio'
    driver.prepare_attach_handle(handle, UUID, VFIO)  # again: nothing to do
    assert _driver_of(tree, hosts.PGPU) == 'vfio-pci'

    with caplog.at_level(logging.INFO):
        driver.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    assert tree.override(hosts.PGPU) is None
    assert not os.path.exists(tree.abs('dev/vfio/%d' % group))
    assert os.listdir(state) == []
    assert 'gave GPU 0000:3b:00.0 back to nvidia' in caplog.text
    driver.release_attach_handle(handle, UUID, VFIO)  # again: nothing to do
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    assert tree.refused == []
    # The other GPU never moved.
    assert _driver_of(tree, hosts.VGPU_PARENT) == 'nvidia'


def test_the_device_is_the_same_while_the_guest_has_it(host):
    """On vfio-pci the nvidia driver no longer describes the GPU (its
    /proc entry is gone, nvidia-smi does not list it)."""
    tree, driver, _state = host()
    before = next(d for d in driver.discover() if d.address == hosts.PGPU)
    driver.prepare_attach_handle(before.deployables[0].attach_handles[0],
                                 UUID, VFIO)
    tree.remove('proc/driver/nvidia/gpus/%s' % hosts.PGPU)
    tools.write_nvidia_smi(tree.tools_dir, [])
    during = next(d for d in driver.discover() if d.address == hosts.PGPU)
    assert (during.model, during.vendor_board_info) == (
        'Tesla T4', {'gpu_uuid': 'GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e0'})
    assert device_tree.tree_to_wire([during]) == device_tree.tree_to_wire(
        [before])


def test_a_gpu_in_use_on_the_host_fails_the_bind(host):
    tree, driver, state = host()
    _deployable, handle = _pgpu(driver)
    tree.add_holder(4242, 'python3', '/dev/nvidiactl',
                    procfs.device_file(PGPU_MINOR))
    tree.add_holder(4300, 'nvidia-smi', '/dev/nvidia1')  # the other GPU
    with pytest.raises(errors.PrepareFailed) as error:
        driver.prepare_attach_handle(handle, UUID, VFIO)
    assert str(error.value) == (
        'GPU 0000:3b:00.0 is in use on the host: /dev/nvidia0 is open in '
        'process 4242 (python3)')
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    assert tree.override(hosts.PGPU) is None
    assert not os.path.exists(state)
    # The bind fails, its handle is released: nothing to give back.
    driver.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    tree.remove_holder(4242)
    driver.prepare_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'vfio-pci'


def test_release_waits_until_the_guest_let_go(host):
    tree, driver, state = host()
    _deployable, handle = _pgpu(driver)
    driver.prepare_attach_handle(handle, UUID, VFIO)
    group = tree.iommu_group(hosts.PGPU)
    tree.add_holder(777, 'qemu-kvm', '/dev/vfio/%d' % group)
    with pytest.raises(errors.PrepareFailed,
                       match='GPU 0000:3b:00.0 is still assigned: '
                             '/dev/vfio/%d is open in process 777 '
                             r'\(qemu-kvm\)' % group):
        driver.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'vfio-pci'
    assert os.listdir(state) == [hosts.PGPU]
    tree.remove_holder(777)
    driver.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'


def test_a_restarted_agent_still_gives_the_gpu_back(host):
    tree, driver, state = host()
    _deployable, handle = _pgpu(driver)
    driver.prepare_attach_handle(handle, UUID, VFIO)
    restarted = nvidia.NvidiaGpuDriver(driver._conf)
    deployable, _handle = _pgpu(restarted)
    assert deployable.preparation == 'vfio'
    restarted.release_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'


def test_without_vfio_pci_loaded_the_bind_fails(host):
    tree, driver, state = host()
    tree.remove('sys/bus/pci/drivers/vfio-pci')
    _deployable, handle = _pgpu(driver)
    with pytest.raises(errors.PrepareFailed,
                       match=r'the vfio-pci driver is not loaded on the host '
                             r'\(modprobe vfio-pci\)'):
        driver.prepare_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'


def test_a_refused_unbind_lock_fails_the_bind(host, monkeypatch):
    tree, driver, state = host()
    _deployable, handle = _pgpu(driver)
    monkeypatch.setattr(procfs, 'lock_for_unbind', lambda host, gpu: False)
    with pytest.raises(errors.PrepareFailed,
                       match='the nvidia driver still has clients of GPU '
                             r'0000:3b:00.0 \(its unbindLock was refused\)'):
        driver.prepare_attach_handle(handle, UUID, VFIO)
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    assert tree.read('proc/driver/nvidia/gpus/%s/unbindLock'
                     % hosts.PGPU).strip() == '0'


def test_the_unbind_lock_is_taken_before_the_unbind(host):
    tree, driver, _state = host()
    _deployable, handle = _pgpu(driver)
    driver.prepare_attach_handle(handle, UUID, VFIO)
    assert tree.read('proc/driver/nvidia/gpus/%s/unbindLock'
                     % hosts.PGPU).strip() == '1'


def test_without_a_device_minor_the_bind_fails(host):
    tree, driver, _state = host()
    tree.write('proc/driver/nvidia/gpus/%s/information' % hosts.PGPU,
               'Model: \t\t Tesla T4')
    _deployable, handle = _pgpu(driver)
    with pytest.raises(errors.PrepareFailed,
                       match='cannot tell which /dev/nvidia<N> is GPU '
                             '0000:3b:00.0: no Device Minor'):
        driver.prepare_attach_handle(handle, UUID, VFIO)


def test_a_kernel_that_does_not_move_the_gpu_fails_the_bind(host,
                                                            monkeypatch):
    tree, driver, state = host('rebind_timeout = 0.2\n')
    _deployable, handle = _pgpu(driver)
    # nvidia does not let go: the kernel ignores writes to its unbind.
    monkeypatch.setattr(tree, 'kernel_unbind',
                        lambda name, address: tree._refuse('EBUSY'))
    with pytest.raises(errors.PrepareFailed,
                       match='cannot move GPU 0000:3b:00.0 from nvidia to '
                             'vfio-pci: 0000:3b:00.0 is bound to nvidia '
                             'after 0.2s, not unbound'):
        driver.prepare_attach_handle(handle, UUID, VFIO)
    # Left as it was: on nvidia, no override, its unbind lock given up,
    # nothing to give back.
    assert _driver_of(tree, hosts.PGPU) == 'nvidia'
    assert tree.override(hosts.PGPU) is None
    assert tree.read('proc/driver/nvidia/gpus/%s/unbindLock'
                     % hosts.PGPU).strip() == '0'
    assert os.listdir(state) == []
