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

"""The device tree an agent reports, and its wire form.

A driver turns what it finds on the host into :class:`Device` trees:

* a **device** is one card, identified on its host by ``address`` (the PCI
  address of its control path function);
* a device has **deployables**, each one Placement resource provider with
  ``num_accelerators`` units of ``resource_class`` and a set of traits;
* a deployable has **attach handles**, what Nova attaches to an instance:
  a PCI function (``PCI``) or a mediated device (``MDEV``);
* a deployable may hold **child deployables** (a PF with its VFs, an
  FPGA region with its functions, a GPU with its vGPU types), each a
  resource provider under its parent's;
* a deployable declares its **preparation**: what its host's agent does
  to a handle before Nova can attach it and undoes after (see
  :class:`Preparation`);
* a device has **control path ids** (how the host programs or manages it)
  and a deployable may carry extra **attributes** (key/value).
"""

from collections.abc import Iterable
from collections.abc import Iterator
import dataclasses
import enum
import hashlib
import json
from typing import Any

from cyborg.domain import str_enum
from cyborg.domain import taints as taints_mod

DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')


class AttachType(str_enum.StrEnum):
    PCI = 'PCI'
    MDEV = 'MDEV'
    TEST_PCI = 'TEST_PCI'


class Preparation(str_enum.StrEnum):
    """What the agent's driver does to an attach handle before Nova can
    attach it (at bind), undone at unbind.

    ``none``: the handle is attachable as discovered. ``mdev``: a
    mediated device is created. ``vf``: a virtual function is configured
    (e.g. its MAC or VLAN). ``vgpu_type``: the vGPU type is written to a
    VF's ``current_vgpu_type`` (NVIDIA vGPU 17+). ``program``: the
    deployable is programmed (an FPGA region). ``vfio``: a whole device
    the host's driver holds is moved to ``vfio-pci`` (and given back at
    unbind).
    """
    NONE = 'none'
    MDEV = 'mdev'
    VF = 'vf'
    VGPU_TYPE = 'vgpu_type'
    PROGRAM = 'program'
    VFIO = 'vfio'


PREPARATIONS = tuple(kind.value for kind in Preparation)


def default_preparation(attach_types: Iterable[str]) -> Preparation:
    """The preparation of a deployable whose driver declares none (and of
    every deployable an agent older than the declaration reports): its
    MDEV handles are created, other handles need nothing."""
    return (Preparation.MDEV if AttachType.MDEV in attach_types
            else Preparation.NONE)


def needs_preparation(preparation: str) -> bool:
    """Whether the agent prepares the handles of a deployable declaring
    ``preparation``."""
    return preparation != Preparation.NONE


def reported_preparation(deployable: dict[str, Any]) -> str:
    """The preparation of a deployable in wire form: the declared one,
    or :func:`default_preparation` of its handles."""
    return deployable.get('preparation') or default_preparation(
        handle['attach_type'] for handle in deployable['attach_handles']
    ).value


class Health(str_enum.StrEnum):
    HEALTHY = 'healthy'
    UNHEALTHY = 'unhealthy'


@dataclasses.dataclass
class AttachHandle:
    #: A member of :class:`AttachType` (its value is accepted and turned
    #: into the member).
    attach_type: AttachType
    attach_info: dict[str, str]

    def __post_init__(self) -> None:
        self.attach_type = AttachType(self.attach_type)


@dataclasses.dataclass
class Deployable:
    name: str
    num_accelerators: int
    resource_class: str
    traits: list[str] = dataclasses.field(default_factory=list)
    attach_handles: list[AttachHandle] = dataclasses.field(
        default_factory=list)
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)
    driver_name: str | None = None
    #: A member of :class:`Preparation` (its value is accepted and
    #: turned into the member); None: :func:`default_preparation` of the
    #: handles (left out of the wire form, so that the digest of a tree
    #: that declares nothing is the one older agents send).
    preparation: Preparation | None = None
    #: Child deployables; names are unique in the whole device. Left out
    #: of the wire form when empty.
    children: list['Deployable'] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.preparation is None:
            return
        if self.preparation not in PREPARATIONS:
            raise ValueError('unknown preparation %r of deployable %s '
                             '(expected one of %s)' % (
                                 self.preparation, self.name,
                                 ', '.join(PREPARATIONS)))
        self.preparation = Preparation(self.preparation)

    def declared_preparation(self) -> Preparation:
        """The preparation the agent does to this deployable's handles:
        the declared one, or :func:`default_preparation` of its handles.
        """
        return self.preparation or default_preparation(
            handle.attach_type for handle in self.attach_handles)


@dataclasses.dataclass
class ControlPathID:
    cpid_type: str
    cpid_info: dict[str, str]


@dataclasses.dataclass
class Device:
    type: str
    vendor: str
    model: str
    address: str
    controlpath_ids: list[ControlPathID]
    deployables: list[Deployable]
    std_board_info: dict[str, Any] | None = None
    vendor_board_info: dict[str, Any] | str | None = None
    #: A member of :class:`Health` (its value is accepted and turned
    #: into the member).
    health: Health = Health.HEALTHY
    driver: str | None = None
    #: Driver taints (:class:`cyborg.domain.taints.Taint`, source
    #: ``driver``) from the device's health signals. Left out of the wire
    #: form when empty, so the digest of a tree without taints is the one
    #: older agents send.
    taints: list[taints_mod.Taint] = dataclasses.field(default_factory=list)
    #: The device's partitions (see :mod:`cyborg.domain.partitions`);
    #: None for a device its driver does not partition. Left out of the
    #: wire form when None, as ``taints`` when empty.
    partitions: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.health = Health(self.health)
        self.taints = [taint if isinstance(taint, taints_mod.Taint)
                       else taints_mod.Taint.from_wire(taint)
                       for taint in self.taints]
        names = list(_names(self.deployables))
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError('deployable names of device %s must be unique '
                             'at every depth: %s' % (self.address,
                                                     ', '.join(duplicates)))


def _names(deployables: list[Deployable]) -> Iterator[str]:
    for deployable in deployables:
        yield deployable.name
        yield from _names(deployable.children)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(',', ':'))


def tree_to_wire(devices: list[Device]) -> list[dict[str, Any]]:
    """The JSON-able form sent to the conductor, in a stable order."""
    wire = [dataclasses.asdict(device, dict_factory=_plain_dict)
            for device in devices]
    for device in wire:
        _normalize_deployables(device['deployables'])
        _normalize_taints(device)
        if device['partitions'] is None:
            del device['partitions']
    wire.sort(key=lambda d: d['address'])
    return wire


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """A dataclass's fields with each enum member as its value: the
    wire form holds plain JSON types only."""
    return {key: value.value if isinstance(value, enum.Enum) else value
            for key, value in items}


def _normalize_taints(device: dict[str, Any]) -> None:
    """Each taint in its wire form, sorted; none: left out."""
    if not device['taints']:
        del device['taints']
        return
    device['taints'] = sorted(
        ({key: value for key, value in taint.items() if key != 'added_at'}
         for taint in device['taints']),
        key=lambda taint: (taint['key'], taint['source'], taint['value']))


def _normalize_deployables(deployables: list[dict[str, Any]]) -> None:
    """Sort, and leave out what a tree of an older agent did not have
    (an undeclared preparation, no children), so its digest is the
    same."""
    deployables.sort(key=lambda d: d['name'])
    for deployable in deployables:
        deployable['traits'] = sorted(set(deployable['traits']))
        if deployable['preparation'] is None:
            del deployable['preparation']
        deployable['attach_handles'].sort(
            key=lambda h: canonical_json(h['attach_info']))
        if deployable['children']:
            _normalize_deployables(deployable['children'])
        else:
            del deployable['children']


def walk_wire(deployables: list[dict[str, Any]], parent: str | None = None
              ) -> Iterator[tuple[dict[str, Any], str | None, int]]:
    """Every deployable of a device's wire form, parents before their
    children: (deployable, its parent's name or None, depth from 0)."""
    for deployable in deployables:
        yield deployable, parent, 0
        for child, child_parent, depth in walk_wire(
                deployable.get('children') or [], deployable['name']):
            yield child, child_parent, depth + 1


def tree_digest(wire: Any) -> str:
    """A hash that changes exactly when the reported tree changes: the
    SHA-256 of its canonical JSON. The conductor hashes what it writes
    to Placement (a provider's inventories, its traits) the same way."""
    return hashlib.sha256(canonical_json(wire).encode()).hexdigest()


def pci_address_info(address: str) -> dict[str, str]:
    """``dddd:bb:ss.f`` as the attach info Nova's libvirt driver reads."""
    domain, bus, slot_function = address.split(':')
    slot, function = slot_function.split('.')
    return {'domain': domain, 'bus': bus, 'device': slot,
            'function': function}
