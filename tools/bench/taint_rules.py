#!/usr/bin/env python3
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

"""Benchmark: a dry-run device taint rule over a large fleet, on
PostgreSQL.

1. Generation (not measured): metrics_scrape.py's fleet, ``--hosts``
   agents of ``--devices`` GPUs each with ``--bound`` Bound ARQs.
2. Measurement, through the API application in process (noauth, the
   conductor's manager called in place of RPC; JSON rendering
   included): ``--requests`` times each of

   * ``POST /v2/device_taint_rules`` of a dry run (effect ``None``)
     selecting every device (``host: compute-*``), its answer the rule's
     status (the rule is deleted after each, not measured);
   * ``GET /v2/device_taint_rules/{uuid}`` of such a rule;
   * the same two for a dry run selecting one host's devices.

   Prints p50/p99/max wall milliseconds, statements per request, the
   devices and ARQs each status lists, and the target (p99 < 200 ms for
   the fleet-wide dry run).

    .venv/bin/python tools/bench/taint_rules.py [--hosts 1000]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from unittest import mock
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from oslo_utils import timeutils  # noqa: E402
import sqlalchemy as sa  # noqa: E402
import webob  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.api import app as api_app  # noqa: E402
from cyborg.conductor import manager as conductor_manager  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import migration  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import metrics_scrape  # noqa: E402

PATH = '/v2/device_taint_rules'
HEADERS = {'OpenStack-API-Version': 'accelerator 2.8'}
TARGET_P99_MS = 200.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _request(app, method: str, path: str, body=None):
    request = webob.Request.blank(path, method=method,
                                  headers=dict(HEADERS))
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    response = request.get_response(app)
    if response.status_int >= 300:
        raise SystemExit('%s %s: %s %s' % (method, path, response.status,
                                           response.text))
    return response.json


def _timed(counter, call) -> tuple[tuple[float, int, float], dict]:
    """(wall ms, statements, CPU ms of this process) of ``call``, and
    its answer."""
    statements = counter.count
    begun, own = time.perf_counter(), cpu.own_cpu()
    answer = call()
    return ((time.perf_counter() - begun) * 1000,
            counter.count - statements,
            (cpu.own_cpu() - own) * 1000), answer


def measure(app, manager, counter, selector: dict, requests: int,
            pg_pids: list[int]) -> dict[str, list]:
    """Wall ms and statements of each POST and GET of a dry run of
    ``selector``; the size of its status."""
    body = {'name': 'bench', 'selector': selector,
            'taint': {'key': 'bench.dry-run', 'effect': 'None'}}
    results: dict[str, list] = {'POST': [], 'GET': [], 'size': [],
                                'pg': []}
    context = cyborg_context.get_admin_context()
    pg = cpu.process_cpu(pg_pids)
    for _ in range(requests):
        timing, rule = _timed(
            counter, lambda: _request(app, 'POST', PATH, body))
        results['POST'].append(timing)
        path = PATH + '/' + rule['uuid']
        timing, shown = _timed(
            counter, lambda path=path: _request(app, 'GET', path))
        results['GET'].append(timing)
        status = shown['device_taint_rule']['status']
        results['size'] = [len(status['devices']), len(status['arqs']),
                           len(status['instances']), len(status['projects'])]
        manager.taint_rule_delete(context, rule['uuid'])
    # PostgreSQL's CPU per request (deletions included: an upper bound).
    results['pg'] = [(cpu.process_cpu(pg_pids) - pg) * 1000
                     / max(2 * requests, 1)]
    return results


def report(name: str, results: dict[str, list]) -> float:
    devices, arqs, instances, projects = results['size']
    print('%s: its status lists %d devices, %d ARQs, %d instances, %d '
          'projects' % (name, devices, arqs, instances, projects))
    print('  %-6s %8s %8s %8s %8s %11s %13s' % (
        'wall ms', 'p50', 'p99', 'max', 'mean', 'statements',
        'API CPU p50'))
    p99 = 0.0
    for method in ('POST', 'GET'):
        walls = [wall for wall, _, _ in results[method]]
        statements = statistics.mean(s for _, s, _ in results[method])
        own = statistics.median(c for _, _, c in results[method])
        print('  %-7s %8.1f %8.1f %8.1f %8.1f %11.1f %13.1f' % (
            method, statistics.median(walls), _percentile(walls, 0.99),
            max(walls), statistics.mean(walls), statements, own))
        p99 = max(p99, _percentile(walls, 0.99))
    print('  PostgreSQL CPU ms per request (mean, at most): %.1f'
          % results['pg'][0])
    return p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8,
                        help='GPUs per host (8)')
    parser.add_argument('--bound', type=int, default=4000,
                        help='Bound ARQs, one GPU each (4000)')
    parser.add_argument('--requests', type=int, default=50,
                        help='POSTs and GETs of each rule (50)')
    args = parser.parse_args()
    if args.bound > args.hosts * args.devices:
        parser.error('--bound is more than the GPUs')
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-taint-rules-')
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        url = pg.create_database('cyborg')
        CONF([], project='cyborg', default_config_files=[])
        CONF.set_override('connection', url, group='database')
        CONF.set_override('auth_strategy', 'noauth', group='api')
        db_api.configure(CONF)
        migration.upgrade()
        engine = db_api.get_engine()
        begun = time.perf_counter()
        count = metrics_scrape.insert(engine, metrics_scrape.fleet_rows(
            args.hosts, args.devices, args.bound, 0, 0, 0,
            timeutils.utcnow()))
        with engine.begin() as connection:
            connection.execute(sa.text('ANALYZE'))
        print('generated %d rows in %.1f s (not measured): %d hosts x %d '
              'GPUs, %d Bound ARQs; PostgreSQL, %d CPUs' % (
                  count, time.perf_counter() - begun, args.hosts,
                  args.devices, args.bound, os.cpu_count()))
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
        manager = conductor_manager.ConductorManager('bench')
        with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                        return_value=manager):
            app = api_app.setup_app(CONF, transport=object())
        counter = metrics_scrape.StatementCounter(engine)
        pg_pids = cpu.pids_with(pg.data_dir)
        measure(app, manager, counter, {'host': 'compute-*'}, 3,
                pg_pids)  # warm up
        print('load average before: %.1f %.1f %.1f' % os.getloadavg())
        fleet = report('dry run over every host (host: compute-*)',
                       measure(app, manager, counter,
                               {'host': 'compute-*'}, args.requests,
                               pg_pids))
        report('dry run over one host (host: compute-00001)',
               measure(app, manager, counter, {'host': 'compute-00001'},
                       args.requests, pg_pids))
        print('load average after: %.1f %.1f %.1f' % os.getloadavg())
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
        print('fleet-wide dry run p99 %.1f ms: %s (target < %.0f ms)' % (
            fleet, 'met' if fleet < TARGET_P99_MS else 'NOT met',
            TARGET_P99_MS))
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
