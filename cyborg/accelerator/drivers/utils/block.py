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

"""Whether the host uses an NVMe controller's disks (the boot disk).

A controller is in use while one of its namespaces, or a partition of
one, is mounted (``/proc/mounts``), used as swap (``/proc/swaps``) or
held by another block device (``/sys/block/<ns>/holders``, or a
partition's: LVM, MD, dm-crypt). Namespaces are read from the
controller's ``nvme/nvme<N>/`` directory, where they appear as
``nvme<N>n<M>``, or with native multipath as ``nvme<S>c<N>n<M>``, a path
of the block device ``nvme<S>n<M>``. A controller on vfio-pci, or
unbound, shows none.
"""

from __future__ import annotations

import os
import re

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

CLASS_NVME = 0x010802
_NAMESPACE = re.compile(r'^nvme(\d+)n(\d+)$')
_NAMESPACE_PATH = re.compile(r'^nvme(\d+)c\d+n(\d+)$')


def block_devices_in_use(host: sysfs.HostRoot) -> set[str] | None:
    """Names (``nvme0n1p2``) of the block devices mounted or used as
    swap; ``None`` when the mount table cannot be read."""
    mounts = sysfs.read_lines(host, '/proc/mounts')
    if mounts is None:
        return None
    swaps = (sysfs.read_lines(host, '/proc/swaps') or [])[1:]
    return {_device_name(host, line.split()[0])
            for line in mounts + swaps if line.split()}


def _device_name(host: sysfs.HostRoot, source: str) -> str:
    """``/dev/disk/by-uuid/...`` or ``/dev/nvme0n1p2`` -> ``nvme0n1p2``."""
    if not source.startswith('/dev/'):
        return source
    try:
        return os.path.basename(host.resolve(source))
    except errors.HostError:
        return os.path.basename(source)


def namespaces(host: sysfs.HostRoot, address: pci.PCIAddress) -> list[str]:
    """The block devices (``nvme0n1``) of a controller's namespaces."""
    names = set()
    for ctrl in sysfs.list_dir(host, pci.device_path(address, 'nvme')):
        for entry in sysfs.list_dir(host, pci.device_path(address, 'nvme',
                                                          ctrl)):
            match = _NAMESPACE.match(entry) or _NAMESPACE_PATH.match(entry)
            if match is not None:
                names.add('nvme%sn%s' % match.groups())
    return sorted(names)


def _block_devices(host: sysfs.HostRoot, namespace: str) -> list[str]:
    """The namespace and its partitions."""
    block = sysfs.path('/sys/block', namespace)
    return [namespace] + [
        entry for entry in sysfs.list_dir(host, block)
        if sysfs.exists(host, sysfs.path(block, entry, 'partition'))]


def _holders(host: sysfs.HostRoot, namespace: str, name: str) -> list[str]:
    parts = ['/sys/block', namespace] + ([] if name == namespace else [name])
    return [h for h in sysfs.list_dir(host, sysfs.path(*parts, 'holders'))
            if not h.startswith('.')]


def used_block_devices(host: sysfs.HostRoot, address: pci.PCIAddress,
                       in_use: set[str]) -> list[str]:
    """The controller's block devices the host uses (empty: none)."""
    used = []
    for namespace in namespaces(host, address):
        for name in _block_devices(host, namespace):
            if name in in_use or _holders(host, namespace, name):
                used.append(name)
    return used
