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

"""What an agent does at start with the prepared handles of its host.

A host reboot makes the kernel forget what the agent prepared (an mdev,
a VF's VLAN and trust, a vGPU type written to a VF, the bitstream of an
FPGA region on a board that loses it). Before its first report after a
start, the agent asks the conductor for the **prepared handles** of its
host: every attach handle of a deployable that declares a preparation,
with what the agent must do with it (:class:`Action`):

* ``restore``: a Bound ARQ holds it; the guest Nova restarts expects
  it, so the agent prepares it again if its driver says it is not
  prepared (:func:`action_for`);
* ``keep``: an ARQ holds it in another state (a bind job or a failure
  in flight works on it): left alone;
* ``remove``: no ARQ holds it; what its driver still finds prepared (an
  mdev a persistent definition brought back, a release the agent
  missed) is released.

The outcome (:class:`Outcome`) goes back to the conductor, which
records each failed handle's reason on its ARQ; the agent taints the
device of a failed handle with the signal :data:`RESTORE_FAILED`.

Dependency-free: the conductor, the database layer and the agent import
it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cyborg.domain import arq_states as states
from cyborg.domain import str_enum

#: The health signal of a device with a handle the agent could not
#: restore (see :mod:`cyborg.domain.remediation`).
RESTORE_FAILED = 'restore.failed'

#: What the conductor records as the bind error of the ARQ of a handle
#: the agent could not restore.
_FAILED = ('Restoring attach handle %s after its host restarted failed: '
           '%s')


class Action(str_enum.StrEnum):
    RESTORE = 'restore'
    KEEP = 'keep'
    REMOVE = 'remove'


def action_for(arq_state: str | None) -> Action:
    """What the agent does with a prepared handle an ARQ in
    ``arq_state`` holds (None: no ARQ holds it)."""
    if arq_state is None:
        return Action.REMOVE
    if arq_state == states.BOUND:
        return Action.RESTORE
    return Action.KEEP


def failure_reason(handle_uuid: str, reason: str) -> str:
    """The bind error of the ARQ whose handle could not be restored."""
    return _FAILED % (handle_uuid, reason)


def shown_bind_error(state: str, bind_error: str | None) -> str | None:
    """The bind error an ARQ in ``state`` shows: a failed bind's, and a
    Bound ARQ's whose handle its agent could not restore."""
    if state in states.FAILED:
        return bind_error
    if (state == states.BOUND and bind_error is not None
            and bind_error.startswith(_FAILED.split('%s', 1)[0])):
        return bind_error
    return None


@dataclasses.dataclass(frozen=True)
class PreparedHandle:
    """One prepared handle of a host, as the conductor sends it."""

    uuid: str
    action: Action
    #: The driver that reported its device (None: unknown).
    driver: str | None
    #: The address of its device (the key of the device's taint).
    device_address: str
    attach_type: str
    attach_info: dict[str, str]
    #: A :class:`~cyborg.domain.device_tree.Preparation` value.
    preparation: str
    #: The ARQ holding it (None for ``remove``).
    arq_uuid: str | None = None
    #: For a programmed region: the control path it is programmed
    #: through, the image it holds (``id``, ``os_hash_algo``,
    #: ``os_hash_value``, ``size``) and the function trait it must
    #: show once it runs that image.
    controlpath: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    function_trait: str | None = None
    #: Why the conductor could not name the image (the region cannot
    #: be programmed again).
    image_error: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, 'action', Action(self.action))

    def to_wire(self) -> dict[str, Any]:
        wire = dataclasses.asdict(self)
        wire['action'] = self.action.value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> PreparedHandle:
        """Raises ValueError for a malformed entry."""
        try:
            return cls(**wire)
        except TypeError as exc:
            raise ValueError('malformed prepared handle %r: %s'
                             % (wire, exc))


@dataclasses.dataclass
class Outcome:
    """What the agent did with its host's prepared handles."""

    #: Handle uuids prepared again (or found still prepared).
    restored: list[str] = dataclasses.field(default_factory=list)
    #: Handle uuid -> why it could not be prepared again.
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Handle uuids no ARQ holds whose preparation was undone.
    released: list[str] = dataclasses.field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {'restored': sorted(self.restored),
                'failed': dict(sorted(self.failed.items())),
                'released': sorted(self.released)}
