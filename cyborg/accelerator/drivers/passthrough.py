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

"""What the drivers of PCI functions passed through whole share.

The QAT, NIC, NVMe and generic PCI drivers report PCI functions that Nova
attaches as they are (attach handle type ``PCI``): their device trees,
the checks of their options and the errors for options that cannot work
are built the same way here.
"""

from __future__ import annotations

import re

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names
from cyborg.domain import utilization

_HEX_ID = re.compile(r'^(?:0x)?([0-9a-f]{4})$')
VENDOR_NAMES = {0x8086: 'INTEL', 0x15b3: 'MELLANOX', 0x1bd4: 'INSPUR',
                0x19e5: 'HUAWEI', 0x10de: 'NVIDIA', 0x10ee: 'XILINX',
                0x1002: 'AMD'}


# Where the drivers' option checks find them.
DriverConfigError = driver_errors.DriverConfigError
config_error = driver_errors.config_error


def parse_hex_id(text: str, group: str, option: str) -> int:
    """A PCI vendor or device id, ``8086`` or ``0x8086``."""
    match = _HEX_ID.match(str(text).strip().lower())
    if match is None:
        raise config_error(group, option, '%r is not a PCI id (4 hex '
                           'digits, e.g. 8086)' % (text,))
    return int(match.group(1), 16)


# Placement's limit on resource class and trait names.
MAX_NAME = 255


def check_resource_class(name: str, group: str, option: str) -> str:
    if (len(name) > MAX_NAME
            or not resource_names.is_valid_resource_class(name)):
        raise config_error(group, option, '%r is not a resource class '
                           '(a standard one or CUSTOM_[A-Z0-9_]+)' % name)
    return name


def check_trait(name: str, group: str, option: str) -> str:
    if len(name) > MAX_NAME or not resource_names.is_valid_trait(name):
        raise config_error(group, option, '%r is not a trait (a standard '
                           'one or CUSTOM_[A-Z0-9_]+)' % name)
    return name


def parse_addresses(values: list[str], group: str,
                    option: str) -> list[pci.PCIAddress]:
    """PCI addresses of an option, in any spelling the helpers accept."""
    found = []
    for value in values:
        try:
            found.append(pci.parse_address(value))
        except errors.InvalidPCIAddress:
            raise config_error(group, option, '%r is not a PCI address '
                               '(e.g. 0000:3b:00.0)' % (value,))
    return found


def vendor_name(vendor: int) -> str:
    """``INTEL`` for 0x8086; the hex id for vendors without a name."""
    return VENDOR_NAMES.get(vendor, '%04X' % vendor)


def hex_id(value: int) -> str:
    return '0x%04x' % value


def deployable_name(address: pci.PCIAddress) -> str:
    """``0000_3b_00_0``: unique per device, stable across discoveries."""
    return str(address).replace(':', '_').replace('.', '_')


def pci_handle(address: pci.PCIAddress,
               **extra: str) -> device_tree.AttachHandle:
    info = dict(device_tree.pci_address_info(str(address)), **extra)
    return device_tree.AttachHandle(
        attach_type=device_tree.AttachType.PCI, attach_info=info)


def pf_with_vfs(pf: pci.PCIDevice, resource_class: str,
                pf_traits: list[str], vf_traits: list[str],
                handles: list[device_tree.AttachHandle], driver_name: str,
                preparation: device_tree.Preparation, pool: str = 'vfs'
                ) -> device_tree.Deployable:
    """An SR-IOV physical function and its VF pool: the PF's deployable
    (``0000_3b_00_0``, a resource provider with no inventory of its own,
    carrying ``pf_traits``) with one child (``0000_3b_00_0_<pool>``)
    holding the VFs (``handles``) as its inventory and ``vf_traits``.

    Nova puts the VFs of a PF on the PF's provider; the child keeps the
    PF's provider for the card, so that a PF passed through whole or a
    second pool of its VFs would be a sibling, not a change of the
    tree.
    """
    name = deployable_name(pf.address)
    return device_tree.Deployable(
        name=name, num_accelerators=0, resource_class=resource_class,
        traits=list(pf_traits), driver_name=driver_name,
        preparation=device_tree.Preparation.NONE,
        children=[device_tree.Deployable(
            name='%s_%s' % (name, pool), num_accelerators=len(handles),
            resource_class=resource_class, traits=list(vf_traits),
            attach_handles=handles, driver_name=driver_name,
            preparation=preparation)])


def board_info(device: pci.PCIDevice) -> dict[str, str | int | None]:
    """What the device's PCI config space says: ids as hex strings, the
    NUMA node as an integer (None when the kernel does not know it), as
    the GPU drivers report it."""
    info: dict[str, str | int | None] = {
        'vendor_id': hex_id(device.vendor_id),
        'device_id': hex_id(device.device_id),
        'class': '0x%06x' % device.class_code,
        'numa_node': device.numa_node}
    if device.subsystem_vendor_id is not None:
        info['subsystem_vendor_id'] = hex_id(device.subsystem_vendor_id)
    if device.subsystem_device_id is not None:
        info['subsystem_device_id'] = hex_id(device.subsystem_device_id)
    return info


def make_device(device: pci.PCIDevice, device_type: str, model: str,
                deployable: device_tree.Deployable,
                healthy: bool = True) -> device_tree.Device:
    """One device with one deployable, controlled through its own
    function (``device.address``)."""
    info = device_tree.pci_address_info(str(device.address))
    return device_tree.Device(
        type=device_type, vendor=hex_id(device.vendor_id), model=model,
        address=str(device.address),
        controlpath_ids=[device_tree.ControlPathID('PCI', info)],
        deployables=[deployable], std_board_info=board_info(device),
        health=(device_tree.Health.HEALTHY if healthy
                else device_tree.Health.UNHEALTHY))


def read_vfs(host: sysfs.HostRoot,
             pf: pci.PCIAddress) -> list[pci.PCIDevice]:
    """The PF's VFs in VF index order; a VF removed meanwhile is left
    out."""
    found = []
    for address in sriov.vfs(host, pf):
        try:
            found.append(pci.read_device(host, address))
        except errors.DeviceNotFound:
            continue
    return found


#: The drivers that hold a VF for an instance (libvirt binds a VF to
#: vfio-pci when it attaches it, and gives it back at detach).
VFIO_DRIVERS = frozenset(['vfio-pci'])


def vf_utilization(host: sysfs.HostRoot, devices: list[device_tree.Device],
                   passthrough_drivers: frozenset[str] = VFIO_DRIVERS
                   ) -> dict[str, utilization.Metrics]:
    """VFs enabled, in use by instances (bound to one of
    ``passthrough_drivers``) and in use by the host (bound to another
    driver), per physical function; a PF whose VFs cannot be read now
    is left out."""
    found = {}
    for device in devices:
        try:
            address = pci.parse_address(device.address)
            if not pci.exists(host, address):
                continue  # gone since discovery: nothing to count
            drivers = [vf.driver for vf in read_vfs(host, address)]
        except errors.HostError:
            continue
        found[device.address] = utilization.vf_usage(drivers,
                                                     passthrough_drivers)
    return found


class Once:
    """Remembers which conditions were already logged, so that a
    condition that lasts is logged when it appears, not at every
    discovery; one that went away and comes back is logged again.

    Call :meth:`next_round` at the start of each discovery and log only
    when :meth:`first` answers ``True``.
    """

    def __init__(self) -> None:
        self._previous: set[object] = set()
        self._current: set[object] = set()

    def next_round(self) -> None:
        self._previous, self._current = self._current, set()

    def first(self, key: object) -> bool:
        self._current.add(key)
        return key not in self._previous
