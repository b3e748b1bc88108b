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

"""PCI addresses and the attributes of PCI functions in sysfs.

Addresses are normalised to the spelling of sysfs directory names,
``dddd:bb:ss.f`` in lowercase (:class:`PCIAddress`); every external
spelling (``nvidia-smi``'s ``00000000:3B:00.0``, ``adf_ctl``'s domainless
``3b:00.0``, libvirt's ``pci_0000_3b_00_0``) is parsed into one.
Functions read ``/sys/bus/pci/devices/<addr>`` under a
:class:`~.sysfs.HostRoot`; numeric ids are returned as ``int``.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import re

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import sysfs

DEVICES = '/sys/bus/pci/devices'
DRIVERS = '/sys/bus/pci/drivers'

# Domain of 1 to 8 hex digits (optional), bus, slot, function.
_ADDRESS = re.compile(
    r'^(?:(?P<domain>[0-9a-f]{4,8}):)?(?P<bus>[0-9a-f]{2}):'
    r'(?P<slot>[0-9a-f]{2})\.(?P<function>[0-9a-f])$')
_LIBVIRT = re.compile(
    r'^pci_(?P<domain>[0-9a-f]{4,8})_(?P<bus>[0-9a-f]{2})_'
    r'(?P<slot>[0-9a-f]{2})_(?P<function>[0-9a-f])$')
MAX_SLOT = 0x1f
MAX_FUNCTION = 7


@dataclasses.dataclass(frozen=True, order=True)
class PCIAddress:
    """A PCI function address; ``str()`` is its sysfs name."""

    domain: int
    bus: int
    slot: int
    function: int

    def __post_init__(self) -> None:
        if not (0 <= self.domain <= 0xffffffff and 0 <= self.bus <= 0xff
                and 0 <= self.slot <= MAX_SLOT
                and 0 <= self.function <= MAX_FUNCTION):
            raise errors.InvalidPCIAddress(
                repr((self.domain, self.bus, self.slot, self.function)),
                'field out of range')

    def __str__(self) -> str:
        return '%04x:%02x:%02x.%x' % (self.domain, self.bus, self.slot,
                                      self.function)

    def attach_info(self) -> dict[str, str]:
        """The address as Cyborg's PCI ``attach_info`` spells it."""
        return {'domain': '%04x' % self.domain, 'bus': '%02x' % self.bus,
                'device': '%02x' % self.slot,
                'function': '%x' % self.function}


def handle_address(attach_info: dict[str, str]) -> PCIAddress:
    """The PCI address a PCI attach handle's info names (``domain``,
    ``bus``, ``device``, ``function``, as Nova's libvirt driver reads
    it); ``InvalidPCIAddress`` when it names none."""
    try:
        text = '%s:%s:%s.%s' % (attach_info['domain'], attach_info['bus'],
                                attach_info['device'],
                                attach_info['function'])
    except (KeyError, TypeError) as exc:
        raise errors.InvalidPCIAddress(repr(attach_info),
                                       'no %s in the attach info' % exc)
    return parse_address(text)


def parse_address(text: str) -> PCIAddress:
    """Parse any spelling of a PCI address; raise ``InvalidPCIAddress``.

    Accepted: ``0000:3b:00.0``, ``00000000:3B:00.0`` (case-insensitive,
    4 to 8 domain digits; a domainless ``3b:00.0`` means domain 0) and
    ``pci_0000_3b_00_0``. Slot above ``1f`` or function above 7 is
    refused.
    """
    if not isinstance(text, str):
        raise errors.InvalidPCIAddress(repr(text), 'not a string')
    lowered = text.strip().lower()
    match = _ADDRESS.match(lowered) or _LIBVIRT.match(lowered)
    if match is None:
        raise errors.InvalidPCIAddress(text)
    fields = {k: int(v, 16) for k, v in match.groupdict(default='0').items()}
    if fields['slot'] > MAX_SLOT or fields['function'] > MAX_FUNCTION:
        raise errors.InvalidPCIAddress(text, 'slot or function out of range')
    return PCIAddress(**fields)


def normalize_address(text: str) -> str:
    """The sysfs spelling of any accepted spelling of an address."""
    return str(parse_address(text))


def is_valid_address(text: str) -> bool:
    try:
        parse_address(text)
    except errors.InvalidPCIAddress:
        return False
    return True


def _address(address: PCIAddress | str) -> PCIAddress:
    if isinstance(address, PCIAddress):
        return address
    return parse_address(address)


def device_path(address: PCIAddress | str, *names: str) -> str:
    """The host path of a device's directory or of a file in it."""
    return sysfs.path(DEVICES, str(_address(address)), *names)


def exists(host: sysfs.HostRoot, address: PCIAddress | str) -> bool:
    return sysfs.exists(host, device_path(address))


def _hex_id(host: sysfs.HostRoot, address: PCIAddress | str,
            name: str) -> int | None:
    return sysfs.read_int(host, device_path(address, name), 16)


def vendor_id(host: sysfs.HostRoot, address: PCIAddress | str) -> int | None:
    return _hex_id(host, address, 'vendor')


def device_id(host: sysfs.HostRoot, address: PCIAddress | str) -> int | None:
    return _hex_id(host, address, 'device')


def subsystem_vendor_id(host: sysfs.HostRoot,
                        address: PCIAddress | str) -> int | None:
    return _hex_id(host, address, 'subsystem_vendor')


def subsystem_device_id(host: sysfs.HostRoot,
                        address: PCIAddress | str) -> int | None:
    return _hex_id(host, address, 'subsystem_device')


def class_code(host: sysfs.HostRoot, address: PCIAddress | str) -> int | None:
    """The 24-bit class (class << 16 | subclass << 8 | prog-if)."""
    return _hex_id(host, address, 'class')


def revision(host: sysfs.HostRoot, address: PCIAddress | str) -> int | None:
    return _hex_id(host, address, 'revision')


def numa_node(host: sysfs.HostRoot, address: PCIAddress | str) -> int | None:
    """The device's NUMA node; ``None`` for ``-1`` (no affinity known)."""
    node = sysfs.read_int(host, device_path(address, 'numa_node'))
    return None if node is None or node < 0 else node


def driver(host: sysfs.HostRoot, address: PCIAddress | str) -> str | None:
    """The name of the bound driver, ``None`` when unbound."""
    return sysfs.link_name(host, device_path(address, 'driver'))


def iommu_group(host: sysfs.HostRoot,
                address: PCIAddress | str) -> int | None:
    """The IOMMU group number, ``None`` when the IOMMU is off."""
    name = sysfs.link_name(host, device_path(address, 'iommu_group'))
    if name is None:
        return None
    if not name.isdigit():
        raise errors.SysfsValueError(device_path(address, 'iommu_group'),
                                     name, 'not an IOMMU group number')
    return int(name)


def iommu_group_devices(host: sysfs.HostRoot, group: int) -> list[PCIAddress]:
    """Every PCI function of an IOMMU group."""
    names = sysfs.list_dir(
        host, sysfs.path('/sys/kernel/iommu_groups', str(group), 'devices'))
    return sorted(parse_address(n) for n in names if is_valid_address(n))


def pcie_root(host: sysfs.HostRoot, address: PCIAddress | str) -> str | None:
    """The root complex (``pci0000:3a``) the device sits under."""
    real = sysfs.read_link(host, device_path(address))
    if real is None:
        return None
    parts = host.host_path(real).split('/')
    # /sys/devices/pci0000:3a/...: the component after "devices".
    if len(parts) > 3 and parts[1:3] == ['sys', 'devices']:
        return parts[3] if parts[3].startswith('pci') else None
    return None


def uevent(host: sysfs.HostRoot,
           address: PCIAddress | str) -> dict[str, str] | None:
    return sysfs.read_key_values(host, device_path(address, 'uevent'))


@dataclasses.dataclass(frozen=True)
class PCIDevice:
    """What most drivers read of a PCI function, in one object."""

    address: PCIAddress
    vendor_id: int
    device_id: int
    subsystem_vendor_id: int | None
    subsystem_device_id: int | None
    class_code: int
    numa_node: int | None
    driver: str | None
    iommu_group: int | None
    physfn: PCIAddress | None

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None


def read_device(host: sysfs.HostRoot,
                address: PCIAddress | str) -> PCIDevice:
    """Read a device; ``DeviceNotFound`` when it does not exist."""
    addr = _address(address)
    vendor = vendor_id(host, addr)
    device = device_id(host, addr)
    code = class_code(host, addr)
    if vendor is None or device is None or code is None:
        raise errors.DeviceNotFound('PCI device %s' % addr)
    parent = sysfs.link_name(host, device_path(addr, 'physfn'))
    return PCIDevice(
        address=addr, vendor_id=vendor, device_id=device,
        subsystem_vendor_id=subsystem_vendor_id(host, addr),
        subsystem_device_id=subsystem_device_id(host, addr),
        class_code=code, numa_node=numa_node(host, addr),
        driver=driver(host, addr), iommu_group=iommu_group(host, addr),
        physfn=None if parent is None else parse_address(parent))


def list_addresses(host: sysfs.HostRoot) -> list[PCIAddress]:
    """Every PCI function of the host, sorted by address."""
    names = sysfs.list_dir(host, DEVICES)
    return sorted(parse_address(n) for n in names if is_valid_address(n))


def _class_matches(code: int | None, classes: Iterable[int] | None) -> bool:
    if classes is None:
        return True
    return code is not None and (code >> 8) in set(classes)


def list_devices(host: sysfs.HostRoot, vendor: int | None = None,
                 classes: Iterable[int] | None = None) -> list[PCIDevice]:
    """The devices of ``vendor`` whose class and subclass (``class >> 8``,
    e.g. ``0x0302`` for a 3D controller) is one of ``classes``.

    Always filter on class too: one vendor id spans several families.
    """
    wanted = None if classes is None else tuple(classes)
    found = []
    for addr in list_addresses(host):
        if vendor is not None and vendor_id(host, addr) != vendor:
            continue
        if not _class_matches(class_code(host, addr), wanted):
            continue
        try:
            found.append(read_device(host, addr))
        except errors.DeviceNotFound:
            continue  # removed since it was listed (hot unplug, VFs off)
    return found


def driver_devices(host: sysfs.HostRoot, name: str) -> list[PCIAddress]:
    """The devices bound to driver ``name`` (its directory's links)."""
    names = sysfs.list_dir(host, sysfs.path(DRIVERS, name))
    return sorted(parse_address(n) for n in names if is_valid_address(n))


def real_path(host: sysfs.HostRoot, address: PCIAddress | str) -> str | None:
    """The host path of the device under ``/sys/devices``."""
    real = sysfs.read_link(host, device_path(address))
    return None if real is None else host.host_path(real)


