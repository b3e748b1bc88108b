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

"""What the host's ``nvidia`` driver says of each GPU it holds, in
``/proc/driver/nvidia/gpus/<address>/`` (gone while another driver holds
the GPU)."""

from __future__ import annotations

from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

PROC_GPUS = '/proc/driver/nvidia/gpus'


def information(host: sysfs.HostRoot,
                gpu: pci.PCIAddress) -> dict[str, str]:
    """``information`` as a dict (``Model``, ``GPU UUID``, ``Device
    Minor``...); empty when the nvidia driver does not hold the GPU."""
    lines = sysfs.read_lines(host, sysfs.path(PROC_GPUS, str(gpu),
                                              'information'))
    info = {}
    for line in lines or []:
        key, sep, value = line.partition(':')
        if sep:
            info[key.strip()] = value.strip()
    return info


def device_minor(host: sysfs.HostRoot, gpu: pci.PCIAddress) -> int | None:
    """N of the GPU's ``/dev/nvidia<N>``; ``None`` when not known."""
    value = information(host, gpu).get('Device Minor', '')
    return int(value) if value.isdigit() else None


def device_file(minor: int) -> str:
    return '/dev/nvidia%d' % minor


def lock_for_unbind(host: sysfs.HostRoot, gpu: pci.PCIAddress) -> bool:
    """Ask the nvidia driver to refuse new users of the GPU until it is
    unbound: ``1`` written to ``unbindLock`` reads back ``1`` when
    granted, ``0`` while a client still uses the GPU. A driver without
    the file grants nothing and refuses nothing (``True``)."""
    path = sysfs.path(PROC_GPUS, str(gpu), 'unbindLock')
    if not sysfs.exists(host, path):
        return True
    sysfs.write_text(host, path, '1')
    return sysfs.read_text(host, path) == '1'


def unlock(host: sysfs.HostRoot, gpu: pci.PCIAddress) -> None:
    """Give up the unbind lock (the GPU stays with nvidia)."""
    path = sysfs.path(PROC_GPUS, str(gpu), 'unbindLock')
    if sysfs.exists(host, path):
        sysfs.write_text(host, path, '0')
