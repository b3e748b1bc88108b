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

"""Device trees as the real drivers report real-looking hosts, for the
inventory benchmark: each is built once on a host tree written by
:mod:`cyborg.allinone.host_tree` (the layout of sysfs)
and discovered by the driver an operator would enable.

* ``gpu8``: 8 NVIDIA T4s on vfio-pci, each a PGPU (``nvidia_gpu_driver``);
  changed: the last GPU gone.
* ``qat2x16``: 2 QAT 4xxx physical functions with 16 VFs each
  (``intel_qat_driver``); changed: one VF of the first gone.
"""

import os
import tempfile

from oslo_config import cfg

from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf
from cyborg.accelerator.drivers.qat import intel as qat
from cyborg.accelerator.drivers.qat import opts as qat_conf
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import demo_host
from cyborg.allinone import fake_tools
from cyborg.allinone.host_tree import HostTree
from cyborg.conf import agent as agent_conf
from cyborg.conf import default as default_conf
from cyborg.domain import device_tree

KINDS = ('gpu8', 'qat2x16')
GPUS = 8
QAT_PFS = 2
QAT_VFS = 16


def _conf(root: str) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    for options in (default_conf, agent_conf, nvidia_conf, qat_conf):
        options.register_opts(conf)
    conf([], project='cyborg-bench', default_config_files=[])
    conf.set_override('host_root', root, group='agent')
    conf.set_override('state_path', os.path.join(root, 'state'))
    return conf


def _gpu_host(root: str, gpus: int) -> HostTree:
    tree = HostTree(root)
    found = []
    for index in range(gpus):
        address = '0000:%02x:00.0' % (0x18 + index * 0x10)
        tree.add_pci(address, demo_host.NVIDIA, demo_host.T4,
                     demo_host.CLASS_3D, subsystem=(demo_host.NVIDIA, 0x12a2),
                     revision=0xa1, numa_node=index // 4, driver='vfio-pci')
        found.append(fake_tools.Gpu(
            index, address, 'GPU-00000000-0000-0000-0000-%012d' % index,
            'Tesla T4'))
    fake_tools.write_nvidia_smi(tree.tools_dir, found)
    fake_tools.write_dmesg(tree.tools_dir, [])
    return tree


def _qat_host(root: str, vfs_of_first: int) -> HostTree:
    tree = HostTree(root)
    for index in range(QAT_PFS):
        pf = '0000:%02x:00.0' % (0x6b + index * 0x10)
        count = vfs_of_first if index == 0 else QAT_VFS
        vfs = ['0000:%02x:%02x.%d' % (0x6b + index * 0x10, (v + 1) // 8,
                                      (v + 1) % 8) for v in range(count)]
        tree.add_pci(pf, demo_host.INTEL, 0x4940,
                     demo_host.CLASS_COPROCESSOR, numa_node=index,
                     driver='4xxx', revision=0x40)
        tree.write(tree.dev(pf, 'qat', 'state'), 'up')
        tree.write(tree.dev(pf, 'qat', 'cfg_services'), 'sym;asym')
        tree.add_sriov(pf, vfs, 0x4941, total_vfs=QAT_VFS, offset=1,
                       vf_drivers=['vfio-pci'] * len(vfs))
    return tree


def wire_tree(kind: str, changed: bool = False) -> list[dict]:
    """The wire form of one host of ``kind`` (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix='cyborg-bench-host-') as root:
        conf = _conf(root)
        if kind == 'gpu8':
            tree = _gpu_host(root, GPUS - 1 if changed else GPUS)
            driver = nvidia.NvidiaGpuDriver(
                conf, runner=runner.CommandRunner(
                    search_path=[tree.tools_dir]))
        elif kind == 'qat2x16':
            tree = _qat_host(root, QAT_VFS - 1 if changed else QAT_VFS)
            # sysfs qat/state is the 4xxx's health; no adf_ctl here.
            conf.set_override('use_adf_ctl', False, group='intel_qat_driver')
            driver = qat.IntelQATDriver(conf, runner=runner.CommandRunner(
                search_path=[tree.tools_dir]))
        else:
            raise ValueError('unknown tree %r (one of %s)'
                             % (kind, ', '.join(KINDS)))
        devices = driver.discover()
        for device in devices:
            device.health = driver.health(devices).get(device.address,
                                                       device.health)
        return device_tree.tree_to_wire(devices)
