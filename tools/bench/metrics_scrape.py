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

"""Benchmark: the conductor's fleet metrics scrape on PostgreSQL.

1. Generation (not measured): a migrated PostgreSQL database with
   ``--hosts`` agents of ``--devices`` GPUs each (one deployable of one
   accelerator, its resource class attribute, its attach handle, and a
   utilization reading on ``--readings`` of them, all by default),
   ``--bound`` Bound ARQs holding one handle each, a few failed binds
   and unsent Nova events, inserted with one multi-row statement per
   table and batch.
2. Measurement: ``--scrapes`` scrapes of the fleet metrics collector
   with its cache off (``[metrics] fleet_cache_seconds = 0``), each the
   collector's computation (``exposition``: the database reads, the
   text and its gzip form) and the answer of the conductor's /metrics
   WSGI application to a GET as Prometheus sends it (gzip accepted:
   the process metrics and the computed text), timed apart: p50/p99
   wall milliseconds of each and of the whole scrape, CPU milliseconds
   of each (and of PostgreSQL), database statements, series and bytes
   per scrape.

    .venv/bin/python tools/bench/metrics_scrape.py [--hosts 1000]
"""

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from oslo_utils import timeutils  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.common import metrics  # noqa: E402
from cyborg.conductor import fleet_metrics  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import models  # noqa: E402
from cyborg.domain import arq_states  # noqa: E402
from cyborg.domain import bind_errors  # noqa: E402
from cyborg.domain import providers  # noqa: E402
from cyborg.domain import utilization  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402

RC = 'PGPU'
BATCH = 2000


def fleet_rows(hosts: int, devices: int, bound: int, failed: int,
               events: int, readings: int, now: datetime.datetime
               ) -> dict[str, list]:
    """Rows of every table, ids given (parents before children); the
    last ``readings`` devices have a utilization reading (the first
    ``bound`` are bound)."""
    rows: dict[str, list] = {name: [] for name in (
        'services', 'devices', 'controlpath_ids', 'deployables',
        'attributes', 'attach_handles', 'device_profiles',
        'extended_accelerator_requests', 'nova_events')}
    rows['services'].append(dict(
        id=1, host='conductor', binary='cyborg-conductor', last_seen_up=now))
    rows['device_profiles'].append(dict(
        id=1, uuid=str(uuid.uuid4()), name='bench-gpu',
        profile_json='{"groups": [{"resources:PGPU": "1"}]}'))
    number = 0
    for host_index in range(hosts):
        host = 'compute-%05d' % host_index
        rows['services'].append(dict(
            id=host_index + 2, host=host, binary='cyborg-agent',
            last_seen_up=now - datetime.timedelta(seconds=host_index % 60),
            sync_requested=1, sync_done=1 if host_index % 100 else 0))
        for index in range(devices):
            number += 1
            address = '0000:%02x:00.0' % (0x10 + index)
            reading = None
            if number > hosts * devices - readings:
                reading = utilization.stored_form(
                    {'gpu_percent': float(number % 101),
                     'memory_used_mib': number % 16384,
                     'memory_total_mib': 16384},
                    now - datetime.timedelta(seconds=number % 30))
            rows['devices'].append(dict(
                id=number, uuid=str(uuid.uuid4()), type='GPU',
                vendor='0x10de', model='Tesla T4', hostname=host,
                address=address, driver='nvidia_gpu', status='enabled',
                health='healthy' if number % 500 else 'unhealthy',
                utilization=reading))
            rows['controlpath_ids'].append(dict(
                id=number, uuid=str(uuid.uuid4()), device_id=number,
                cpid_type='PCI', cpid_info='"%s"' % address))
            rows['deployables'].append(dict(
                id=number, uuid=str(uuid.uuid4()),
                name=address.replace(':', '_').replace('.', '_'),
                num_accelerators=1, device_id=number,
                rp_uuid=providers.provider_uuid(host, address, 'gpu'),
                driver_name='nvidia_gpu'))
            rows['attributes'].append(dict(
                id=number, uuid=str(uuid.uuid4()), deployable_id=number,
                key=providers.RESOURCE_CLASS_KEY, value=RC))
            rows['attach_handles'].append(dict(
                id=number, uuid=str(uuid.uuid4()), deployable_id=number,
                cpid_id=number, in_use=number <= bound, attach_type='PCI',
                attach_info='"%s"' % address))
    for index in range(bound + failed):
        arq = dict(id=index + 1, uuid=str(uuid.uuid4()),
                   project_id='project-%d' % (index % 50),
                   device_profile_id=1, device_profile_group_id=0,
                   state=arq_states.BOUND, instance_uuid=str(uuid.uuid4()),
                   hostname=None, attach_handle_id=None, deployable_id=None,
                   bind_error=None)
        if index < bound:
            handle = index + 1
            arq.update(hostname=rows['devices'][index]['hostname'],
                       attach_handle_id=handle, deployable_id=handle)
        else:
            arq.update(state=arq_states.BIND_FAILED,
                       bind_error=bind_errors.timed_out(300))
        rows['extended_accelerator_requests'].append(arq)
    for index in range(events):
        rows['nova_events'].append(dict(
            id=index + 1, arq_uuid=str(uuid.uuid4()),
            instance_uuid=str(uuid.uuid4()), status='completed',
            attempts=0, next_attempt_at=now,
            created_at=now - datetime.timedelta(seconds=index)))
    return rows


def insert(engine, rows: dict[str, list]) -> int:
    """Insert ``rows`` (parents first); the number of rows."""
    tables = models.Base.metadata.tables
    count = 0
    with engine.begin() as connection:
        for name, values in rows.items():
            for start in range(0, len(values), BATCH):
                # One multi-row INSERT per batch (SQLAlchemy's
                # insertmanyvalues on psycopg2).
                connection.execute(tables[name].insert(),
                                   values[start:start + BATCH])
            count += len(values)
    return count


class StatementCounter:
    def __init__(self, engine):
        self.count = 0
        sa.event.listen(engine, 'before_cursor_execute', self._count)

    def _count(self, *_args):
        self.count += 1


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


class _Computed:
    """The text one computation made, served alone (as a
    :class:`cyborg.common.metrics.TextSource`)."""

    def __init__(self):
        self.result = (b'', b'')

    def exposition(self):
        return self.result


def _line(name: str, values: list[float]) -> str:
    return '%-28s %8.1f %8.1f %8.1f' % (
        name, statistics.median(values), _percentile(values, 0.99),
        statistics.mean(values))


def _report(engine, scrape: int, changed: float) -> None:
    """New readings, as agents would report them, on ``changed`` of the
    devices (one in every 1/changed, in turn): not measured."""
    step = max(1, round(1 / changed))
    text = utilization.stored_form(
        {utilization.GPU_PERCENT.name: float(scrape % 100),
         utilization.MEMORY_USED_MIB.name: scrape,
         utilization.MEMORY_TOTAL_MIB.name: 16384},
        timeutils.utcnow())
    with engine.begin() as connection:
        connection.execute(
            models.DEVICES.update()
            .where(models.DEVICES.c.id % step == scrape % step)
            .values(utilization=text))


def _get(app) -> bytes:
    """The answer of the /metrics WSGI ``app`` to a GET as Prometheus
    sends it (gzip accepted)."""
    environ = {'REQUEST_METHOD': 'GET', 'PATH_INFO': '/metrics',
               'HTTP_ACCEPT_ENCODING': 'gzip'}
    return b''.join(app(environ, lambda status, headers: None))


def measure(args, collector, engine, pg_pids: list[int]) -> None:
    """Scrapes as the conductor's /metrics answers them: the collector's
    computation (database reads, text, gzip), then the answer of the
    listener's WSGI application (process metrics and the computed
    text), timed apart."""
    computed = _Computed()
    app = metrics.wsgi_app([computed])
    counter = StatementCounter(engine)
    for _ in range(args.warmup):
        computed.result = collector.exposition()
        _get(app)
    wall: dict[str, list[float]] = {'compute': [], 'serve': [],
                                    'scrape': []}
    cpu_ms = {'compute': 0.0, 'serve': 0.0}
    statements = 0
    pg = cpu.process_cpu(pg_pids)
    for scrape in range(args.scrapes):
        if args.changed:
            _report(engine, scrape, args.changed)
        before = counter.count
        begun, own = time.perf_counter(), cpu.own_cpu()
        computed.result = collector.exposition()
        computed_at, own_computed = time.perf_counter(), cpu.own_cpu()
        body = _get(app)
        ended, own_ended = time.perf_counter(), cpu.own_cpu()
        statements += counter.count - before
        wall['compute'].append((computed_at - begun) * 1000)
        wall['serve'].append((ended - computed_at) * 1000)
        wall['scrape'].append((ended - begun) * 1000)
        cpu_ms['compute'] += (own_computed - own) * 1000
        cpu_ms['serve'] += (own_ended - own_computed) * 1000
    pg = cpu.process_cpu(pg_pids) - pg
    text = computed.result[0]
    series = sum(1 for line in text.splitlines()
                 if line and not line.startswith(b'#'))
    print('%-28s %8s %8s %8s' % ('wall ms per scrape', 'p50', 'p99', 'mean'))
    print(_line('computation (DB+text+gzip)', wall['compute']))
    print(_line('answer (process + fleet)', wall['serve']))
    print(_line('whole scrape', wall['scrape']))
    print('CPU ms per scrape: computation %.1f (PostgreSQL %.1f), answer '
          '%.1f' % (cpu_ms['compute'] / args.scrapes,
                    pg * 1000 / args.scrapes,
                    cpu_ms['serve'] / args.scrapes))
    print('statements per scrape: %.1f' % (
        statements / args.scrapes))
    print('fleet series per scrape: %d; fleet text: %d bytes, %d gzipped; '
          'answer sent: %d bytes' % (series, len(text),
                                     len(computed.result[1]), len(body)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8,
                        help='GPUs per host (8)')
    parser.add_argument('--bound', type=int, default=4000,
                        help='Bound ARQs, one accelerator each (4000)')
    parser.add_argument('--failed', type=int, default=100,
                        help='BindFailed ARQs (100)')
    parser.add_argument('--events', type=int, default=50,
                        help='unsent Nova events (50)')
    parser.add_argument('--readings', type=int,
                        help='devices with a utilization reading (default: '
                        'all; a GPU passed through to an instance has '
                        'none)')
    parser.add_argument('--changed', type=float, default=0.25,
                        help='share of the devices whose reading changes '
                        'before each scrape (0.25: agents reporting every '
                        '60 s, the default [agent] discovery_interval, '
                        'scraped every 15 s)')
    parser.add_argument('--scrapes', type=int, default=100)
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--project-label', action='store_true',
                        help='with [metrics] project_label')
    args = parser.parse_args()
    if args.bound > args.hosts * args.devices:
        parser.error('--bound is more than the accelerators')
    if args.readings is None:
        args.readings = args.hosts * args.devices
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-metrics-')
    try:
        run(args, workdir)
    finally:
        # The server's data directory, left behind otherwise.
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def run(args, workdir: str) -> None:
    """Generate the fleet in a PostgreSQL server of ``workdir``, then
    measure."""
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        url = pg.create_database('cyborg')
        CONF([], project='cyborg', default_config_files=[])
        CONF.set_override('connection', url, group='database')
        CONF.set_override('fleet_cache_seconds', 0, group='metrics')
        CONF.set_override('project_label', args.project_label,
                          group='metrics')
        db_api.configure(CONF)
        migration.upgrade()
        engine = db_api.get_engine()
        begun = time.perf_counter()
        count = insert(engine, fleet_rows(
            args.hosts, args.devices, args.bound, args.failed, args.events,
            args.readings, timeutils.utcnow()))
        with engine.begin() as connection:
            connection.execute(sa.text('ANALYZE'))
        print('generated %d rows in %.1f s (not measured): %d hosts x %d '
              'GPUs (%d with a utilization reading), %d Bound ARQs, %d '
              'BindFailed, %d unsent events' % (
                  count, time.perf_counter() - begun, args.hosts,
                  args.devices, args.readings, args.bound, args.failed,
                  args.events))
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
        collector = fleet_metrics.FleetCollector(
            CONF, cyborg_context.get_admin_context)
        measure(args, collector, engine, cpu.pids_with(pg.data_dir))
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
