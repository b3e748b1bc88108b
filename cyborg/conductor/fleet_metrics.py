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

"""The fleet metrics: what the database says of every host, device and
accelerator request, as Prometheus gauges of the conductor's /metrics.

Any conductor answers for the whole fleet. A computation reads the
database with a bounded number of statements
(:func:`cyborg.db.fleet_metrics.fleet_snapshot`), and its result
answers every scrape for ``[metrics] fleet_cache_seconds`` after it
starts, so several Prometheus servers (or a scrape and a person with
curl) cost one computation. Scrapes that arrive while a computation is
under way wait for it and share its result.
"""

from collections.abc import Callable
from collections.abc import Iterable
import contextlib
import datetime
import gc
import threading
import time

from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import timeutils
from prometheus_client import core
from prometheus_client import registry
from prometheus_client import samples

from cyborg.db import fleet_metrics as fleet_db
from cyborg.domain import arq_states
from cyborg.domain import bind_errors
from cyborg.domain import devices
from cyborg.domain import utilization

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024

# Each metric an agent reports (cyborg.domain.utilization), as the
# family it goes to, its label value there and the factor to its unit.
RATIO, MEMORY, VFS = 'ratio', 'memory', 'vfs'
READINGS: dict[str, tuple[str, str, float]] = {
    utilization.GPU_PERCENT.name: (RATIO, 'gpu', 0.01),
    utilization.MEMORY_USED_MIB.name: (MEMORY, 'used', MIB),
    utilization.MEMORY_TOTAL_MIB.name: (MEMORY, 'total', MIB),
    utilization.VFS_TOTAL.name: (VFS, 'total', 1),
    utilization.VFS_IN_USE.name: (VFS, 'in_use', 1),
    utilization.VFS_HOST.name: (VFS, 'host', 1),
}

# name: (help, label names) of every family; cyborg_bound_arqs_by_project
# only with [metrics] project_label.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    'cyborg_devices': (
        'Devices by host, driver, vendor, model, type, health and status.',
        ('host', 'driver', 'vendor', 'model', 'type', 'health', 'status')),
    'cyborg_deployable_accelerators': (
        'Accelerators of each deployable: total, allocated (held by an '
        'accelerator request) and free (neither allocated nor on a '
        'device that is disabled, unhealthy or missing).',
        ('host', 'device', 'deployable', 'resource_class', 'state')),
    'cyborg_arqs': (
        'Accelerator requests per state (BindFailing included: a failed '
        'bind Nova has not acted on yet).', ('state',)),
    'cyborg_arq_bind_failures': (
        'Accelerator requests whose bind failed, per state and class of '
        'error.', ('state', 'reason')),
    'cyborg_bound_arqs': (
        'Bound accelerator requests per resource class.',
        ('resource_class',)),
    'cyborg_bound_arqs_by_project': (
        'Bound accelerator requests per project and resource class.',
        ('project', 'resource_class')),
    'cyborg_device_utilization_ratio': (
        'Busy fraction of a device\'s compute units (0 to 1), as its '
        'agent last reported.', ('host', 'device', 'metric')),
    'cyborg_device_memory_bytes': (
        'Device memory used and in all, as its agent last reported.',
        ('host', 'device', 'kind')),
    'cyborg_device_vfs': (
        'Virtual functions of a device: enabled, in use by instances, in '
        'use by the host, as its agent last reported.',
        ('host', 'device', 'kind')),
    'cyborg_device_utilization_age_seconds': (
        'Seconds since the agent reported the device\'s utilization.',
        ('host', 'device')),
    'cyborg_agent_last_report_age_seconds': (
        'Seconds since a host\'s agent was last heard from.', ('host',)),
    'cyborg_nova_event_outbox_depth': (
        'Nova external events not sent yet.', ()),
    'cyborg_nova_event_outbox_oldest_age_seconds': (
        'Age of the oldest Nova event due and not sent (0: none).', ()),
    'cyborg_placement_sync_pending_hosts': (
        'Hosts whose changes Placement has not seen yet.', ()),
    'cyborg_fleet_scrape_duration_seconds': (
        'Seconds the conductor took to compute these fleet metrics.', ()),
}

_UTILIZATION_FAMILIES = {
    RATIO: 'cyborg_device_utilization_ratio',
    MEMORY: 'cyborg_device_memory_bytes',
    VFS: 'cyborg_device_vfs',
}


def _families(names: Iterable[str]) -> dict[str, core.GaugeMetricFamily]:
    return {name: core.GaugeMetricFamily(name, FAMILIES[name][0],
                                         labels=FAMILIES[name][1])
            for name in names}


def _age(now: datetime.datetime, then: datetime.datetime) -> float:
    # Never negative: conductors' clocks may differ by a little.
    return max((now - then).total_seconds(), 0.0)


def _reported_at(text) -> datetime.datetime | None:
    """A stored ``reported_at`` (UTC ISO 8601 with ``Z``) as a naive
    UTC datetime; None if it cannot be read."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.removesuffix('Z'))
    except ValueError:
        return None


@contextlib.contextmanager
def _cycle_collector_paused():
    """Python's cycle collector off for the ``with`` body (if it was
    on).

    Reading the fleet and building its families make tens of thousands
    of objects on a large fleet (rows, samples, their labels), none of
    them in a cycle, and each few hundred of them start a collection;
    the full ones walk every object of the process, which on 8,000
    devices took more time than building the families did.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class FleetCollector(registry.Collector):
    """The fleet metrics of the database ``context_factory()`` reaches.

    ``clock`` (monotonic seconds) times the cache; ``utcnow`` (naive
    UTC) the ages reported.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 context_factory: Callable[[], object],
                 clock: Callable[[], float] = time.monotonic,
                 utcnow: Callable[[], datetime.datetime] = timeutils.utcnow):
        self._cache_seconds = conf.metrics.fleet_cache_seconds
        self._by_project = conf.metrics.project_label
        self._context_factory = context_factory
        self._clock = clock
        self._utcnow = utcnow
        self._lock = threading.Lock()
        self._families: list[core.Metric] | None = None
        self._started = 0.0

    def names(self) -> list[str]:
        """The families this collector reports."""
        return [name for name in FAMILIES if self._by_project
                or name != 'cyborg_bound_arqs_by_project']

    def describe(self) -> list[core.Metric]:
        """The families, without samples: registering the collector costs
        no computation."""
        return list(_families(self.names()).values())

    def collect(self) -> list[core.Metric]:
        arrived = self._clock()
        with self._lock:
            # A computation started after this scrape arrived is as fresh
            # as one of its own (it waited for it under the lock).
            if self._families is None or (
                    self._started < arrived
                    and arrived - self._started >= self._cache_seconds):
                self._started = self._clock()
                self._families = self._compute()
            return self._families or []

    def _compute(self) -> list[core.Metric] | None:
        begun = time.perf_counter()
        with _cycle_collector_paused():
            try:
                snapshot = fleet_db.fleet_snapshot(
                    self._context_factory(), by_project=self._by_project)
            except Exception:
                # The process metrics of the same /metrics still answer;
                # the next scrape tries again.
                LOG.exception('Could not read the fleet metrics from the '
                              'database')
                return None
            families = self.build(snapshot, self._utcnow())
        families['cyborg_fleet_scrape_duration_seconds'].add_metric(
            [], time.perf_counter() - begun)
        return list(families.values())

    def build(self, snapshot: fleet_db.FleetSnapshot,
              now: datetime.datetime) -> dict[str, core.GaugeMetricFamily]:
        """The families of ``snapshot``, ages as of ``now`` (the scrape
        duration left without a sample)."""
        families = _families(self.names())
        device_counts = families['cyborg_devices']
        for *labels, count in snapshot.devices:
            device_counts.add_metric([value or '' for value in labels],
                                     count)
        bound = self._deployables(
            families['cyborg_deployable_accelerators'], snapshot)
        for rc, count in sorted(bound.items()):
            families['cyborg_bound_arqs'].add_metric([rc], count)
        if self._by_project:
            by_project = families['cyborg_bound_arqs_by_project']
            for project, rc, count in snapshot.bound:
                by_project.add_metric([project or '', rc or ''], count)
        self._arqs(families, snapshot)
        self._utilization(families, snapshot, now)
        agents = families['cyborg_agent_last_report_age_seconds']
        pending = 0
        for host, seen, requested, done in snapshot.agents:
            if seen is not None:
                agents.add_metric([host], _age(now, seen))
            pending += requested > done
        families['cyborg_placement_sync_pending_hosts'].add_metric(
            [], pending)
        families['cyborg_nova_event_outbox_depth'].add_metric(
            [], snapshot.outbox_depth)
        families['cyborg_nova_event_outbox_oldest_age_seconds'].add_metric(
            [], 0.0 if snapshot.outbox_oldest is None
            else _age(now, snapshot.outbox_oldest))
        return families

    @staticmethod
    def _deployables(family: core.GaugeMetricFamily,
                     snapshot: fleet_db.FleetSnapshot) -> dict[str, int]:
        """Total, allocated and free per deployable; the Bound ARQs per
        resource class (0 for a class no Bound ARQ holds).

        Free accelerators are those a new request could get: none on a
        device the scheduler is not offered (disabled, unhealthy or
        missing) or of a deployable only retained for its ARQ.
        """
        # The hot loops (a series or more per deployable and device) make
        # their samples themselves: add_metric costs three times as much.
        name, append = family.name, family.samples.append
        bound: dict[str, int] = {}
        for (host, address, deployable, rc, total, held, held_bound, status,
             health, missing, retained) in snapshot.deployables:
            rc = rc or ''
            bound[rc] = bound.get(rc, 0) + held_bound
            offered = (not retained
                       and devices.is_schedulable(status, health, missing))
            free = max(total - held, 0) if offered else 0
            for state, value in (('total', total), ('allocated', held),
                                 ('free', free)):
                append(samples.Sample(name, {
                    'host': host, 'device': address,
                    'deployable': deployable, 'resource_class': rc,
                    'state': state}, value))
        return bound

    @staticmethod
    def _arqs(families, snapshot: fleet_db.FleetSnapshot) -> None:
        per_state = dict.fromkeys(arq_states.ALL, 0)
        failures: dict[tuple[str, str], int] = {}
        for state, bind_error, count in snapshot.arqs:
            per_state[state] = per_state.get(state, 0) + count
            if state in arq_states.FAILED:
                key = (state, bind_errors.reason_class(bind_error))
                failures[key] = failures.get(key, 0) + count
        for state, count in per_state.items():
            families['cyborg_arqs'].add_metric([state], count)
        for labels, count in sorted(failures.items()):
            families['cyborg_arq_bind_failures'].add_metric(labels, count)

    @staticmethod
    def _utilization(families, snapshot: fleet_db.FleetSnapshot,
                     now: datetime.datetime) -> None:
        # metric: its family, the family's label that tells readings
        # apart (the last), the label's value, the factor to its unit.
        readings = {}
        for metric, (kind, label, factor) in READINGS.items():
            family = families[_UTILIZATION_FAMILIES[kind]]
            readings[metric] = (family, FAMILIES[family.name][1][-1], label,
                                factor)
        ages = families['cyborg_device_utilization_age_seconds']
        for host, address, text in snapshot.utilization:
            stored = utilization.from_stored(text)
            if stored is None:
                continue
            for metric, value in stored['metrics'].items():
                family, kind_label, label, factor = readings[metric]
                family.samples.append(samples.Sample(family.name, {
                    'host': host, 'device': address, kind_label: label},
                    value * factor))
            reported_at = _reported_at(stored['reported_at'])
            if reported_at is not None:
                ages.samples.append(samples.Sample(ages.name, {
                    'host': host, 'device': address},
                    _age(now, reported_at)))
