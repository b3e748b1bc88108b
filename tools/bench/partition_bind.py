#!/usr/bin/env python3
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

"""Benchmark: the bind and unbind of a MIG partition on the fake tools.

A fixture vGPU 17+ host whose H200 runs MIG mode (the fake
``nvidia-smi`` of :mod:`cyborg.allinone.fake_mig`, one process per
call as on a real host), ``nvidia_gpu_driver`` in ``homogeneous``
partition mode: ``--binds`` times, the driver's preparation of a
1g.18gb handle (journal, ``nvidia-smi mig -lgipp``/``-lgip``/``-cgi``/
``-lgi``, the VF's type) and its release. With ``--vgpu mdev``, an
A100 under vGPU 16 whose VFs list MIG-backed mdev types, and a 1g.5gb
handle whose vGPU is an mdev (the tree's kernel emulation runs between
the timed calls). Prints p50/p99/max wall ms of each; target: bind p99
< 2 s.

    .venv/bin/python tools/bench/partition_bind.py [--binds 50] \
        [--vgpu vgpu17|mdev]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

from oslo_config import cfg  # noqa: E402

from cyborg.accelerator.drivers.nvidia_gpu import driver as nvidia  # noqa: E402
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf  # noqa: E402
from cyborg.accelerator.drivers.utils import runner  # noqa: E402
from cyborg.allinone import fake_mig  # noqa: E402
from cyborg.allinone import fake_tools  # noqa: E402
from cyborg.conf import agent as agent_conf  # noqa: E402
from cyborg.conf import default as default_conf  # noqa: E402
from tests.fixtures.hosts import hosts  # noqa: E402

UUID = '83b8f4f2-509f-382f-3c1e-e6bfe0fa%04d'


def build(work: str, vgpu: str):
    root = os.path.join(work, 'host')
    if vgpu == 'mdev':
        tree = hosts.nvidia_a100_mig_mdev_host(root)
        profile = '1g.5gb'
    else:
        tree = hosts.nvidia_vgpu17_host(root)
        fake_mig.write_nvidia_smi_mig(
            tree.tools_dir, [fake_tools.Gpu(0, hosts.VGPU17_PF, 'GPU-h',
                                            'NVIDIA H200')],
            os.path.join(work, 'mig.state'), {0: 'NVIDIA H200'})
        profile = '1g.18gb'
    conf = cfg.ConfigOpts()
    default_conf.register_opts(conf)
    agent_conf.register_opts(conf)
    nvidia_conf.register_opts(conf)
    path = os.path.join(work, 'cyborg.conf')
    with open(path, 'w') as f:
        f.write('[DEFAULT]\nstate_path = %s\n[agent]\nhost_root = %s\n'
                '[nvidia_gpu]\nrebind_nvidia_gpus = false\n'
                'partition_mode = homogeneous\nmig_profiles = %s\n'
                % (os.path.join(work, 'state'), root, profile))
    conf(['--config-file', path], project='cyborg', default_config_files=[])
    return tree, nvidia.NvidiaGpuDriver(
        conf, runner.CommandRunner(search_path=[tree.tools_dir]))


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return 'p50 %.0f ms, p99 %.0f ms, max %.0f ms' % (
        1000 * statistics.median(values), 1000 * p99, 1000 * values[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--binds', type=int, default=50)
    parser.add_argument('--vgpu', choices=('vgpu17', 'mdev'),
                        default='vgpu17')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        tree, driver = build(work, args.vgpu)
        (device,) = driver.discover()
        (child,) = device.deployables[0].children
        prep = child.preparation
        binds, unbinds = [], []
        for n in range(args.binds):
            handle = child.attach_handles[n % len(child.attach_handles)]
            started = time.monotonic()
            driver.prepare_attach_handle(handle, UUID % n, prep)
            binds.append(time.monotonic() - started)
            tree.settle()  # the kernel's part of the writes (mdev)
            started = time.monotonic()
            driver.release_attach_handle(handle, UUID % n, prep)
            unbinds.append(time.monotonic() - started)
            tree.settle()
    print('bind (creates the partition):  ' + percentiles(binds))
    print('unbind (destroys it):          ' + percentiles(unbinds))
    p99 = sorted(binds)[min(len(binds) - 1, int(len(binds) * 0.99))]
    print('target bind p99 < 2 s: %s' % ('met' if p99 < 2 else 'NOT met'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
