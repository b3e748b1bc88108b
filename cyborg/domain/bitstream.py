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

"""FPGA bitstream metadata: the Glance image properties of a bitstream.

The keys, which are required and the format of each value follow the
FPGA bitstream metadata spec (``bs-name``, ``bs-uuid``, ``vendor``, ...).
One deviation: the spec's table marks ``topology`` not nullable, yet its
notes say "Topology is not mandatory to fill in"; it is optional here.

Identifiers (``bs-uuid``, ``shell_id``, ``region_uuid``,
``function_uuid``) are UUIDs written with or without dashes, in any case:
FPGA tools print a PR interface or AFU id with dashes, sysfs prints 32 hex
digits. They are kept in one canonical form, 32 lower-case hex digits, so
that ids of either origin compare equal.

Bitstream images are tagged ``FPGA`` in Glance (:data:`IMAGE_TAG`).
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import json
import re
from typing import Any

from cyborg.common import exception
from cyborg.domain import resource_names

IMAGE_TAG = 'FPGA'

BS_NAME = 'bs-name'
BS_UUID = 'bs-uuid'
VENDOR = 'vendor'
BOARD = 'board'
SHELL_ID = 'shell_id'
VERSION = 'version'
DRIVER = 'driver'
DRIVER_VER = 'driver_ver'
DRIVER_PATH = 'driver_path'
TOPOLOGY = 'topology'
DESCRIPTION = 'description'
REGION_UUID = 'region_uuid'
FUNCTION_UUID = 'function_uuid'
FUNCTION_NAME = 'function_name'

_ID = 'id'
_NAME = 'name'
_VERSION = 'version'
_PATH = 'path'
_JSON = 'json'
_TEXT = 'text'

#: key -> (required, kind of value), in the spec's order.
KEYS: dict[str, tuple[bool, str]] = {
    BS_NAME: (True, _NAME),
    BS_UUID: (True, _ID),
    VENDOR: (True, _NAME),
    BOARD: (True, _NAME),
    SHELL_ID: (False, _ID),
    VERSION: (True, _VERSION),
    DRIVER: (False, _NAME),
    DRIVER_VER: (True, _VERSION),
    DRIVER_PATH: (True, _PATH),
    TOPOLOGY: (False, _JSON),
    DESCRIPTION: (False, _TEXT),
    REGION_UUID: (False, _ID),
    FUNCTION_UUID: (True, _ID),
    FUNCTION_NAME: (False, _NAME),
}
REQUIRED = tuple(key for key, (required, _) in KEYS.items() if required)
#: Keys whose values are identifiers (canonical form: 32 hex digits).
ID_KEYS = tuple(key for key, (_, kind) in KEYS.items() if kind == _ID)

MAX_NAME = 255
MAX_PATH = 1024
MAX_TEXT = 65535
_HEX_ID = re.compile(r'^[0-9a-f]{32}$')
_DASHED_ID = re.compile(
    r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')
_VERSION_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9.+_-]*$')
_CONTROL = re.compile(r'[\x00-\x1f\x7f]')


@dataclasses.dataclass(frozen=True)
class BitstreamMetadata:
    """The parsed metadata of one bitstream image.

    Identifiers are in canonical form (:func:`canonical_id`); ``topology``
    is the decoded JSON object, or None.
    """

    bs_name: str
    bs_uuid: str
    vendor: str
    board: str
    version: str
    driver_ver: str
    driver_path: str
    function_uuid: str
    shell_id: str | None = None
    driver: str | None = None
    topology: dict[str, Any] | None = None
    description: str | None = None
    region_uuid: str | None = None
    function_name: str | None = None

    @property
    def is_shell(self) -> bool:
        """A shell bitstream needs no shell (its ``shell_id`` is null)."""
        return self.shell_id is None


def _invalid(key: str, problem: str) -> exception.InvalidBitstreamMetadata:
    return exception.InvalidBitstreamMetadata(key=key, problem=problem)


def canonical_id(value: str) -> str | None:
    """32 lower-case hex digits for a UUID or hex id written with or
    without dashes (``'3AFB...'`` or ``'3afb....-...'``), else None."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if _DASHED_ID.match(text):
        text = text.replace('-', '')
    return text if _HEX_ID.match(text) else None


def _check_id(key: str, value: str) -> str:
    text = canonical_id(value)
    if text is None:
        raise _invalid(key, '%r is not a UUID (32 hex digits, with or '
                            'without dashes)' % value)
    return text


def _check_pattern(key: str, value: str, pattern: re.Pattern,
                   what: str) -> str:
    if len(value) > MAX_NAME or not pattern.match(value):
        raise _invalid(key, '%r is not a valid %s' % (value, what))
    return value


def _check_path(key: str, value: str) -> str:
    if len(value) > MAX_PATH or _CONTROL.search(value):
        raise _invalid(key, 'must be at most %d characters with no control '
                            'characters' % MAX_PATH)
    return value


def _check_json(key: str, value: str) -> dict[str, Any]:
    try:
        decoded = json.loads(value)
    except ValueError as e:
        raise _invalid(key, 'is not valid JSON: %s' % e) from None
    if not isinstance(decoded, dict):
        raise _invalid(key, 'must be a JSON object, not %s'
                            % type(decoded).__name__)
    return decoded


def _check_text(key: str, value: str) -> str:
    if len(value) > MAX_TEXT:
        raise _invalid(key, 'is longer than %d characters' % MAX_TEXT)
    return value


def _value(key: str, kind: str, value: str) -> Any:
    if kind == _ID:
        return _check_id(key, value)
    if kind == _NAME:
        return _check_pattern(key, value, _NAME_RE,
                              'name (letters, digits, ".", "_", "-"; at '
                              'most %d)' % MAX_NAME)
    if kind == _VERSION:
        return _check_pattern(key, value, _VERSION_RE,
                              'version (e.g. "1.0")')
    if kind == _PATH:
        return _check_path(key, value)
    if kind == _JSON:
        return _check_json(key, value)
    return _check_text(key, value)


def parse(image_properties: Mapping[str, Any]) -> BitstreamMetadata:
    """The bitstream metadata of an image's properties.

    Other properties (Glance's own, ``os_hash_value``...) are ignored. A
    nullable key may be absent, null or empty. Raises
    :class:`~cyborg.common.exception.InvalidBitstreamMetadata` naming the
    first key that is missing, not a string or badly formed.
    """
    fields: dict[str, Any] = {}
    for key, (required, kind) in KEYS.items():
        value = image_properties.get(key)
        if value is None or (not required and value == ''):
            if required:
                raise _invalid(key, 'is required')
            continue
        if not isinstance(value, str):
            raise _invalid(key, 'must be a string, not %s'
                                % type(value).__name__)
        if value.strip() == '' and required:
            raise _invalid(key, 'is required and must not be empty')
        fields[key.replace('-', '_')] = _value(key, kind, value)
    return BitstreamMetadata(**fields)


def matches_function(meta: BitstreamMetadata, function_id: str) -> bool:
    """Whether the bitstream implements the function ``function_id`` (a
    device profile's ``accel:function_id``, dashes and case ignored)."""
    wanted = canonical_id(function_id)
    return wanted is not None and wanted == meta.function_uuid


def fits_region(meta: BitstreamMetadata, region_interface_id: str) -> bool:
    """Whether the bitstream loads into a region of type
    ``region_interface_id`` (the card's PR interface id).

    A bitstream without ``region_uuid`` fits no region: nothing says it
    was built for this one, and programming a wrong one fails or worse.
    """
    wanted = canonical_id(region_interface_id)
    return (wanted is not None and meta.region_uuid is not None
            and wanted == meta.region_uuid)


def function_trait(vendor: str, function_id: str) -> str:
    """The trait a deployable programmed with function ``function_id``
    of ``vendor`` carries: ``CUSTOM_FPGA_FUNCTION_ID_<VENDOR>_<ID>``, the
    id as 32 upper-case hex digits (e.g.
    ``CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B``).
    """
    text = canonical_id(function_id)
    if text is None:
        raise _invalid(FUNCTION_UUID, '%r is not a UUID (32 hex digits, '
                                      'with or without dashes)'
                       % function_id)
    return resource_names.custom_name(
        'FPGA_FUNCTION_ID_%s_%s' % (vendor, text))


#: What every function trait starts with (see :func:`function_trait`).
FUNCTION_TRAIT_PREFIX = 'CUSTOM_FPGA_FUNCTION_ID_'
_REGION_TRAIT_PREFIX = 'CUSTOM_FPGA_REGION_'


def trait_vendor(traits: list[str] | set[str], default: str) -> str:
    """The vendor a deployable's FPGA traits name (its region trait
    ``CUSTOM_FPGA_REGION_<VENDOR>_<ID>`` or a function trait), so that a
    function trait written by the conductor is the one its driver
    reports; ``default`` (the bitstream's ``vendor``) when none does."""
    for trait in sorted(traits):
        for prefix in (_REGION_TRAIT_PREFIX, FUNCTION_TRAIT_PREFIX):
            if trait.startswith(prefix) and '_' in trait[len(prefix):]:
                return trait[len(prefix):].rsplit('_', 1)[0]
    return default


def function_traits(traits) -> set[str]:
    """The function traits among ``traits``."""
    return {t for t in traits if t.startswith(FUNCTION_TRAIT_PREFIX)}


def with_function_trait(traits: list[str] | set[str],
                        trait: str | None) -> list[str]:
    """``traits`` with its function traits replaced by ``trait`` (none
    left when ``trait`` is None): a region runs one function."""
    kept = {t for t in traits if not t.startswith(FUNCTION_TRAIT_PREFIX)}
    if trait is not None:
        kept.add(trait)
    return sorted(kept)


def region_fit_problem(meta: BitstreamMetadata,
                       region_interface_id: str | None) -> str | None:
    """Why the bitstream cannot be loaded into a region of type
    ``region_interface_id`` (None: the region reports no type), or None
    when it fits (see :func:`fits_region`)."""
    if region_interface_id is None:
        return ('the region reports no interface id, so nothing says the '
                'bitstream was built for it')
    if meta.region_uuid is None:
        return 'the bitstream has no region_uuid'
    if not fits_region(meta, region_interface_id):
        return ('the bitstream is built for region type %s, the region '
                'is of type %s' % (meta.region_uuid,
                                   canonical_id(region_interface_id)
                                   or region_interface_id))
    return None
