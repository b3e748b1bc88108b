# Copyright 2026 The Cyborg Authors.
#
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

"""Mediated devices (mdev) and NVIDIA's vGPU 17+ VF type files.

mdev (kernel ``Documentation/driver-api/vfio-mediated-device.rst``): a
parent (``/sys/class/mdev_bus/<addr>``, the PCI function's directory)
offers ``mdev_supported_types/<type>/{name,description,device_api,
available_instances,create,devices/}``. Writing a UUID to ``create``
makes ``<parent>/<uuid>/`` (``mdev_type`` link, ``remove``) and
``/sys/bus/mdev/devices/<uuid>``; writing ``1`` to its ``remove`` destroys
it. The capacity of a type is ``available_instances`` plus the mdevs in
its ``devices/``.

vGPU 17+ (Ada, Hopper, Blackwell with NVIDIA's VFIO variant driver) has
no mdev: each VF has ``nvidia/creatable_vgpu_types`` (``<id> : <name>``
lines) and ``nvidia/current_vgpu_type`` (``0`` for none; write a type id
to create the vGPU, ``0`` to destroy it).
"""

from __future__ import annotations

import dataclasses
import re
import uuid as uuid_mod

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

MDEV_BUS = '/sys/class/mdev_bus'
MDEV_DEVICES = '/sys/bus/mdev/devices'
TYPES = 'mdev_supported_types'


@dataclasses.dataclass(frozen=True)
class MdevType:
    """One ``mdev_supported_types/<type_id>`` directory of a parent."""

    type_id: str
    name: str | None
    description: str | None
    device_api: str | None
    available_instances: int
    devices: tuple[str, ...]

    @property
    def capacity(self) -> int:
        """Instances in use plus those that can still be created."""
        return self.available_instances + len(self.devices)

    def description_fields(self) -> dict[str, str]:
        """``key=value`` pairs of the description (``max_instance``...)."""
        return parse_description(self.description or '')


@dataclasses.dataclass(frozen=True)
class Mdev:
    """An existing mediated device of a parent."""

    uuid: str
    parent: pci.PCIAddress
    type_id: str | None


def parse_description(text: str) -> dict[str, str]:
    """``num_heads=4, framebuffer=1024M, max_instance=16`` as a dict."""
    fields = {}
    for item in text.split(','):
        key, sep, value = item.partition('=')
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _types_path(parent: pci.PCIAddress | str, *names: str) -> str:
    return pci.device_path(parent, TYPES, *names)


def _check_name(name: str, what: str) -> str:
    if not name or '/' in name or name in ('.', '..'):
        raise ValueError('invalid %s %r' % (what, name))
    return name


def _canonical_uuid(value: str) -> str:
    try:
        return str(uuid_mod.UUID(value))
    except (TypeError, ValueError, AttributeError):
        raise ValueError('invalid mdev UUID %r' % (value,))


def mdev_parents(host: sysfs.HostRoot) -> list[pci.PCIAddress]:
    """Every device the kernel lists as an mdev parent."""
    names = sysfs.list_dir(host, MDEV_BUS)
    return sorted(pci.parse_address(n) for n in names
                  if pci.is_valid_address(n))


def supported_type_ids(host: sysfs.HostRoot,
                       parent: pci.PCIAddress | str) -> list[str]:
    return sysfs.list_dir(host, _types_path(parent))


def get_type(host: sysfs.HostRoot, parent: pci.PCIAddress | str,
             type_id: str) -> MdevType | None:
    """Read one type of a parent; ``None`` if the parent has no such type."""
    _check_name(type_id, 'mdev type')
    if not sysfs.exists(host, _types_path(parent, type_id)):
        return None
    available = sysfs.read_int(
        host, _types_path(parent, type_id, 'available_instances'))
    return MdevType(
        type_id=type_id,
        name=sysfs.read_text(host, _types_path(parent, type_id, 'name')),
        description=sysfs.read_text(
            host, _types_path(parent, type_id, 'description')),
        device_api=sysfs.read_text(
            host, _types_path(parent, type_id, 'device_api')),
        available_instances=available or 0,
        devices=tuple(sysfs.list_dir(
            host, _types_path(parent, type_id, 'devices'))))


def supported_types(host: sysfs.HostRoot,
                    parent: pci.PCIAddress | str) -> list[MdevType]:
    """Every mdev type of a parent; empty when it is no mdev parent."""
    return [t for t in (get_type(host, parent, type_id)
                        for type_id in supported_type_ids(host, parent))
            if t is not None]


def list_mdevs(host: sysfs.HostRoot,
               parent: pci.PCIAddress | str) -> list[Mdev]:
    """The mdevs that exist on a parent (its ``<uuid>`` directories)."""
    addr = pci.parse_address(str(parent))
    found = []
    for name in sysfs.list_dir(host, pci.device_path(addr)):
        try:
            canonical = _canonical_uuid(name)
        except ValueError:
            continue
        type_link = pci.device_path(addr, name, 'mdev_type')
        if canonical != name or sysfs.read_link(host, type_link) is None:
            continue
        found.append(Mdev(uuid=name, parent=addr,
                          type_id=sysfs.link_name(host, type_link)))
    return found


def create_mdev(host: sysfs.HostRoot, parent: pci.PCIAddress | str,
                type_id: str, mdev_uuid: str) -> str:
    """Create an mdev of ``type_id`` with ``mdev_uuid``; return the UUID.

    Raises ``MdevTypeNotFound``, ``MdevUnavailable`` (no instance left)
    before writing, and ``SysfsWriteError`` with the kernel's errno when
    the write to ``create`` fails (a UUID in use, a race for the last
    instance).
    """
    value = _canonical_uuid(mdev_uuid)
    mdev_type = get_type(host, parent, type_id)
    if mdev_type is None:
        raise errors.MdevTypeNotFound(str(parent), type_id)
    if mdev_type.available_instances < 1:
        raise errors.MdevUnavailable(str(parent), type_id)
    sysfs.write_text(host, _types_path(parent, type_id, 'create'), value)
    return value


def mdev_exists(host: sysfs.HostRoot, mdev_uuid: str) -> bool:
    path = sysfs.path(MDEV_DEVICES, _canonical_uuid(mdev_uuid))
    return sysfs.exists(host, path)


def remove_mdev(host: sysfs.HostRoot, mdev_uuid: str) -> None:
    """Destroy an mdev (write ``1`` to its ``remove``).

    ``DeviceNotFound`` when no such mdev exists; ``SysfsWriteError`` when
    the kernel refuses (e.g. the guest still holds it).
    """
    value = _canonical_uuid(mdev_uuid)
    remove = sysfs.path(MDEV_DEVICES, value, 'remove')
    if not sysfs.exists(host, remove):
        raise errors.DeviceNotFound('mdev %s' % value)
    sysfs.write_text(host, remove, '1')


def remove_mdev_if_exists(host: sysfs.HostRoot, mdev_uuid: str) -> bool:
    """:func:`remove_mdev` unless the mdev is gone (a repeated
    release); whether it was there. ``SysfsWriteError`` when the kernel
    refuses."""
    try:
        if not mdev_exists(host, mdev_uuid):
            return False
        remove_mdev(host, mdev_uuid)
    except errors.DeviceNotFound:
        return False  # removed meanwhile
    return True


# vGPU 17+ -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class VgpuType:
    """A vGPU type as ``creatable_vgpu_types`` lists it."""

    type_id: int
    name: str

    @property
    def short_name(self) -> str:
        """``NVIDIA H200X-1-18C`` -> ``H200X-1-18C``."""
        return short_vgpu_name(self.name)


_ID_FIRST = re.compile(r'^(\d+)(?:\s*:\s*|\s+)(\S.*)$')
_ID_LAST = re.compile(r'^(.*\S)\s+(\d+)$')


def short_vgpu_name(name: str) -> str:
    words = name.split()
    return words[-1] if words else name


def parse_vgpu_types(text: str) -> list[VgpuType]:
    """Parse ``creatable_vgpu_types`` leniently.

    Accepts ``<id> : <name>``, ``<id> <name>`` and ``<name> <id>`` lines;
    a header (``ID : vGPU Name``) and other lines without an id are
    skipped.
    """
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        match = _ID_FIRST.match(line)
        if match is not None:
            found.append(VgpuType(int(match.group(1)), match.group(2)))
            continue
        match = _ID_LAST.match(line)
        if match is not None:
            found.append(VgpuType(int(match.group(2)), match.group(1)))
    return found


def _vgpu_path(vf: pci.PCIAddress | str, name: str) -> str:
    return pci.device_path(vf, 'nvidia', name)


def has_vendor_vgpu(host: sysfs.HostRoot, vf: pci.PCIAddress | str) -> bool:
    """Whether the function has the vGPU 17+ ``nvidia/`` directory."""
    return sysfs.exists(host, _vgpu_path(vf, 'current_vgpu_type'))


def creatable_vgpu_types(host: sysfs.HostRoot,
                         vf: pci.PCIAddress | str) -> list[VgpuType]:
    """The types the VF can take right now (empty if it has no
    ``nvidia/`` directory)."""
    text = sysfs.read_text(host, _vgpu_path(vf, 'creatable_vgpu_types'))
    return [] if text is None else parse_vgpu_types(text)


def current_vgpu_type(host: sysfs.HostRoot,
                      vf: pci.PCIAddress | str) -> int | None:
    """The type id set on the VF, ``0`` for none; ``None`` when the VF
    has no ``nvidia/`` directory."""
    return sysfs.read_int(host, _vgpu_path(vf, 'current_vgpu_type'))


def set_vgpu_type(host: sysfs.HostRoot, vf: pci.PCIAddress | str,
                  type_id: int) -> None:
    """Create (type id) or destroy (``0``) the vGPU of a VF."""
    if isinstance(type_id, bool) or not isinstance(type_id, int) \
            or type_id < 0:
        raise ValueError('invalid vGPU type id %r' % (type_id,))
    if not has_vendor_vgpu(host, vf):
        raise errors.DeviceNotFound('vGPU type files of %s' % vf)
    sysfs.write_text(host, _vgpu_path(vf, 'current_vgpu_type'),
                     str(type_id))
