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

"""What a device's utilization report may say.

A driver reports, per device address, a few metrics the hardware
exposes (a GPU's busy percentage, its memory in use, the virtual
functions taken). The agent sends them with its report but outside the
tree's digest: a changing utilization changes no row of the tree and no
Placement inventory. Only the metrics named here cross to the conductor;
each has one unit and one number type.
"""

import dataclasses
import datetime
import enum
import json
import math
from typing import Any

#: What a metric's value is: a number of ``unit``.
Number = int | float


class Unit(str, enum.Enum):
    PERCENT = 'percent'
    MIB = 'MiB'
    COUNT = 'count'


@dataclasses.dataclass(frozen=True)
class Metric:
    """A metric name, its unit, its number type and its bounds."""

    name: str
    unit: Unit
    kind: type
    description: str

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind is int and not float(value).is_integer():
            return False
        if not math.isfinite(value) or value < 0:
            return False
        return self.unit is not Unit.PERCENT or value <= 100


#: The accelerator's compute busy percentage, whatever the accelerator:
#: a GPU's (``utilization.gpu``, ``gpu_busy_percent``) or an NPU's AI
#: cores' (``Aicore Usage Rate``). Named for the GPU, its first user.
GPU_PERCENT = Metric('gpu_percent', Unit.PERCENT, float,
                     'time the accelerator\'s compute units (a GPU, an '
                     'NPU\'s AI cores) were busy over the last sample '
                     'period')
MEMORY_USED_MIB = Metric('memory_used_mib', Unit.MIB, int,
                         'device memory in use')
MEMORY_TOTAL_MIB = Metric('memory_total_mib', Unit.MIB, int,
                          'device memory in all')
VFS_IN_USE = Metric('vfs_in_use', Unit.COUNT, int,
                    'virtual functions bound to a passthrough driver '
                    '(vfio-pci or a VFIO variant driver): given to, or '
                    'set aside for, instances')
VFS_HOST = Metric('vfs_host', Unit.COUNT, int,
                  'virtual functions bound to a host driver (in use by '
                  'the host)')
VFS_TOTAL = Metric('vfs_total', Unit.COUNT, int,
                   'virtual functions enabled (sriov_numvfs)')

#: Every metric a driver may report, by name.
METRICS: dict[str, Metric] = {m.name: m for m in (
    GPU_PERCENT, MEMORY_USED_MIB, MEMORY_TOTAL_MIB, VFS_IN_USE, VFS_HOST,
    VFS_TOTAL)}

#: Metrics of one device: {metric name: value}.
Metrics = dict[str, Number]


def clean(metrics: Any) -> Metrics:
    """The known metrics of ``metrics`` with acceptable values, as their
    metric's number type; anything else is dropped."""
    if not isinstance(metrics, dict):
        return {}
    found: Metrics = {}
    for name, value in metrics.items():
        metric = METRICS.get(name)
        if metric is None or not metric.accepts(value):
            continue
        found[name] = metric.kind(value)
    return found


def clean_report(report: Any) -> dict[str, Metrics]:
    """``{device address: metrics}`` with every device's metrics
    cleaned; devices left without a metric are dropped."""
    if not isinstance(report, dict):
        return {}
    found = {}
    for address, metrics in report.items():
        cleaned = clean(metrics)
        if isinstance(address, str) and cleaned:
            found[address] = cleaned
    return found


def vf_usage(drivers: list[str | None],
             passthrough_drivers: frozenset[str] | set[str]) -> Metrics:
    """``vfs_total``, ``vfs_in_use`` and ``vfs_host`` of a physical
    function whose virtual functions are bound to ``drivers`` (None:
    unbound, which is free)."""
    in_use = sum(1 for d in drivers if d is not None
                 and d in passthrough_drivers)
    host = sum(1 for d in drivers if d is not None
               and d not in passthrough_drivers)
    return {VFS_TOTAL.name: len(drivers), VFS_IN_USE.name: in_use,
            VFS_HOST.name: host}


def stored_form(metrics: Metrics, reported_at: datetime.datetime) -> str:
    """The text a device row keeps: its metrics and the time of the
    report that carried them last (UTC, ISO 8601 with ``Z``)."""
    when = reported_at.replace(tzinfo=None).isoformat(timespec='seconds')
    return json.dumps({'metrics': metrics, 'reported_at': when + 'Z'},
                      sort_keys=True, separators=(',', ':'))


def from_stored(text: str | None, checked: bool = True
                ) -> dict[str, Any] | None:
    """``{"metrics": ..., "reported_at": ...}`` of a row's text; None
    when there is none (or it cannot be read).

    ``checked=False`` trusts the values (the conductor wrote them
    :func:`clean`), keeping only known metrics whose values are numbers:
    the fleet metrics read every device's text at each scrape.
    """
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(
            value.get('metrics'), dict):
        return None
    if checked:
        metrics = clean(value['metrics'])
    else:
        metrics = {name: number for name, number in value['metrics'].items()
                   if name in METRICS and type(number) in (int, float)}
    return {'metrics': metrics, 'reported_at': value.get('reported_at')}


def changes(rows: dict[str, tuple[str | None, str | None]],
            reported: dict[str, Metrics], failed_drivers: list[str],
            reported_at: datetime.datetime) -> dict[str, str | None]:
    """What to write for a host's report: ``{address: stored text or
    None}`` of the devices whose stored utilization it changes.

    ``rows`` is ``{address: (driver, stored text)}`` of the host's
    devices. A device the report measured gets its metrics with the
    report's time, unchanged metrics too: ``reported_at`` says how fresh
    the reading is, so it is the latest report's. (The conductor writes
    them all with one statement per report, as it did for a changed
    reading; only a text equal to the stored one, a second report within
    the same second, is not written again.) One it did not measure loses
    what it had, unless its driver failed this time (its devices are
    kept as last reported, with that report's time).
    """
    failed = set(failed_drivers)
    found: dict[str, str | None] = {}
    for address, (driver, text) in rows.items():
        metrics = reported.get(address)
        if metrics:
            new = stored_form(metrics, reported_at)
            if new != text:
                found[address] = new
        elif text is not None and driver not in failed:
            found[address] = None
    return found
