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

"""The usage record of bound accelerator requests: periods and seconds.

Time is cut into audit periods of ``[notifications] audit_period``
seconds, aligned on the Unix epoch (3600: on the hour). Once a period
has ended, every accelerator request (ARQ) that was bound during it
gets one usage record: the seconds it was bound within the period (the
overlap of each of its binding intervals with ``[start, end)``, summed)
and what it was bound to.

A binding interval runs from the moment the ARQ became Bound to the
moment it left Bound (unbound or deleted); an ARQ still bound has an
open interval. Every time here is a naive UTC datetime.
"""

import dataclasses
import datetime
import json
from typing import Any

from cyborg.domain import utilization

#: The notification a usage record is sent as.
EVENT_TYPE = 'accelerator_request.exists'

#: At most this many ended periods are audited after the last one audited
#: (e.g. after every conductor was down, or notifications were off): older
#: ones are left out; see the admin guide.
MAX_CATCH_UP = 24

EPOCH = datetime.datetime(1970, 1, 1)

Period = tuple[datetime.datetime, datetime.datetime]


def period_start(moment: datetime.datetime,
                 length: int) -> datetime.datetime:
    """The start of the period of ``length`` seconds that holds
    ``moment``."""
    seconds = (moment - EPOCH) // datetime.timedelta(seconds=length)
    return EPOCH + datetime.timedelta(seconds=seconds * length)


def periods_to_audit(last_end: datetime.datetime | None,
                     now: datetime.datetime, length: int,
                     limit: int = MAX_CATCH_UP) -> list[Period]:
    """The ended periods to audit at ``now``, oldest first.

    ``last_end`` is the end of the last period audited (None: none ever
    was, and only the last ended period is audited). The periods follow
    it without a gap: when ``length`` changed since, the first one runs
    from ``last_end`` to the next boundary of the new length. At most the
    ``limit`` latest are returned.
    """
    current = period_start(now, length)
    step = datetime.timedelta(seconds=length)
    if last_end is None:
        return [(current - step, current)]
    # Not before the ``limit`` latest periods (aligned on ``length``).
    start = max(last_end, current - limit * step)
    periods = []
    while start < current:
        end = period_start(start, length) + step
        periods.append((start, end))
        start = end
    return periods[-limit:]


@dataclasses.dataclass(frozen=True)
class Interval:
    """One binding interval of an ARQ and what it was bound to."""

    arq_uuid: str
    project_id: str | None
    instance_uuid: str | None
    device_profile_name: str | None
    resource_class: str | None
    vendor: str | None
    model: str | None
    host: str | None
    bound_at: datetime.datetime
    #: None: still bound.
    unbound_at: datetime.datetime | None = None
    #: The stored utilization text of its device (see
    #: :mod:`cyborg.domain.utilization`), None if none.
    utilization: str | None = None

    def seconds_within(self, start: datetime.datetime,
                       end: datetime.datetime) -> float:
        """Seconds of this interval within ``[start, end)``."""
        until = end if self.unbound_at is None else min(self.unbound_at, end)
        return max(0.0, (until - max(self.bound_at, start)).total_seconds())

    def bound_at_end(self, end: datetime.datetime) -> bool:
        """Whether the ARQ was still bound when the period ended."""
        return self.bound_at < end and (self.unbound_at is None
                                        or self.unbound_at >= end)


#: What a record says of its ARQ, in the order of the payload.
FIELDS = ('arq_uuid', 'project_id', 'instance_uuid', 'device_profile_name',
          'resource_class', 'vendor', 'model', 'host')


def timestamp(moment: datetime.datetime) -> str:
    """ISO 8601 UTC with a ``Z``, to the microsecond if it has any."""
    spec = 'microseconds' if moment.microsecond else 'seconds'
    return moment.isoformat(timespec=spec) + 'Z'


def records(intervals: list[Interval], start: datetime.datetime,
            end: datetime.datetime,
            readings: dict[str, tuple[float, int]] | None = None
            ) -> list[dict[str, Any]]:
    """One record per ARQ bound during ``[start, end)``, by ARQ uuid.

    An ARQ bound several times in the period gets one record with the
    seconds of all its intervals; what it was bound to is its latest
    interval's. ``latest_utilization`` is the latest reading of the
    device (``{"metrics": ..., "reported_at": ...}``) when the ARQ still
    held it at the end of the period, else None: a reading taken while
    another request held the device says nothing of this one.
    ``mean_gpu_percent`` is the mean of the busy readings its agent
    reported of the device while the ARQ held it in the period
    (``readings``: {ARQ uuid: (their sum, their number)}), and
    ``utilization_samples`` their number; None and 0 without any.
    """
    readings = readings or {}
    by_arq: dict[str, list[Interval]] = {}
    for interval in intervals:
        if interval.seconds_within(start, end) > 0:
            by_arq.setdefault(interval.arq_uuid, []).append(interval)
    found = []
    for uuid in sorted(by_arq):
        held = sorted(by_arq[uuid], key=lambda i: i.bound_at)
        latest = held[-1]
        record = {name: getattr(latest, name) for name in FIELDS}
        record.update(
            audit_period_beginning=timestamp(start),
            audit_period_ending=timestamp(end),
            bound_seconds=round(sum(i.seconds_within(start, end)
                                    for i in held), 6),
            latest_utilization=(_reading(latest.utilization)
                                if latest.bound_at_end(end) else None),
            **mean_reading(readings.get(uuid)))
        found.append(record)
    return found


def mean_reading(summed: tuple[float, int] | None) -> dict[str, Any]:
    """The record's ``mean_gpu_percent`` and ``utilization_samples`` of
    (sum, number) of readings."""
    if not summed or summed[1] <= 0:
        return {'mean_gpu_percent': None, 'utilization_samples': 0}
    total, count = summed
    return {'mean_gpu_percent': round(total / count, 3),
            'utilization_samples': count}


def _reading(text: str | None) -> dict[str, Any] | None:
    return utilization.from_stored(text)


def dumps(record: dict[str, Any]) -> str:
    """The stored form of a record (what is sent, to the byte)."""
    return json.dumps(record, sort_keys=True, separators=(',', ':'))
