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

"""Benchmark: what per-project limits add to an ARQ creation.

The conductor's ``arq_create`` called in process (no API, no RPC)
against a private PostgreSQL or MariaDB server, with ``[quota] driver``
off (``noop``) and on (``unified_limits``, limits from oslo.limit's
LimitFixture: cached limits, as a conductor has them between reads),
interleaved in batches on the same database; each creation is deleted
again so that the project's usage stays what it was (``--held`` ARQs).
Prints p50/p95/p99 of each and what enforcement adds.

    .venv/bin/python tools/bench/quota_enforcement.py [--creations 2000]
        [--db postgresql|mysql] [--held 100] [--clients 1]
"""

import argparse
import os
import sys
import threading
import time
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from oslo_limit import fixture as limit_fixture  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.conductor import manager as conductor_manager  # noqa: E402
from cyborg.conductor import quotas  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import device_profiles as profiles_db  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import models  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402

DATABASES = {'postgresql': servers.PostgreSQLServer,
             'mysql': servers.MariaDBServer}
PROJECT = 'bench-project'
BATCH = 50


def percentile(values, fraction) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(fraction * len(values)))]


class _DBConf:
    def __init__(self, url):
        self.database = {'connection': url, 'max_pool_size': 20}


def _run(conductor, context, count: int, clients: int,
         times: list[float]) -> None:
    """``count`` creations (each deleted again) by ``clients`` threads."""
    def client(share: int) -> None:
        for _ in range(share):
            started = time.perf_counter()
            created = conductor.arq_create(context, 'fpga')
            times.append(time.perf_counter() - started)
            _delete([arq['uuid'] for arq in created])
    threads = [threading.Thread(target=client, args=(count // clients,))
               for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _delete(uuids: list[str]) -> None:
    """Remove the rows at once (not the API's delete: not measured)."""
    with db_api.get_engine().begin() as connection:
        connection.execute(sa.delete(models.ARQS).where(
            models.ARQS.c.uuid.in_(uuids)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--creations', type=int, default=2000)
    parser.add_argument('--db', choices=sorted(DATABASES),
                        default='postgresql')
    parser.add_argument('--held', type=int, default=100,
                        help='ARQs the project holds throughout (100)')
    parser.add_argument('--clients', type=int, default=1)
    args = parser.parse_args()
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('endpoint_id', 'bench', group='oslo_limit')
    fixture = limit_fixture.LimitFixture(
        {'accelerator_requests': 10 ** 6, 'class:FPGA': 10 ** 6},
        {PROJECT: {'class:FPGA': 10 ** 6}})
    fixture.setUp()
    print('load average before: %s' % ' '.join(
        '%.2f' % v for v in os.getloadavg()))
    with DATABASES[args.db]() as server:
        db_api.configure(_DBConf(server.create_database('quota_bench')))
        migration.upgrade()
        admin = cyborg_context.get_admin_context()
        profiles_db.device_profile_create(admin, {
            'name': 'fpga', 'groups': [{'resources:FPGA': '1'}]})
        profiles_db.device_profile_create(admin, {
            'name': 'held', 'groups': [{'resources:FPGA': str(args.held)}]})
        context = cyborg_context.RequestContext(
            roles=['member'], project_id=PROJECT, user_id='u')
        CONF.set_override('driver', 'unified_limits', group='quota')
        modes = {'off': conductor_manager.ConductorManager('c1'),
                 'on': conductor_manager.ConductorManager(
                     'c1', quotas=quotas.from_conf(CONF))}
        modes['on'].arq_create(context, 'held')
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        # Warm-up: statement caches, the limits read once.
        for conductor in modes.values():
            _run(conductor, context, BATCH, 1, [])
        done = 0
        while done < args.creations:
            for mode, conductor in modes.items():
                _run(conductor, context, BATCH, args.clients, times[mode])
            done += BATCH
        print('%d creations each, %s, project holding %d ARQs, %d '
              'client(s); ms:' % (args.creations, args.db, args.held,
                                  args.clients))
        print('  %-4s %7s %7s %7s' % ('', 'p50', 'p95', 'p99'))
        result = {}
        for mode in modes:
            values = [v * 1000 for v in times[mode]]
            result[mode] = [percentile(values, f) for f in (.5, .95, .99)]
            print('  %-4s %7.2f %7.2f %7.2f' % (mode, *result[mode]))
        print('enforcement adds: p50 %+.2f ms, p99 %+.2f ms' % (
            result['on'][0] - result['off'][0],
            result['on'][2] - result['off'][2]))
    fixture.cleanUp()
    print('load average after: %s' % ' '.join(
        '%.2f' % v for v in os.getloadavg()))
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
