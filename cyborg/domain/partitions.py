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

"""A device's partitions, as its driver reports them and the API shows
them (microversion 2.10).

A GPU partitioned by this service (``[nvidia_gpu] partition_mode =
homogeneous``) reports its ``mode``, the ``profile`` it serves (None:
none can be served now), whether an administrator ``pinned`` it to
that profile, how many partitions are ``in_use`` and how many more are
still ``creatable``. The document travels in the agent's device tree
and is stored, cleaned, in the device's row; a device without one (a
GPU in ``static`` mode, any other device) shows null.

The profile an administrator sets is checked here too: a name as NVIDIA
writes a GPU instance profile (``1g.18gb``, ``1g.18gb+me``).

A device that serves one profile at a time changes it only when nothing
holds what it serves, Placement's allocations not bound yet included:
its driver asks a :class:`SwitchGuard` before each change, and serves
what the :class:`SwitchAnswer` says.
"""

import dataclasses
import json
import re
from typing import Any
from typing import Protocol

STATIC = 'static'
HOMOGENEOUS = 'homogeneous'
#: The partition modes of ``[nvidia_gpu] partition_mode``.
MODES = (STATIC, HOMOGENEOUS)

#: The longest profile name accepted (NVIDIA's are under 16 characters).
PROFILE_MAX_LENGTH = 32
#: A GPU instance profile name: ``<slices>g.<memory>gb`` with optional
#: ``+<attribute>`` suffixes (``+me``, ``+gfx``).
PROFILE_PATTERN = r'^[0-9]+g\.[0-9]+gb(\+[a-z]+)*$'
_PROFILE_RE = re.compile(PROFILE_PATTERN)
_FIELDS = ('mode', 'profile', 'pinned', 'in_use', 'creatable')


def is_profile_name(value: Any) -> bool:
    return (isinstance(value, str) and len(value) <= PROFILE_MAX_LENGTH
            and _PROFILE_RE.match(value) is not None)


def state(mode: str, profile: str | None, pinned: bool, in_use: int,
          creatable: int) -> dict[str, Any]:
    """The document a driver reports for one device."""
    return {'mode': mode, 'profile': profile, 'pinned': pinned,
            'in_use': in_use, 'creatable': creatable}


def clean(value: Any) -> dict[str, Any] | None:
    """``value`` when it is a valid partition document, else None (an
    agent's report is not trusted to be well formed)."""
    if not isinstance(value, dict) or set(value) != set(_FIELDS):
        return None
    counts = (value['in_use'], value['creatable'])
    if (value['mode'] not in MODES
            or not (value['profile'] is None
                    or is_profile_name(value['profile']))
            or not isinstance(value['pinned'], bool)
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                   for n in counts)):
        return None
    return {key: value[key] for key in _FIELDS}


def stored_form(value: Any) -> str | None:
    """The text a device row keeps (None: no valid document)."""
    cleaned = clean(value)
    if cleaned is None:
        return None
    return json.dumps(cleaned, sort_keys=True, separators=(',', ':'))


def from_stored(text: str | None) -> dict[str, Any] | None:
    """The document of a device row's text (None: none, or unreadable)."""
    if not text:
        return None
    try:
        return clean(json.loads(text))
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class SwitchAnswer:
    """Whether a device may serve a deployable it does not serve now.

    ``allowed``: nothing holds what it serves (no accelerator request,
    no attach handle in use, no Placement allocation) and Placement
    grants nothing more of it until the next report is synced. Refused,
    ``serving`` names the deployables the device serves as the
    conductor knows them (empty: unknown), which the driver keeps."""

    allowed: bool
    serving: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {'allowed': self.allowed, 'serving': list(self.serving)}

    @classmethod
    def from_wire(cls, value: Any) -> 'SwitchAnswer':
        """The answer of a conductor; anything malformed refuses."""
        if not isinstance(value, dict) or value.get('allowed') is not True:
            serving = value.get('serving') if isinstance(value, dict) else ()
            names = tuple(n for n in serving if isinstance(n, str)) if (
                isinstance(serving, list)) else ()
            return cls(False, names)
        return cls(True)


#: What a device's driver is told where nothing can be asked.
ALLOWED = SwitchAnswer(True)


class SwitchGuard(Protocol):
    """Asked by a driver before a device serves a deployable it did not
    serve in its last report (a GPU switching its partition profile)."""

    def may_serve(self, address: str, deployable: str) -> SwitchAnswer:
        """Whether the device at ``address`` may serve ``deployable``
        (its name) in place of what it serves now."""
