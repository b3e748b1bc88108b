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

The result is the text exposition itself (and its gzip form), written
here rather than by prometheus_client: a fleet of thousands of devices
has tens of thousands of series, and building a sample object per
series and formatting it again per scrape cost several times the
database reads. ``tests/unit/conductor/test_fleet_metrics.py`` reads
the text back with prometheus_client's own parser.
"""

from collections.abc import Callable
import contextlib
import datetime
import gc
import gzip
import itertools
import math
import operator
import threading
import time

from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import timeutils
from prometheus_client import utils as prometheus_utils

from cyborg.db import fleet_metrics as fleet_db
from cyborg.domain import arq_states
from cyborg.domain import bind_errors
from cyborg.domain import devices
from cyborg.domain import partitions
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
    'cyborg_accelerators': (
        'Accelerators of a host\'s deployables per resource class: total, '
        'allocated (held by an accelerator request) and free (neither '
        'allocated nor on a device that is disabled, unhealthy or '
        'missing).',
        ('host', 'resource_class', 'state')),
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
    'cyborg_device_partitions': (
        'Partitions of a partitioned device (a MIG GPU in homogeneous '
        'mode) of the profile it serves: in use and still creatable, as '
        'its agent last reported.', ('host', 'device', 'profile', 'kind')),
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


def _escape(value) -> str:
    """A label value as the text format writes it."""
    value = '' if value is None else str(value)
    if '\\' in value or '"' in value or '\n' in value:
        value = value.replace('\\', '\\\\').replace(
            '"', '\\"').replace('\n', '\\n')
    return value


def _number(value) -> str:
    if type(value) is int:
        return str(value)
    if math.isfinite(value):
        # What the text format's parsers read (Go's ParseFloat).
        return repr(value)
    return prometheus_utils.floatToGoString(value)


def _line_format(name: str) -> str:
    """The %-format of a series of the family ``name``: its label
    values (escaped), then its value."""
    labels = FAMILIES[name][1]
    if not labels:
        return name + ' %s\n'
    return '%s{%s} %%s\n' % (name, ','.join('%s="%%s"' % label
                                            for label in labels))


#: The %-format of each family's series, made once.
_LINE_FORMATS = {name: _line_format(name) for name in FAMILIES}

#: The series of cyborg_accelerators of each state (total, allocated,
#: free): a host and a resource class, then the value.
_ACCELERATOR_LINES = tuple(
    _LINE_FORMATS['cyborg_accelerators'] % ('%s', '%s', state, '%s')
    for state in ('total', 'allocated', 'free'))


class _Escaped(dict):
    """Label values escaped as the text format writes them, each worked
    out once: host names recur in every family."""

    def __missing__(self, value) -> str:
        escaped = self[value] = _escape(value)
        return escaped


class Exposition:
    """The families of :data:`FAMILIES` named, their lines added in any
    order, written family by family (as the text format wants)."""

    def __init__(self, names: list[str]):
        self.lines: dict[str, list[str]] = {name: [] for name in names}
        self._escaped = _Escaped()

    def escape(self, value) -> str:
        """``value`` escaped as a label value (remembered)."""
        return self._escaped[value]

    def add(self, name: str, labels: tuple | list = (), value=0) -> None:
        """A series of ``name`` with the values of its label names in
        ``labels`` (in the order of :data:`FAMILIES`)."""
        if len(labels) != len(FAMILIES[name][1]):
            raise ValueError('%s has labels %s, not %r' % (
                name, FAMILIES[name][1], labels))
        self.lines[name].append(_LINE_FORMATS[name] % (
            *map(self._escaped.__getitem__, labels), _number(value)))

    def add_rows(self, name: str, rows) -> None:
        """A series of ``name`` per row of ``rows``: the values of its
        label names, then its value (as :meth:`add`, without its check:
        for families of a series per host or device)."""
        line = _LINE_FORMATS[name]
        escaped = self._escaped.__getitem__
        append = self.lines[name].append
        for *labels, value in rows:
            append(line % (*map(escaped, labels), _number(value)))

    def text(self) -> str:
        parts = []
        for name, lines in self.lines.items():
            help_text = FAMILIES[name][0].replace(
                '\\', '\\\\').replace('\n', '\\n')
            parts.append('# HELP %s %s\n# TYPE %s gauge\n' % (
                name, help_text, name))
            parts.extend(lines)
        return ''.join(parts)


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


class FleetCollector:
    """The fleet metrics of the database ``context_factory()`` reaches,
    as text for a ``/metrics`` listener
    (:class:`cyborg.common.metrics.TextSource`).

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
        self._exposition: tuple[bytes, bytes] | None = None
        self._started = 0.0
        # The lines of each device's utilization, by its row (host,
        # address, stored text), as the last computation made them.
        self._readings: dict[tuple, tuple] = {}

    def names(self) -> list[str]:
        """The families this collector reports."""
        return [name for name in FAMILIES if self._by_project
                or name != 'cyborg_bound_arqs_by_project']

    def exposition(self) -> tuple[bytes, bytes]:
        """The text of the fleet metrics and its gzip form (both empty
        when the database could not be read)."""
        arrived = self._clock()
        with self._lock:
            # A computation started after this scrape arrived is as fresh
            # as one of its own (it waited for it under the lock).
            if self._exposition is None or (
                    self._started < arrived
                    and arrived - self._started >= self._cache_seconds):
                self._started = self._clock()
                self._exposition = self._compute()
            return self._exposition

    def _compute(self) -> tuple[bytes, bytes]:
        begun = time.perf_counter()
        with _cycle_collector_paused():
            try:
                snapshot = fleet_db.fleet_snapshot(
                    self._context_factory(), by_project=self._by_project)
            except Exception:
                # The process metrics of the same /metrics still answer;
                # the next scrape tries again (nothing is cached).
                LOG.exception('Could not read the fleet metrics from the '
                              'database')
                self._started = 0.0
                return b'', b''
            families = self.build(snapshot, self._utcnow())
            families.add('cyborg_fleet_scrape_duration_seconds', (),
                         time.perf_counter() - begun)
            text = families.text().encode()
            # Level 1: ten to one on this text, at a fraction of the
            # default level's time; made once, sent by every scrape.
            return text, gzip.compress(text, compresslevel=1, mtime=0)

    def build(self, snapshot: fleet_db.FleetSnapshot,
              now: datetime.datetime) -> Exposition:
        """The families of ``snapshot``, ages as of ``now`` (the scrape
        duration left without a sample)."""
        families = Exposition(self.names())
        families.add_rows('cyborg_devices', snapshot.devices)
        bound = self._accelerators(families, snapshot)
        for rc, count in sorted(bound.items()):
            families.add('cyborg_bound_arqs', (rc,), count)
        if self._by_project:
            families.add_rows('cyborg_bound_arqs_by_project', snapshot.bound)
        self._arqs(families, snapshot)
        self._utilization(families, snapshot, now)
        for host, address, text in snapshot.partitions:
            reported = partitions.from_stored(text)
            if reported is not None:
                for kind in ('in_use', 'creatable'):
                    families.add('cyborg_device_partitions',
                                 (host, address, reported['profile'] or '',
                                  kind), reported[kind])
        pending = 0
        seen_ages = []
        for host, seen, requested, done in snapshot.agents:
            if seen is not None:
                seen_ages.append((host, _age(now, seen)))
            pending += requested > done
        families.add_rows('cyborg_agent_last_report_age_seconds', seen_ages)
        families.add('cyborg_placement_sync_pending_hosts', (), pending)
        families.add('cyborg_nova_event_outbox_depth', (),
                     snapshot.outbox_depth)
        families.add('cyborg_nova_event_outbox_oldest_age_seconds', (),
                     0.0 if snapshot.outbox_oldest is None
                     else _age(now, snapshot.outbox_oldest))
        return families

    @staticmethod
    def _accelerators(families: Exposition,
                      snapshot: fleet_db.FleetSnapshot) -> dict[str, int]:
        """Total, allocated and free per host and resource class; the
        Bound ARQs per resource class (0 for a class no Bound ARQ holds).

        Free accelerators are those a new request could get: none on a
        device the scheduler is not offered (disabled, unhealthy or
        missing) or of a deployable only retained for its ARQ.
        """
        # (host, rc): [total, allocated, free]
        per_host: dict[tuple[str, str], list[int]] = {}
        bound: dict[str, int] = {}
        # The rule depends on a few values a fleet shares: asked once
        # per combination, not once per row.
        offered: dict[tuple, bool] = {}
        for (host, rc, status, health, missing, retained, total, held,
             held_bound, unheld) in snapshot.deployables:
            rc = rc or ''
            bound[rc] = bound.get(rc, 0) + int(held_bound)
            state = (status, health, missing, retained)
            if state not in offered:
                offered[state] = (not retained and devices.is_schedulable(
                    status, health, missing))
            counts = per_host.get((host, rc))
            if counts is None:
                counts = per_host[host, rc] = [0, 0, 0]
            counts[0] += int(total)
            counts[1] += int(held)
            if offered[state]:
                counts[2] += int(unheld)
        total, allocated, free = _ACCELERATOR_LINES
        escaped = families.escape
        lines = families.lines['cyborg_accelerators']
        for (host, rc), (in_all, held, unheld) in sorted(per_host.items()):
            labels = (escaped(host), escaped(rc))
            lines.append(total % (*labels, in_all))
            lines.append(allocated % (*labels, held))
            lines.append(free % (*labels, unheld))
        return bound

    @staticmethod
    def _arqs(families: Exposition,
              snapshot: fleet_db.FleetSnapshot) -> None:
        per_state = dict.fromkeys(arq_states.ALL, 0)
        failures: dict[tuple[str, str], int] = {}
        for state, bind_error, count in snapshot.arqs:
            per_state[state] = per_state.get(state, 0) + count
            if state in arq_states.FAILED:
                key = (state, bind_errors.reason_class(bind_error))
                failures[key] = failures.get(key, 0) + count
        for state, count in per_state.items():
            families.add('cyborg_arqs', (state,), count)
        for labels, count in sorted(failures.items()):
            families.add('cyborg_arq_bind_failures', labels, count)

    def _utilization(self, families: Exposition,
                     snapshot: fleet_db.FleetSnapshot,
                     now: datetime.datetime) -> None:
        """A series per reading of each device, and the reading's age.

        A device's lines are made from its stored text once and kept
        while the text stays the same: the text changes only when the
        device's agent reports (every ``[agent] discovery_interval``),
        and Prometheus scrapes more often than that. Only the ages are
        worked out again (once per report time: the devices of a host
        share their report's). The devices whose text did not change
        cost no Python code of their own: their kept lines are looked
        up and joined by the interpreter's built-ins (map, join), a
        family's lines of every device in one piece of text.
        """
        rows = snapshot.utilization
        entries = list(map(self._readings.get, rows))
        for index in [index for index, entry in enumerate(entries)
                      if entry is None]:
            entries[index] = _device_lines(*rows[index])
        self._readings = dict(zip(rows, entries, strict=True))
        # Those with a reading (an unreadable text's entry is empty).
        entries = list(filter(None, entries))
        for position, name in enumerate(_UTILIZATION_FAMILIES.values()):
            families.lines[name].append(
                ''.join(map(operator.itemgetter(position), entries)))
        whens = list(map(_WHEN, entries))
        age_of = {when: _age_text(now, when) for when in set(whens)}
        ages = list(map(age_of.__getitem__, whens))
        families.lines['cyborg_device_utilization_age_seconds'].append(
            ''.join(map('%s%s\n'.__mod__, itertools.compress(
                zip(map(_AGE_SERIES, entries), ages, strict=True),
                ages))))


#: A device's kept reading (:func:`_device_lines`): its lines of each
#: family of _UTILIZATION_FAMILIES (in its order), the start of its age's
#: series, and its report time.
_WHEN = operator.itemgetter(4)
_AGE_SERIES = operator.itemgetter(3)

#: Each metric of READINGS as the position of its family in
#: _UTILIZATION_FAMILIES, the format of its series (the device's labels,
#: then the value) and the factor to its unit.
_READING_SERIES = {
    metric: (list(_UTILIZATION_FAMILIES).index(kind),
             '%s{%%s,%s="%s"} %%s\n' % (
                 _UTILIZATION_FAMILIES[kind],
                 FAMILIES[_UTILIZATION_FAMILIES[kind]][1][-1], label),
             factor)
    for metric, (kind, label, factor) in READINGS.items()}


def _age_text(now: datetime.datetime, when: str | None) -> str | None:
    """The age series' value of a reading reported at ``when`` (None
    without a readable time: no age series)."""
    reported_at = _reported_at(when)
    return None if reported_at is None else _number(_age(now, reported_at))


def _device_lines(host: str, address: str, text: str | None) -> tuple:
    """What a device's stored utilization text makes
    (:data:`_WHEN`); empty without a readable one."""
    stored = utilization.from_stored(text, checked=False)
    if stored is None:
        return ()
    device = 'host="%s",device="%s"' % (_escape(host), _escape(address))
    lines = ['', '', '']
    for metric, value in stored['metrics'].items():
        position, series, factor = _READING_SERIES[metric]
        lines[position] += series % (device, _number(value * factor))
    when = stored['reported_at']
    return (*lines, 'cyborg_device_utilization_age_seconds{%s} ' % device,
            when if isinstance(when, str) else None)
