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

"""The all-in-one's demo host: what the real drivers read in it, and the
kernel stand-in that makes the mdevs they create."""

import os
import time
import uuid

from cyborg.accelerator.drivers.nic import intel as nic
from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia
from cyborg.accelerator.drivers.qat import intel as qat
from cyborg.accelerator.drivers.utils import mdev
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone import demo_host
from cyborg.allinone import fake_ip
from cyborg.allinone import fake_tools
from cyborg.domain import device_tree


def _configure(conf, root: str) -> None:
    conf.set_override('host_root', root, group='agent')
    conf.set_override('enabled_drivers', demo_host.DRIVERS, group='agent')
    for group, options in demo_host.OPTIONS.items():
        for name, value in options.items():
            conf.set_override(name, value, group=group)


def _deployables(devices) -> list[tuple]:
    """(address, resource class, traits, handle addresses) of each
    deployable with inventory (a PF or a GPU running vGPUs is a provider
    without, its VFs' or types' children have it)."""
    return [(d['address'], dep['resource_class'], dep['traits'],
             ['%(domain)s:%(bus)s:%(device)s.%(function)s'
              % h['attach_info'] for h in dep['attach_handles']])
            for d in device_tree.tree_to_wire(devices)
            for dep, _parent, _depth in device_tree.walk_wire(
                d['deployables'])
            if dep['num_accelerators']]


def test_the_drivers_report_the_demo_devices(conf, tmp_path):
    tree = demo_host.build(str(tmp_path / 'host'))
    _configure(conf, tree.root)
    run = runner.CommandRunner(search_path=[demo_host.tools_dir(tree.root)])
    gpu_driver = nvidia.NvidiaGpuDriver(conf, run)
    gpu_devices = gpu_driver.discover()
    assert set(gpu_driver.health(gpu_devices).values()) == {'healthy'}
    gpus = _deployables(gpu_devices)
    assert [(a, rc, len(h)) for a, rc, _t, h in gpus] == [
        (demo_host.DEMO_PGPU, 'PGPU', 1),
        (demo_host.DEMO_VGPU_PARENT, 'VGPU', demo_host.DEMO_VGPU_COUNT)]
    assert demo_host.DEMO_VGPU_TRAIT in gpus[1][2]
    ((address, rc, traits, handles),) = _deployables(
        qat.IntelQATDriver(conf, runner=run).discover())
    assert (address, rc, handles) == (demo_host.DEMO_QAT_PF, 'CUSTOM_QAT',
                                      demo_host.DEMO_QAT_VFS)
    ((address, rc, traits, handles),) = _deployables(
        nic.IntelNICDriver(conf).discover())
    assert (address, rc, handles) == (demo_host.DEMO_NIC_PF, 'CUSTOM_NIC',
                                      demo_host.DEMO_NIC_VFS)
    assert demo_host.DEMO_PHYSNET_TRAIT in traits
    # Health came from the fake commands, each found in the tree.
    assert {c[0] for c in fake_tools.calls(tree.tools_dir)} >= {
        'nvidia-smi', 'adf_ctl', 'dmesg'}


def test_build_starts_from_an_empty_directory(tmp_path):
    root = tmp_path / 'host'
    root.mkdir()
    (root / 'stale').write_text('left from a previous run')
    demo_host.build(str(root))
    assert not (root / 'stale').exists()
    assert os.path.isdir(root / 'sys' / 'bus' / 'pci' / 'devices')


def _wait(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_kernel_stand_in_makes_and_removes_mdevs(tmp_path):
    tree = demo_host.build(str(tmp_path / 'host'))
    host = sysfs.HostRoot(tree.root)
    mdev_uuid = str(uuid.uuid4())
    with demo_host.DemoKernel(tree, interval=0.01) as kernel:
        mdev.create_mdev(host, demo_host.DEMO_VGPU_PARENT,
                         demo_host.DEMO_VGPU_TYPE, mdev_uuid)
        assert _wait(lambda: mdev.mdev_exists(host, mdev_uuid))
        assert tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [mdev_uuid]
        mdev.remove_mdev(host, mdev_uuid)
        assert _wait(lambda: not mdev.mdev_exists(host, mdev_uuid))
    assert not kernel._thread.is_alive()
    assert tree.refused == []


def test_the_demo_nic_vfs_are_put_in_the_demo_vlan(conf, tmp_path):
    tree = demo_host.build(str(tmp_path / 'host'))
    _configure(conf, tree.root)
    driver = nic.IntelNICDriver(conf, runner=runner.CommandRunner(
        search_path=[demo_host.tools_dir(tree.root)]))
    (device,) = driver.discover()
    (pool,) = device.deployables[0].children
    assert pool.preparation == 'vf'
    handle = pool.attach_handles[2]
    driver.prepare_attach_handle(handle, 'unused', pool.preparation)
    vlans = fake_ip.vf_settings(tree.tools_dir, demo_host.DEMO_NIC_IFNAME)
    assert {vf: s['vlan'] for vf, s in vlans.items()} == {
        0: 0, 1: 0, 2: demo_host.DEMO_VLAN, 3: 0}
    driver.release_attach_handle(handle, 'unused', pool.preparation)
    assert [c[1:] for c in fake_tools.calls(tree.tools_dir)
            if c[0] == 'ip'] == [
        demo_host.vf_vlan_args(2, demo_host.DEMO_VLAN),
        demo_host.vf_vlan_args(2, 0)]
    vlans = fake_ip.vf_settings(tree.tools_dir, demo_host.DEMO_NIC_IFNAME)
    assert [s['vlan'] for s in vlans.values()] == [0] * 4
