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

"""A device's administrative status, when its inventory is offered, and
why it has its health."""

from cyborg.domain import device_tree

#: Offered to the scheduler (when healthy and present).
ENABLED = 'enabled'
#: Set aside by an operator: its inventory is reserved.
MAINTAINING = 'maintaining'
STATUSES = (ENABLED, MAINTAINING)


def is_schedulable(status: str, health: str, missing: bool,
                   tainted: bool = False) -> bool:
    """Whether new instances may be scheduled on the device: enabled,
    healthy and still reported by its agent.

    ``tainted``: the device has a taint with a scheduling effect. An
    agent that sends taints reports a device unhealthy exactly when a
    driver taint keeps allocations off it; such a device is left to its
    taints' traits (requests that tolerate them may still use it), while
    one reported unhealthy without taints (an older agent) is not
    schedulable at all.
    """
    healthy = health == device_tree.Health.HEALTHY.value or tainted
    return status == ENABLED and healthy and not missing


# Why a device has its health (``devices.health_reason``). The conductor
# stamps one of these, with the time (``health_since``), when a report
# adds the device or changes its health or its presence; nothing else
# changes them (an operator's disable or enable is a status, not a
# health). NULL in both: not recorded (a device known before the
# columns existed, until its health next changes).

#: A new device reported healthy.
REASON_DISCOVERED = 'reported healthy by its agent when first discovered'
#: Reported unhealthy by its driver (new, or healthy before).
REASON_UNHEALTHY = 'reported unhealthy by its driver'
#: Reported healthy again by its driver after it was unhealthy.
REASON_RECOVERED = 'reported healthy again by its driver'
#: No longer reported while an instance holds it: kept until released.
REASON_VANISHED = 'vanished while in use'
#: Reported healthy again after it vanished while in use.
REASON_REAPPEARED = 'reported again by its agent after it vanished'
#: Imported from an upstream Cyborg, which records no health: assumed
#: healthy until its agent reports it.
REASON_IMPORTED = 'imported from upstream Cyborg, assumed healthy'

REASONS = (REASON_DISCOVERED, REASON_UNHEALTHY, REASON_RECOVERED,
           REASON_VANISHED, REASON_REAPPEARED, REASON_IMPORTED)


def health_reason(health: str, missing: bool,
                  before: tuple[str, bool, str | None] | None = None
                  ) -> str | None:
    """Why a device has ``health`` and ``missing`` now; None when
    neither changed from ``before`` ((health, missing, reason) as
    recorded; None: a new device), so that its stamp stays.

    An imported device's first report is its discovery: what upstream
    recorded was an assumption.
    """
    if before is not None and before[2] == REASON_IMPORTED:
        before = None
    if before is not None and before[:2] == (health, missing):
        return None
    if missing:
        return REASON_VANISHED
    if health != device_tree.Health.HEALTHY.value:
        return REASON_UNHEALTHY
    if before is None:
        return REASON_DISCOVERED
    return REASON_REAPPEARED if before[1] else REASON_RECOVERED
