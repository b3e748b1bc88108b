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

"""Benchmark: Nova's device profile lookup, GET /v2/device_profiles?name=X.

Starts a private PostgreSQL, migrates a database, creates one profile,
serves cyborg.wsgi.api:application with gunicorn (2 sync workers) and
drives it with wrk at 1 and 8 concurrent connections. Prints requests per
second, p50/p99 latency and the CPU milliseconds the API processes (and,
separately, PostgreSQL) spent per request.

Runs twice: with the default name cache ([api] device_profile_cache_ttl)
and with it disabled, so both paths are measured.

    .venv/bin/python tools/bench/device_profile_get.py [--duration 20]

Needs wrk (apt-get install wrk) and the test requirements (gunicorn).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402

PROFILE_NAME = 'bench-gpu'
CONFIG = """\
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:1/
[database]
connection = {db_url}
max_pool_size = 4
[api]
auth_strategy = noauth
device_profile_cache_ttl = {ttl}
[oslo_policy]
enforce_new_defaults = true
"""


def parse_wrk(output: str) -> dict:
    def latency_ms(label):
        match = re.search(r'^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$' % label,
                          output, re.M)
        value, unit = float(match.group(1)), match.group(2)
        return value * {'us': 0.001, 'ms': 1.0, 's': 1000.0}[unit]

    requests = int(re.search(r'(\d+) requests in', output).group(1))
    errors = re.search(r'Non-2xx or 3xx responses: (\d+)', output)
    return {
        'rps': float(re.search(r'Requests/sec:\s+([\d.]+)', output).group(1)),
        'requests': requests,
        'p50': latency_ms('50'),
        'p99': latency_ms('99'),
        'errors': int(errors.group(1)) if errors else 0,
    }


def run_wrk(url: str, connections: int, duration: int) -> dict:
    output = subprocess.run(
        ['wrk', '-t', str(min(connections, 2)), '-c', str(connections),
         '-d', '%ds' % duration, '--latency', url],
        check=True, capture_output=True, text=True).stdout
    return parse_wrk(output)


def serve(workdir: str, db_url: str, ttl: float, port: int):
    conf_file = os.path.join(workdir, 'cyborg-%s.conf' % ttl)
    with open(conf_file, 'w') as f:
        f.write(CONFIG.format(db_url=db_url, ttl=ttl))
    env = dict(os.environ, CYBORG_CONFIG_FILES=conf_file,
               PYTHONWARNINGS='ignore')
    log = os.path.join(workdir, 'gunicorn-%s.log' % ttl)
    gunicorn = servers.venv_script('gunicorn')
    process = servers.spawn(
        [gunicorn, '--workers', '2', '--bind', '127.0.0.1:%d' % port,
         '--log-level', 'warning', 'cyborg.wsgi.api:application'],
        log, env=env)
    url = 'http://127.0.0.1:%d/v2/device_profiles?name=%s' % (
        port, PROFILE_NAME)
    servers.wait_for(lambda: urllib.request.urlopen(url, timeout=2),
                     60, 'gunicorn', process=process, log=log)
    return process, url


def create_profile(workdir: str, db_url: str) -> None:
    conf_file = os.path.join(workdir, 'setup.conf')
    with open(conf_file, 'w') as f:
        f.write(CONFIG.format(db_url=db_url, ttl=0))
    subprocess.run([servers.venv_script('cyborg-dbsync'), '--config-file',
                    conf_file, 'upgrade'], check=True, capture_output=True)
    code = ('import sys; from cyborg.common import config; '
            'from cyborg.conf import CONF; from cyborg.db import api; '
            'from cyborg.db import device_profiles; '
            'from cyborg import context; '
            'config.parse_args(["x", "--config-file", sys.argv[1]]); '
            'api.configure(CONF); device_profiles.device_profile_create('
            'context.get_admin_context(), {"name": "%s", "groups": '
            '[{"resources:PGPU": "1", "trait:CUSTOM_GPU_A": "required"}]})'
            % PROFILE_NAME)
    subprocess.run([sys.executable, '-W', 'ignore', '-c', code, conf_file],
                   check=True)


def measure(url, server_pids, pg_pids, connections, duration) -> dict:
    run_wrk(url, connections, 2)  # warm up connections and caches
    api_before = cpu.process_cpu(server_pids)
    pg_before = cpu.process_cpu(pg_pids)
    result = run_wrk(url, connections, duration)
    result['api_cpu_ms'] = ((cpu.process_cpu(server_pids) - api_before) * 1000
                            / max(result['requests'], 1))
    result['pg_cpu_ms'] = ((cpu.process_cpu(pg_pids) - pg_before) * 1000
                           / max(result['requests'], 1))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--duration', type=int, default=20,
                        help='seconds per measurement (20)')
    parser.add_argument('--clients', default='1,8',
                        help='concurrent connections to measure (1,8)')
    args = parser.parse_args()
    if shutil.which('wrk') is None:
        sys.exit('wrk is needed: apt-get install wrk')

    workdir = tempfile.mkdtemp(prefix='cyborg-bench-')
    print('GET /v2/device_profiles?name=X, gunicorn 2 workers, PostgreSQL, '
          '%ds per run, %d CPUs' % (args.duration, os.cpu_count()))
    print('%-14s %7s %10s %9s %9s %12s %11s %7s' % (
        'cache', 'clients', 'req/s', 'p50 ms', 'p99 ms', 'API CPU ms',
        'PG CPU ms', 'errors'))
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        db_url = pg.create_database('bench')
        create_profile(workdir, db_url)
        pg_pids = cpu.pids_with(pg.data_dir)
        for ttl, label in ((2.0, 'on (ttl 2s)'), (0, 'off')):
            process, url = serve(workdir, db_url, ttl, servers.free_port())
            try:
                for clients in (int(c) for c in args.clients.split(',')):
                    r = measure(url, [process.pid], pg_pids, clients,
                                args.duration)
                    print('%-14s %7d %10.0f %9.2f %9.2f %12.3f %11.3f %7d' % (
                        label, clients, r['rps'], r['p50'], r['p99'],
                        r['api_cpu_ms'], r['pg_cpu_ms'], r['errors']),
                        flush=True)
            finally:
                servers.kill_group(process)
            time.sleep(1)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
