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
* a device has **control path ids** (how the host programs or manages it)
  and a deployable may carry extra **attributes** (key/value).
"""

import dataclasses
import enum
import hashlib
import json
from typing import Any

DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')


class AttachType(str, enum.Enum):
    PCI = 'PCI'
    MDEV = 'MDEV'
    TEST_PCI = 'TEST_PCI'


# Attach handle types whose device the host's agent prepares before Nova
# can attach it (an mdev is created) and releases after (it is removed).
PREPARED_TYPES = frozenset([AttachType.MDEV.value])


def needs_preparation(attach_type: str) -> bool:
    """Whether handles of ``attach_type`` are prepared by the agent."""
    return attach_type in PREPARED_TYPES


class Health(str, enum.Enum):
    HEALTHY = 'healthy'
    UNHEALTHY = 'unhealthy'


@dataclasses.dataclass
class AttachHandle:
    attach_type: str
    attach_info: dict[str, str]

    def key(self) -> str:
        """Identity of the handle within its deployable."""
        return canonical_json(self.attach_info)


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
    health: str = Health.HEALTHY.value
    driver: str | None = None


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(',', ':'))


def tree_to_wire(devices: list[Device]) -> list[dict[str, Any]]:
    """The JSON-able form sent to the conductor, in a stable order."""
    wire = [dataclasses.asdict(device) for device in devices]
    for device in wire:
        device['deployables'].sort(key=lambda d: d['name'])
        for deployable in device['deployables']:
            deployable['traits'] = sorted(set(deployable['traits']))
            deployable['attach_handles'].sort(
                key=lambda h: canonical_json(h['attach_info']))
    wire.sort(key=lambda d: d['address'])
    return wire


def tree_digest(wire: Any) -> str:
    """A hash that changes exactly when the reported tree changes."""
    return hashlib.sha256(canonical_json(wire).encode()).hexdigest()


def pci_address_info(address: str) -> dict[str, str]:
    """``dddd:bb:ss.f`` as the attach info Nova's libvirt driver reads."""
    domain, bus, slot_function = address.split(':')
    slot, function = slot_function.split('.')
    return {'domain': domain, 'bus': bus, 'device': slot,
            'function': function}
