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

"""The demo hardware of ``cyborg-all-in-one --demo-hardware``.

:func:`build` writes a small host tree (``sys``, ``proc``, ``dev`` and
``usr/bin``) that the real drivers read as they read a real host:

* ``DEMO_PGPU``: an NVIDIA Tesla T4 bound to ``vfio-pci``, offered for
  passthrough (resource class ``PGPU``);
* ``DEMO_VGPU_PARENT``: a Tesla T4 on ``nvidia`` offering the mdev type
  ``DEMO_VGPU_TYPE`` (GRID T4-2B, 8 vGPUs; resource class ``VGPU``,
  trait ``DEMO_VGPU_TRAIT``);
* ``DEMO_QAT_PF``: an Intel QAT 4xxx with 4 VFs (``CUSTOM_QAT``);
* ``DEMO_NIC_PF``: an Intel E810 with 4 VFs on ``physnet1``
  (``CUSTOM_NIC``, trait ``CUSTOM_PHYSNET_PHYSNET1``), whose VFs are put
  in VLAN ``DEMO_VLAN`` at bind;

and fake ``nvidia-smi``, ``adf_ctl``, ``dmesg``, ``lspci`` and ``ip`` in
``usr/bin`` (:func:`tools_dir`), so the drivers' health reads and the NIC
VFs' preparation answer (every call is logged in ``usr/bin/.calls``).
:data:`OPTIONS` are the driver options that match the tree.

A plain directory does not react to writes the way sysfs does: creating
a vGPU writes its uuid to the type's ``create`` file and the kernel
makes the mdev. :class:`DemoKernel` stands in for the kernel: a thread
that applies such writes (:meth:`HostTree.settle`) every
``SETTLE_INTERVAL`` seconds, so mdevs appear on bind and go on unbind.
"""

from __future__ import annotations

import json
import os
import shutil
import threading

from cyborg.allinone import fake_ip
from cyborg.allinone import fake_tools
from cyborg.allinone.host_tree import HostTree

NVIDIA = 0x10de
INTEL = 0x8086
T4 = 0x1eb8
CLASS_3D = 0x030200
CLASS_COPROCESSOR = 0x0b4000
CLASS_ETHERNET = 0x020000

DEMO_PGPU = '0000:3b:00.0'
DEMO_VGPU_PARENT = '0000:d8:00.0'
DEMO_VGPU_TYPE = 'nvidia-223'
DEMO_VGPU_TRAIT = 'CUSTOM_VGPU_NVIDIA_223'
DEMO_VGPU_COUNT = 8
DEMO_QAT_PF = '0000:6b:00.0'
DEMO_QAT_VFS = ['0000:6b:00.%d' % f for f in range(1, 5)]
DEMO_NIC_PF = '0000:af:00.0'
DEMO_NIC_VFS = ['0000:af:01.%d' % f for f in range(4)]
DEMO_NIC_IFNAME = 'ens801f0'
DEMO_NIC_MAC = 'b4:96:91:aa:bb:c0'
DEMO_VLAN = 100
DEMO_PHYSNET = 'physnet1'
DEMO_PHYSNET_TRAIT = 'CUSTOM_PHYSNET_PHYSNET1'
DEMO_FPGA_PF = '0000:5e:00.0'
DEMO_FPGA_DEVICE = 0xbcce
DEMO_FPGA_BITSTREAM = 0x2300011001030f
DEMO_FPGA_AFU = '9aeffe5f84570612c6d23bb2fb5c8a63'
DEMO_FPGA_INTERFACE = 'f3c9941350814aadbced07eb84a6d0bb'
# Function name -> (accelerator id, bitstream uuid) of the demo images.
DEMO_BITSTREAMS = {
    'gzip': ('d8424dc4a4a3c413f89e433683f9040b',
             '6e1a1d2b7c3f4a5e9b8d0c1f2e3a4b5c'),
    'aes': ('3afb0c1d2e3f40516273849506a7b8c9',
            '7f2b2e3c8d404b6fac9e1d203f4b5c6d'),
}
CLASS_ACCELERATOR = 0x120000

GPU_UUIDS = {DEMO_PGPU: 'GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e0',
             DEMO_VGPU_PARENT: 'GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e1'}

DRIVERS = ['nvidia_gpu_driver', 'intel_qat_driver', 'intel_nic_driver',
           'intel_fpga_driver']

# {group: {option: value}}: what the demo tree needs beyond
# [agent] host_root and enabled_drivers.
OPTIONS = {
    'nvidia_gpu': {'enabled_vgpu_types': [DEMO_VGPU_TYPE]},
    'intel_nic_driver': {
        'physical_device_mappings': ['%s:%s' % (DEMO_PHYSNET, DEMO_NIC_PF)],
        'vf_vlans': ['%s:%d' % (DEMO_PHYSNET, DEMO_VLAN)]},
}

SETTLE_INTERVAL = 0.1


def build(root: str) -> HostTree:
    """Write the demo host into ``root`` (emptied first)."""
    if os.path.isdir(root):
        shutil.rmtree(root)
    tree = HostTree(root)
    add_gpus(tree)
    add_qat(tree)
    add_nic(tree)
    add_fpga(tree)
    fake_tools.write_dmesg(tree.tools_dir, [])
    fake_tools.write_lspci(tree.tools_dir, [
        (f.address, f.vendor, f.device, f.class_code, 0)
        for f in tree.functions.values()])
    return tree


def tools_dir(root: str) -> str:
    """Where :func:`build` writes the fake vendor commands."""
    return os.path.join(os.path.abspath(root), 'usr', 'bin')


def add_gpus(tree: HostTree) -> None:
    """The passthrough T4 (on vfio-pci) and the vGPU T4 (on nvidia)."""
    for minor, (address, numa, driver) in enumerate((
            (DEMO_PGPU, 0, 'vfio-pci'), (DEMO_VGPU_PARENT, 1, 'nvidia'))):
        tree.add_pci(address, NVIDIA, T4, CLASS_3D,
                     subsystem=(NVIDIA, 0x12a2), revision=0xa1,
                     numa_node=numa, driver=driver)
        tree.add_nvidia_proc(address, 'Tesla T4', GPU_UUIDS[address], minor)
    tree.add_mdev_type(
        DEMO_VGPU_PARENT, DEMO_VGPU_TYPE, 'GRID T4-2B',
        'num_heads=4, frl_config=45, framebuffer=2048M, '
        'max_resolution=5120x2880, max_instance=%d' % DEMO_VGPU_COUNT,
        DEMO_VGPU_COUNT)
    fake_tools.write_nvidia_smi(tree.tools_dir, [
        fake_tools.Gpu(index, address, GPU_UUIDS[address], 'Tesla T4')
        for index, address in enumerate((DEMO_PGPU, DEMO_VGPU_PARENT))])


def add_qat(tree: HostTree) -> None:
    """A QAT 4xxx, up, with its 4 VFs on vfio-pci."""
    tree.add_pci(DEMO_QAT_PF, INTEL, 0x4940, CLASS_COPROCESSOR,
                 numa_node=-1, driver='4xxx', revision=0x40)
    for name, value in (('state', 'up'), ('cfg_services', 'sym;asym'),
                        ('num_rps', '64'), ('pm_idle_enabled', '1')):
        tree.write(tree.dev(DEMO_QAT_PF, 'qat', name), value)
    tree.add_sriov(DEMO_QAT_PF, DEMO_QAT_VFS, 0x4941, total_vfs=16,
                   offset=1, vf_drivers=['vfio-pci'] * len(DEMO_QAT_VFS))
    fake_tools.write_adf_ctl(tree.tools_dir,
                             [('4xxx', DEMO_QAT_PF, 0, 'up')])


def add_nic(tree: HostTree) -> None:
    """An E810 port (ens801f0) with 4 VFs on vfio-pci, and an ``ip``
    that keeps each VF's VLAN and trust until the host reboots
    (:mod:`.fake_ip`)."""
    tree.add_pci(DEMO_NIC_PF, INTEL, 0x1592, CLASS_ETHERNET, numa_node=1,
                 driver='ice', revision=0x02)
    tree.add_netdev(DEMO_NIC_PF, DEMO_NIC_IFNAME, DEMO_NIC_MAC)
    tree.add_sriov(DEMO_NIC_PF, DEMO_NIC_VFS, 0x1889, total_vfs=128,
                   offset=8, vf_drivers=['vfio-pci'] * len(DEMO_NIC_VFS),
                   probe_driver='iavf')
    fake_ip.write_ip(tree.tools_dir,
                     {DEMO_NIC_IFNAME: (DEMO_NIC_MAC, len(DEMO_NIC_VFS))})


def add_fpga(tree: HostTree) -> None:
    """An OFS N6000 on dfl-pci running ``DEMO_FPGA_AFU``, with the
    ``fpgainfo`` that describes it and an ``fpgaconf`` that programs
    what a GBS image holds (its accelerator id becomes the port's
    ``afu_id``)."""
    tree.add_pci(DEMO_FPGA_PF, INTEL, DEMO_FPGA_DEVICE, CLASS_ACCELERATOR,
                 subsystem=(INTEL, 0x1770), numa_node=0, driver='dfl-pci',
                 revision=0x01)
    tree.add_dfl_fpga(DEMO_FPGA_PF, DEMO_FPGA_BITSTREAM, DEMO_FPGA_AFU,
                      DEMO_FPGA_INTERFACE)
    fake_tools.write_tool(tree.tools_dir, 'fpgainfo', {
        ('fme',): fake_tools.Reply(fake_tools.fpgainfo_fme(
            DEMO_FPGA_PF, DEMO_FPGA_DEVICE, DEMO_FPGA_BITSTREAM,
            DEMO_FPGA_INTERFACE))})
    fake_tools.write_gbs_fpgaconf(tree.tools_dir, tree.abs(tree.dev(
        DEMO_FPGA_PF, 'fpga_region', 'region0', 'dfl-port.0', 'afu_id')))


def write_bitstreams(directory: str) -> list[str]:
    """Write the demo's bitstream images (one per function of
    ``DEMO_BITSTREAMS``, built for the demo FPGA's region) into
    ``directory`` as ``--bitstream-dir`` reads them; their names."""
    os.makedirs(directory, exist_ok=True)
    for function, (afu_id, bs_uuid) in DEMO_BITSTREAMS.items():
        name = 'demo-%s' % function
        with open(os.path.join(directory, name + '.gbs'), 'wb') as f:
            f.write(fake_tools.gbs_image(DEMO_FPGA_INTERFACE, afu_id))
        with open(os.path.join(directory, name + '.json'), 'w') as f:
            json.dump({'file': name + '.gbs', 'properties': {
                'bs-name': name + '.gbs', 'bs-uuid': bs_uuid,
                'vendor': 'Intel', 'board': 'N6000', 'version': '1.0',
                'driver_ver': '1.0', 'driver_path': '/opt/opae',
                'function_uuid': afu_id, 'function_name': function,
                'region_uuid': DEMO_FPGA_INTERFACE}}, f, indent=4)
    return ['demo-%s' % function for function in DEMO_BITSTREAMS]


def vf_vlan_args(index: int, vlan: int) -> list[str]:
    """The ``ip`` arguments that put VF ``index`` of the demo NIC in
    ``vlan`` (0: out of any)."""
    return ['link', 'set', 'dev', DEMO_NIC_IFNAME, 'vf', str(index), 'vlan',
            str(vlan)]


class DemoKernel:
    """The demo's stand-in for the kernel: a thread that applies the
    writes the drivers make to the tree (mdev ``create`` and ``remove``,
    ``sriov_numvfs``) every ``interval`` seconds. Never for a real host.
    """

    def __init__(self, tree: HostTree,
                 interval: float = SETTLE_INTERVAL) -> None:
        self.tree = tree
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='demo-kernel')

    def start(self) -> DemoKernel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tree.settle()
            except (OSError, ValueError):
                continue  # a write caught half done: the next round sees it

    def __enter__(self) -> DemoKernel:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
