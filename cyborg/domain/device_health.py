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

"""The health of the device an accelerator request holds, as the project
that owns the request sees it (after Kubernetes' resource health in pod
status, KEP-4680).

Graded from what the device's driver says (its health, its driver
taints) and whether its agent still reports: operators' taints (taint
rules) are not the device's health and do not change it.

* ``Unknown``: the host's agent has not been heard from for longer than
  the timeout (``[taints] health_unknown_after``), or never;
* ``Unhealthy``: a driver taint keeps allocations off the device, or
  it is reported unhealthy or has vanished;
* ``Degraded``: a driver taint that only informs (effect ``None``);
* ``Healthy``: none of these.

``reason`` says why in words of the device alone (a driver taint's key
and reason, or the device's health reason), and ``since`` when it
became so. Dependency-free.
"""

import dataclasses
import datetime

from cyborg.domain import device_tree
from cyborg.domain import taints as taint_rules

HEALTHY = 'Healthy'
DEGRADED = 'Degraded'
UNHEALTHY = 'Unhealthy'
UNKNOWN = 'Unknown'
STATUSES = (HEALTHY, DEGRADED, UNHEALTHY, UNKNOWN)


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    status: str
    reason: str | None
    since: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class DeviceState:
    """What the grading reads of one device."""

    health: str
    missing: bool
    health_reason: str | None
    health_since: datetime.datetime | None
    #: When the host's agent was last heard from (None: never).
    agent_seen: datetime.datetime | None
    taints: tuple[taint_rules.Taint, ...] = ()


def _taint_reason(taint: taint_rules.Taint) -> str:
    return ('%s: %s' % (taint.key, taint.reason) if taint.reason
            else taint.key)


def _from_taints(status: str, taints: list[taint_rules.Taint]
                 ) -> DeviceHealth:
    """``status`` because of ``taints`` (by key): the reason of the
    first, since the earliest was added."""
    times = [taint.added_at for taint in taints if taint.added_at]
    return DeviceHealth(status, '; '.join(_taint_reason(t) for t in taints),
                        min(times) if times else None)


def grade(device: DeviceState, now: datetime.datetime,
          unknown_after: float) -> DeviceHealth:
    """The health of ``device`` at ``now``."""
    if device.agent_seen is None or (
            now - device.agent_seen).total_seconds() > unknown_after:
        return DeviceHealth(
            UNKNOWN, 'no report from the device\'s host for more than %d '
                     'seconds' % unknown_after, device.agent_seen)
    driver = sorted((taint for taint in device.taints
                     if taint.source == taint_rules.Source.DRIVER),
                    key=lambda taint: taint.key)
    blocking = [taint for taint in driver if taint.keeps_allocations_off()]
    if blocking:
        return _from_taints(UNHEALTHY, blocking)
    if (device.missing
            or device.health != device_tree.Health.HEALTHY.value):
        return DeviceHealth(UNHEALTHY, device.health_reason,
                            device.health_since)
    if driver:
        return _from_taints(DEGRADED, driver)
    return DeviceHealth(HEALTHY, device.health_reason, device.health_since)
