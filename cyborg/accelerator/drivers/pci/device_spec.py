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

"""``[pci_driver] device_spec``: Nova's ``[pci] device_spec`` syntax.

Each value is a JSON object, or a list of them, with the keys:

``vendor_id``, ``product_id``
    4 hex digits, or ``*`` (any; the default).
``address``
    A glob, ``[[[domain]:]bus]:][slot][.[function]]`` with ``*`` or an
    empty field for any (``0000:3b:00.0``, ``*:3b:00.*``, ``3b:00.``),
    or an object of regular expressions per field (``{"domain": ".*",
    "bus": "3b", "slot": "0[0-1]", "function": "[0-7]"}``, matched
    against the whole lowercase field). An exact address of an SR-IOV
    physical function matches its virtual functions, not itself, as in
    Nova.
``resource_class``
    Upper case, ``-`` made ``_``, ``CUSTOM_`` prefixed unless it is a
    standard class; any other character than ``A-Z0-9_`` is an error
    (where Nova would make it ``_``). Default
    ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``.
``traits``
    A comma-separated string (or a list), each normalised the same way.
``device_type``
    Cyborg's device type (``GPU``, ``FPGA``, ``AICHIP``, ``QAT``, ``NIC``,
    ``SSD``); default from the PCI class.

Anything else (``devname`` included, which Nova also refuses) is an error.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import json
import re
from typing import Any

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.pci import opts as pci_conf
from cyborg.accelerator.drivers.utils import pci
from cyborg.domain import device_tree
from cyborg.domain import resource_names

GROUP = pci_conf.group.name
OPTION = 'device_spec'
ANY = '*'
KEYS = ('vendor_id', 'product_id', 'address', 'resource_class', 'traits',
        'device_type')
FIELDS = ('domain', 'bus', 'slot', 'function')
FIELD_MAX = {'domain': 0xffff, 'bus': 0xff, 'slot': 0x1f, 'function': 7}
_HEX = re.compile(r'^[0-9a-fA-F]{1,8}$')


def field_text(address: pci.PCIAddress) -> dict[str, str]:
    return {'domain': '%04x' % address.domain, 'bus': '%02x' % address.bus,
            'slot': '%02x' % address.slot, 'function': '%x' %
            address.function}


@dataclasses.dataclass(frozen=True)
class AddressMatch:
    """Per field: an int (glob), a compiled regex, or ``None`` (any)."""

    fields: dict[str, int | re.Pattern | None]

    def exact(self) -> pci.PCIAddress | None:
        """The one address a glob without wildcards names."""
        values = [self.fields[f] for f in FIELDS]
        numbers = [v for v in values if isinstance(v, int)]
        if len(numbers) == len(values):
            return pci.PCIAddress(*numbers)
        return None

    def matches(self, address: pci.PCIAddress) -> bool:
        text = field_text(address)
        for name, wanted in self.fields.items():
            if wanted is None:
                continue
            if isinstance(wanted, int):
                if getattr(address, name) != wanted:
                    return False
            elif wanted.fullmatch(text[name]) is None:
                return False
        return True


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    text: str  # the spec as configured, for messages
    vendor_id: int | None
    product_id: int | None
    address: AddressMatch | None
    resource_class: str | None
    traits: tuple[str, ...]
    device_type: str | None

    def matches_ids(self, device: pci.PCIDevice) -> bool:
        return ((self.vendor_id is None or device.vendor_id == self.vendor_id)
                and (self.product_id is None
                     or device.device_id == self.product_id))

    def resource_class_of(self, device: pci.PCIDevice) -> str:
        return self.resource_class or 'CUSTOM_PCI_%04X_%04X' % (
            device.vendor_id, device.device_id)


def _error(spec: str, reason: str) -> errors.DriverConfigError:
    return pci_base.config_error(GROUP, OPTION, '%s: %s' % (spec, reason))


def normalize_name(name: str, is_standard: Callable[[str], bool]) -> str:
    """Upper case, ``-`` made ``_``, ``CUSTOM_`` prefixed unless
    ``is_standard`` (see :mod:`cyborg.domain.resource_names`).

    Other characters are kept, for the name check to refuse them (Nova
    turns them into ``_``, which hides typos).
    """
    text = resource_names.normalize(name)
    if is_standard(text) or text.startswith(resource_names.CUSTOM_PREFIX):
        return text
    return resource_names.CUSTOM_PREFIX + text


def _pci_id(value: Any, key: str, spec: str) -> int | None:
    if value == ANY:
        return None
    if not isinstance(value, str) or not re.fullmatch(r'[0-9a-fA-F]{4}',
                                                      value):
        raise _error(spec, '%s %r must be 4 hex digits or "*"' % (key,
                                                                  value))
    return int(value, 16)


def _glob_field(text: str, name: str, spec: str) -> int | None:
    text = text.strip()
    if text in ('', ANY):
        return None
    if not _HEX.match(text) or int(text, 16) > FIELD_MAX[name]:
        raise _error(spec, 'address %s %r is not a hex number of at most '
                     '%x' % (name, text, FIELD_MAX[name]))
    return int(text, 16)


def parse_address_glob(value: str, spec: str) -> AddressMatch:
    """``[[[domain]:]bus]:][slot][.[function]]``, ``*`` or empty: any."""
    dbs, _sep, function = value.partition('.')
    parts = dbs.split(':') if dbs else []
    if len(parts) > 3:
        raise _error(spec, 'address %r has too many ":"' % value)
    parts = [ANY] * (3 - len(parts)) + parts
    fields: dict[str, int | re.Pattern | None] = {
        name: _glob_field(text, name, spec) for name, text in zip(
            ('domain', 'bus', 'slot'), parts, strict=True)}
    fields['function'] = _glob_field(function, 'function', spec)
    return AddressMatch(fields)


def parse_address_regex(value: dict, spec: str) -> AddressMatch:
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise _error(spec, 'address has unknown fields %s (known: %s)'
                     % (', '.join(unknown), ', '.join(FIELDS)))
    fields: dict[str, int | re.Pattern | None] = dict.fromkeys(FIELDS)
    for name, pattern in value.items():
        if not isinstance(pattern, str):
            raise _error(spec, 'address %s must be a regular expression '
                         'string' % name)
        try:
            fields[name] = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise _error(spec, 'address %s %r is no regular expression: %s'
                         % (name, pattern, exc))
    return AddressMatch(fields)


def _traits(value: Any, spec: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [t for t in value.split(',') if t.strip()]
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        items = value
    else:
        raise _error(spec, 'traits must be a comma-separated string')
    traits = []
    for item in items:
        name = normalize_name(item, resource_names.is_standard_trait)
        traits.append(pci_base.check_trait(
            name, GROUP, '%s: trait %r' % (OPTION, item)))
    return tuple(sorted(set(traits)))


def _resource_class(value: Any, spec: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _error(spec, 'resource_class must be a non-empty string')
    name = normalize_name(value, resource_names.is_standard_resource_class)
    return pci_base.check_resource_class(
        name, GROUP, '%s: resource_class %r' % (OPTION, value))


def _address(value: Any, spec: str) -> AddressMatch | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_address_glob(value, spec)
    if isinstance(value, dict):
        return parse_address_regex(value, spec)
    raise _error(spec, 'address must be a string or an object')


def _device_type(value: Any, spec: str) -> str | None:
    if value is None or value in device_tree.DEVICE_TYPES:
        return value
    raise _error(spec, 'device_type %r is not one of %s'
                 % (value, ', '.join(device_tree.DEVICE_TYPES)))


def parse_spec(obj: Any, text: str) -> DeviceSpec:
    if not isinstance(obj, dict):
        raise _error(text, 'a spec must be a JSON object')
    if 'devname' in obj:
        raise _error(text, 'devname is not supported; use address')
    unknown = sorted(set(obj) - set(KEYS))
    if unknown:
        raise _error(text, 'unknown keys %s (known: %s)'
                     % (', '.join(unknown), ', '.join(KEYS)))
    return DeviceSpec(
        text=text, vendor_id=_pci_id(obj.get('vendor_id', ANY), 'vendor_id',
                                     text),
        product_id=_pci_id(obj.get('product_id', ANY), 'product_id', text),
        address=_address(obj.get('address'), text),
        resource_class=_resource_class(obj.get('resource_class'), text),
        traits=_traits(obj.get('traits', ''), text),
        device_type=_device_type(obj.get('device_type'), text))


def parse_device_specs(values: list[str]) -> list[DeviceSpec]:
    """Every spec of the option's values, in order."""
    specs = []
    for value in values:
        try:
            obj = json.loads(value)
        except ValueError as exc:
            raise _error(value, 'not JSON: %s' % exc)
        items = obj if isinstance(obj, list) else [obj]
        specs += [parse_spec(item, json.dumps(item, sort_keys=True))
                  for item in items]
    return specs
