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

"""SR-IOV: a physical function's virtual functions and netdevs.

The kernel links a PF to its VFs (``virtfn<N>``, N the VF index) and a VF
to its PF (``physfn``). VF addresses are read from these links, never
computed from ``sriov_offset``/``sriov_stride``, and ``virtfn<N>`` links
are ordered by the integer N (``virtfn10`` comes after ``virtfn2``).

:func:`set_num_vfs` refuses up front what the kernel would refuse
(``drivers/pci/iov.c``): more than ``sriov_totalvfs``, a PF without a
driver, and a change between two non-zero counts (write 0 first).
"""

from __future__ import annotations

import re

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

_VIRTFN = re.compile(r'^virtfn(\d+)$')


def total_vfs(host: sysfs.HostRoot,
              pf: pci.PCIAddress | str) -> int | None:
    """``sriov_totalvfs``; ``None`` when the device is not an SR-IOV PF."""
    return sysfs.read_int(host, pci.device_path(pf, 'sriov_totalvfs'))


def num_vfs(host: sysfs.HostRoot, pf: pci.PCIAddress | str) -> int | None:
    """``sriov_numvfs`` (VFs enabled now); ``None`` when not a PF."""
    return sysfs.read_int(host, pci.device_path(pf, 'sriov_numvfs'))


def is_pf(host: sysfs.HostRoot, address: pci.PCIAddress | str) -> bool:
    """Whether the device is SR-IOV capable (has ``sriov_totalvfs``)."""
    return total_vfs(host, address) is not None


def physfn(host: sysfs.HostRoot,
           vf: pci.PCIAddress | str) -> pci.PCIAddress | None:
    """The PF of a VF; ``None`` when the device is not a VF."""
    name = sysfs.link_name(host, pci.device_path(vf, 'physfn'))
    return None if name is None else pci.parse_address(name)


def is_vf(host: sysfs.HostRoot, address: pci.PCIAddress | str) -> bool:
    return physfn(host, address) is not None


def vf_map(host: sysfs.HostRoot,
           pf: pci.PCIAddress | str) -> dict[int, pci.PCIAddress]:
    """``{VF index: VF address}`` from the PF's ``virtfn<N>`` links."""
    found = {}
    for name in sysfs.list_dir(host, pci.device_path(pf)):
        match = _VIRTFN.match(name)
        if match is None:
            continue
        target = sysfs.link_name(host, pci.device_path(pf, name))
        if target is not None:
            found[int(match.group(1))] = pci.parse_address(target)
    return dict(sorted(found.items()))


def vfs(host: sysfs.HostRoot,
        pf: pci.PCIAddress | str) -> list[pci.PCIAddress]:
    """The PF's VFs in VF index order."""
    return list(vf_map(host, pf).values())


def vf_index(host: sysfs.HostRoot,
             vf: pci.PCIAddress | str) -> int | None:
    """The index N of the PF's ``virtfn<N>`` link to ``vf``."""
    parent = physfn(host, vf)
    if parent is None:
        return None
    wanted = pci.parse_address(str(vf))
    for index, address in vf_map(host, parent).items():
        if address == wanted:
            return index
    return None


def netdevs(host: sysfs.HostRoot,
            address: pci.PCIAddress | str) -> list[str]:
    """The network interfaces of a function (``net/<ifname>``); empty
    while no netdev driver is bound (a VF on vfio-pci has none)."""
    return sysfs.list_dir(host, pci.device_path(address, 'net'))


def netdev_address(host: sysfs.HostRoot,
                   ifname: str) -> pci.PCIAddress | None:
    """The PCI function of a network interface (``/sys/class/net``)."""
    name = sysfs.link_name(host, sysfs.path('/sys/class/net', ifname,
                                            'device'))
    if name is None or not pci.is_valid_address(name):
        return None
    return pci.parse_address(name)


def set_num_vfs(host: sysfs.HostRoot, pf: pci.PCIAddress | str,
                count: int) -> None:
    """Enable ``count`` VFs on ``pf`` (``0`` removes them all).

    Raises ``SriovError`` when the kernel would refuse: not an SR-IOV PF,
    ``count`` above ``sriov_totalvfs``, no driver bound to the PF, or VFs
    already enabled (disable with 0 first; there is no partial change).
    Asking for the current count does nothing. Re-read :func:`num_vfs`
    afterwards: a driver may enable fewer. The VFs' own drivers and
    netdevs can appear later still.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError('invalid VF count %r' % (count,))
    total = total_vfs(host, pf)
    if total is None:
        raise errors.SriovError(str(pf), 'not an SR-IOV physical function')
    if count > total:
        raise errors.SriovError(str(pf), '%d VFs asked, at most %d'
                                % (count, total))
    current = num_vfs(host, pf) or 0
    if count == current:
        return
    if pci.driver(host, pf) is None:
        raise errors.SriovError(str(pf), 'no driver bound; cannot '
                                'configure SR-IOV')
    if count and current:
        raise errors.SriovError(str(pf), '%d VFs already enabled; disable '
                                'them (0) before enabling %d'
                                % (current, count))
    sysfs.write_text(host, pci.device_path(pf, 'sriov_numvfs'), str(count))
