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

"""Benchmark: Nova's per-instance accelerator cycle, end to end.

Against the multi-process deployment: cyborg-api under uWSGI as devstack
runs it (or gunicorn when uWSGI is not installed; 2 workers of 4 threads,
keep-alive either way), one cyborg-conductor, fake-driver
cyborg-agents, RabbitMQ, PostgreSQL or MariaDB (``--db postgresql|mysql``),
a real Placement, and a fake Nova
receiving the external events over HTTP. Each client repeats Nova's
cycle for one instance:

    GET /v2/device_profiles?name=X      (scheduling)
    POST /v2/accelerator_requests       (conductor: create ARQs)
    PATCH /v2/accelerator_requests      (compute: bind; 202)
    ... wait for accelerator-request-bound ...
    GET /v2/accelerator_requests?instance=I&bind_state=resolved
    DELETE /v2/accelerator_requests?instance=I

Prints cycles per second, p50/p95/p99 per call, bind-to-event latency
(PATCH sent to event received) and server CPU per cycle (API, conductor
and agents; the database and Placement separately).

    .venv/bin/python tools/bench/nova_cycle.py [--duration 20] [--clients 1,8]
        [--db postgresql|mysql|galera|sqlite-all-in-one]
        [--service cyborg|upstream|both [--rounds 2]] [--compare-root DIR]
        [--notifications]

``--db galera`` runs a three-node MariaDB Galera cluster and two
conductors writing through different nodes (the API reads through
node 0, conductor 0 writes through node 0, conductor 1 through node 1),
and prints, besides the cycle's numbers, the failed cycles and the
transactions certification rolled back (and the services retried) per
1,000 cycles.

``--service upstream`` measures upstream OpenStack Cyborg (from
``.venv-upstream``: ``tools/bench/upstream-venv.sh``) on the same kind of
deployment, ``both`` measures ours and upstream's on the same servers,
interleaved, and prints the ratio of their cycles per second.
``--compare-root DIR`` adds another build of ours (the checkout DIR, run
from DIR/.venv; e.g. the main branch) as "baseline", interleaved with
this one the same way, for before/after comparisons on the same servers.
``--notifications`` adds a deployment of this build named "notify" with
``[notifications] driver = messagingv2`` on the benchmark's RabbitMQ (its
own virtual host), interleaved with the others the same way: its cycles/s
against ours without notifications is the cost of sending them. Their
consumer runs elsewhere in a deployment: here nothing consumes them
(RabbitMQ queues them) unless ``--notifications-consumer`` adds a
notification listener in this process that counts them (its CPU then
competes with the services').
``--quotas`` adds a deployment of this build named "quotas" with
``[quota] driver = unified_limits``, its limits in a real Keystone the
benchmark starts (registered limits of ``accelerator_requests`` and
``class:FPGA``, and a limit of the project every request is made in,
all far above what the run uses), interleaved with the others the same
way: its cycles/s and its create p99 against ours without quotas are
the cost of enforcing them.
``--tolerations`` adds a deployment of this build named "tolerations"
whose profile's group tolerates taints (``toleration:bench.drain:
Exists``, ``toleration:bench.zone: Equal:a``) and whose every host is
tainted ``NoSchedule`` by taint rules: compute-0 ``bench.drain``,
compute-1 ``bench.zone=a``, the others ``bench.zone=b`` and
``bench.maint``, so that each profile read by name adds forbidden traits
(the active keys and values the group does not tolerate). The run
starts once Nova's read shows them. The fake Nova binds without
Placement, so every device still takes requests: its cycles/s against
ours is the cost of taints and tolerations in profile reads.
"""

import argparse
import configparser
import contextlib
import dataclasses
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any
import urllib.parse
import urllib.request
import uuid as uuid_lib
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from oslo_config import cfg  # noqa: E402
import oslo_messaging as messaging  # noqa: E402
import requests  # noqa: E402
import sqlalchemy  # noqa: E402

from cyborg.allinone import embedded_placement  # noqa: E402
from tests.functional import fake_nova as fake_nova_lib  # noqa: E402
from tests.functional import keystone as keystone_server  # noqa: E402
from tests.functional import placement as placement_server  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import db_counters  # noqa: E402
from tools.bench import upstream as upstream_lib  # noqa: E402

PROFILE = 'bench-fpga'
SERVICE = {'X-Service-Roles': 'service'}
SERVICES = ('cyborg', 'upstream', 'both')
CALLS = ('get_profile', 'create', 'bind', 'get_resolved', 'delete')
# --db: the database server, and its name in the output.
ALL_IN_ONE = 'sqlite-all-in-one'
GALERA = 'galera'
DATABASES = {'postgresql': (servers.PostgreSQLServer, 'PostgreSQL'),
             'mysql': (servers.MariaDBServer, 'MariaDB')}


def percentile(values, fraction) -> float:
    values = sorted(values)
    if not values:
        return float('nan')
    return values[min(len(values) - 1, int(fraction * len(values)))]


class Deployment:
    """Every process of the benchmark, started and stopped together.

    ``venv``: the virtualenv whose installed cyborg runs (by default the
    running one); another build of ours (``--compare-root``), or this one
    with notifications (``notifications``), gets a ``name`` of its own,
    which names its database, RabbitMQ virtual host, hosts and working
    directory.
    """

    # Sent with every request (noauth: none needed).
    headers: dict[str, str] = {}

    def __init__(self, workdir: str, agents: int, api_workers: int,
                 api_threads: int, api_server: str, name: str = 'cyborg',
                 venv: str | None = None, notifications: bool = False,
                 consumer: bool = False,
                 sections: dict[str, dict] | None = None,
                 tolerations: bool = False):
        self.name = name
        # --tolerations: a tolerating profile and tainted hosts.
        self.tolerations = tolerations
        # More configuration sections (--quotas: [quota], [oslo_limit]
        # and the project of [api]).
        self.sections = sections or {}
        self.venv = venv
        self.notifications = notifications
        self.consumer = consumer
        self.listener: NotificationCounter | None = None
        if name != 'cyborg':
            workdir = os.path.join(workdir, name)
            os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.agents = agents
        self.deployables = agents * 4
        self.api_workers = api_workers
        self.api_threads = api_threads
        self.api_server = api_server
        self.processes: list[servers.CyborgProcess] = []

    def start(self, pg, rabbit, placement, nova) -> None:
        self.db_url = pg.create_database(self.name)
        transport_url = (rabbit.url if self.name == 'cyborg'
                         else rabbit.create_vhost(self.name))
        base = {'DEFAULT': {'transport_url': transport_url,
                            'heartbeat_interval': 10,
                            'periodic_interval': 10},
                'database': {'connection': self.db_url,
                             'max_pool_size': 10},
                'placement': {'auth_type': 'admin_token',
                              'endpoint': placement.url, 'token': 'admin',
                              'endpoint_override': placement.url},
                'nova': {'auth_type': 'admin_token', 'endpoint': nova.url,
                         'token': 'admin', 'endpoint_override': nova.url},
                'api': {'auth_strategy': 'noauth'}}
        for group, values in self.sections.items():
            base[group] = dict(base.get(group, {}), **values)
        if self.notifications:
            base['notifications'] = {'driver': 'messagingv2'}
            if self.consumer:
                self.listener = NotificationCounter(transport_url)
        config = servers.write_config(
            os.path.join(self.workdir, 'cyborg.conf'), base)
        if self.venv is None:
            servers.run_script('cyborg-dbsync', 'upgrade',
                               config_file=config)
        else:
            servers.run_logged([upstream_lib.venv_script(
                'cyborg-dbsync', self.venv), '--config-file', config,
                'upgrade'], os.path.join(self.workdir, 'dbsync.log'),
                '%s cyborg-dbsync upgrade' % self.name)
        prefix = 'bench' if self.name == 'cyborg' else self.name
        self._spawn('cyborg-conductor', dict(base, DEFAULT=dict(
            base['DEFAULT'], host=prefix + '-conductor')))
        self.processes[-1].wait_log('Started cyborg-conductor')
        client = placement.client()
        for index in range(self.agents):
            host = '%s-compute-%d' % (prefix, index)
            embedded_placement.ensure_compute_node(client, host)
            self._spawn('cyborg-agent', dict(
                base, DEFAULT=dict(base['DEFAULT'], host=host),
                agent={'resource_provider_name': host,
                       'discovery_interval': 60},
                fake_driver={'num_devices': 4, 'handle_type': 'PCI',
                             'accelerators_per_device': 32}),
                name='agent-%d' % index)
        self.api_port = servers.free_port()
        env = dict(os.environ, CYBORG_CONFIG_FILES=config,
                   PYTHONWARNINGS='ignore')
        log = os.path.join(self.workdir, '%s.log' % self.api_server)
        self.api = servers.spawn(self._api_argv(), log, env=env,
                                 cwd=self.workdir)
        self.url = 'http://127.0.0.1:%d/v2' % self.api_port
        servers.wait_for(lambda: urllib.request.urlopen(self.url, timeout=2),
                         60, 'cyborg-api', self.api, log)

    def _api_argv(self) -> list[str]:
        """The WSGI server's command line; for another build, in its
        virtualenv (uWSGI's ``--virtualenv``, or its own gunicorn), from
        its working directory (never this checkout's ``cyborg``)."""
        argv = servers.wsgi_argv(
            self.api_server, 'cyborg.wsgi.api:application', self.api_port,
            self.api_workers, self.api_threads,
            chdir=self.workdir if self.venv else None)
        if self.venv is not None:
            if self.api_server == 'uwsgi':
                argv[argv.index('--virtualenv') + 1] = self.venv
            else:
                argv[0] = upstream_lib.venv_script('gunicorn', self.venv)
        return argv

    def _spawn(self, script, config, name=None):
        if self.venv is None:
            process = servers.CyborgProcess(script, config, self.workdir,
                                            name=name)
        else:
            process = upstream_lib.UpstreamProcess(
                script, config, self.workdir, name=name, venv=self.venv)
        self.processes.append(process.start())

    def server_pids(self) -> list[int]:
        return [self.api.pid] + [p.process.pid for p in self.processes]

    def pids_by_role(self) -> dict[str, list[int]]:
        roles = {'api': [self.api.pid], 'conductor': [], 'agents': []}
        for process in self.processes:
            role = ('conductor' if process.script == 'cyborg-conductor'
                    else 'agents')
            roles[role].append(process.process.pid)
        return roles

    def stop(self) -> None:
        if getattr(self, 'api', None) is not None:
            servers.kill_group(self.api)
        for process in self.processes:
            process.stop()
        if self.listener is not None:
            self.listener.stop()


class NotificationCounter:
    """A notification listener on ``url`` that counts what it hears (as
    a consumer of the notifications would drain their queues)."""

    def __init__(self, url: str):
        conf = cfg.ConfigOpts()
        conf([], project='cyborg-bench')
        self._transport = messaging.get_notification_transport(conf, url=url)
        self.heard = 0
        self._lock = threading.Lock()
        self._server = messaging.get_notification_listener(
            self._transport,
            [messaging.Target(topic='versioned_notifications')], [self],
            executor='threading')
        self._server.start()

    def _count(self, *args) -> None:
        with self._lock:
            self.heard += 1

    info = error = _count

    def stop(self) -> None:
        self._server.stop()
        self._server.wait()
        self._transport.cleanup()


class AllInOne:
    """``cyborg-all-in-one`` on SQLite (API, conductor and agent in one
    process, embedded Placement) sending its events to the fake Nova:
    the same fake devices as :class:`Deployment`'s ``agents`` agents."""

    name = 'cyborg'
    headers: dict[str, str] = {}

    def __init__(self, workdir: str, agents: int):
        self.workdir = workdir
        self.agents = agents
        self.deployables = agents * 4
        self.process: servers.CyborgProcess | None = None

    def start(self, nova) -> None:
        state = os.path.join(self.workdir, 'state')
        self.db_url = 'sqlite:///%s' % os.path.join(state, 'cyborg.sqlite')
        port = servers.free_port()
        self.process = servers.CyborgProcess('cyborg-all-in-one', {
            'DEFAULT': {'host': 'bench-allinone'},
            'fake_driver': {'num_devices': 4 * self.agents,
                            'handle_type': 'PCI',
                            'accelerators_per_device': 32},
            'nova': {'auth_type': 'admin_token', 'endpoint': nova.url,
                     'token': 'admin', 'endpoint_override': nova.url},
        }, self.workdir, args=['--host', '127.0.0.1', '--port', str(port),
                               '--placement-port', '0', '--state-dir',
                               state]).start()
        self.process.wait_log('Cyborg all-in-one is running.', 120)
        self.url = 'http://127.0.0.1:%d/v2' % port

    def server_pids(self) -> list[int]:
        return [self.process.process.pid]

    def pids_by_role(self) -> dict[str, list[int]]:
        return {'all-in-one': self.server_pids()}

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

class Client(threading.Thread):
    """One Nova: repeats the cycle over plain http.client (the load
    generator shares the machine, so it should cost as little CPU as
    possible), on one connection while the server keeps it open (gunicorn's
    sync workers close every connection; gthread workers keep it)."""

    def __init__(self, url, nova, rps, deadline, results, errors,
                 headers=None):
        super().__init__(daemon=True)
        self.headers = headers or {}
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port, self.prefix = (parsed.hostname, parsed.port,
                                             parsed.path)
        self.nova, self.rps = nova, rps
        self.deadline, self.results, self.errors = deadline, results, errors
        self.connection: http.client.HTTPConnection | None = None

    def call(self, name, method, path, expected, json_body=None,
             headers=None):
        """The decoded JSON answer (None if empty)."""
        payload = None if json_body is None else json.dumps(json_body)
        sent = dict(self.headers, **(headers or {}))
        sent['Accept'] = 'application/json'
        if payload is not None:
            sent['Content-Type'] = 'application/json'
        started = time.monotonic()
        connection = self.connection or http.client.HTTPConnection(
            self.host, self.port, timeout=30)
        self.connection = None
        try:
            connection.request(method, self.prefix + path, payload, sent)
            response = connection.getresponse()
            body = response.read()
        except BaseException:
            connection.close()
            raise
        if response.will_close:  # e.g. gunicorn's sync workers
            connection.close()
        else:
            self.connection = connection
        self.results[name].append(time.monotonic() - started)
        if response.status != expected:
            raise RuntimeError('%s: %s %s' % (name, response.status,
                                              body[:200]))
        return json.loads(body) if body else None

    def cycle(self, index):
        instance = str(uuid_lib.uuid4())
        self.call('get_profile', 'GET', '/device_profiles?name=' + PROFILE,
                  200)
        arqs = self.call('create', 'POST', '/accelerator_requests', 201,
                         {'device_profile_name': PROFILE})['arqs']
        rp, host = self.rps[index % len(self.rps)]
        patch = {arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
            for arq in arqs}
        sent = time.monotonic()
        self.call('bind', 'PATCH', '/accelerator_requests', 202, patch,
                  SERVICE)
        arrived = self.nova.wait_tags([a['uuid'] for a in arqs], 30)
        self.results['bind_to_event'].append(max(arrived.values()) - sent)
        resolved = self.call(
            'get_resolved', 'GET', '/accelerator_requests?instance=%s'
            '&bind_state=resolved' % instance, 200)['arqs']
        if {a['state'] for a in resolved} != {'Bound'}:
            raise RuntimeError('not bound: %s' % resolved)
        self.call('delete', 'DELETE',
                  '/accelerator_requests?instance=' + instance, 204,
                  headers=SERVICE)

    def run(self):
        index = 0
        while time.monotonic() < self.deadline:
            try:
                self.cycle(index)
                self.results['cycles'].append(1)
            except Exception as e:  # counted and printed, not fatal
                self.errors.append(str(e))
            index += 1


def measure(deployment, nova, rps, clients, duration, pg_pids,
            placement_pids, rabbit_pids, db_label='PostgreSQL',
            label=None, db=None, counts: bool | None = None
            ) -> dict[str, float]:
    """Run ``clients`` clients for ``duration`` seconds and print the
    results; returns cycles/s, errors and bind-to-event p50/p99 (ms).

    ``counts``: print what the cycles cost database server ``db`` (its
    own counters; see db_counters); by default on MariaDB only (reading
    PostgreSQL's waits for its statistics, seconds after each run).
    """
    if counts is None:
        counts = db_counters.kind(db) == 'mysql'
    results = {name: [] for name in CALLS + ('bind_to_event', 'cycles')}
    errors: list[str] = []
    used = cpu.process_cpu
    server, pg, plc = (used(deployment.server_pids()), used(pg_pids),
                       used(placement_pids))
    rabbit, own = used(rabbit_pids), cpu.own_cpu()
    nova_posts = len(nova.requests)
    listener = getattr(deployment, 'listener', None)
    heard = listener.heard if listener is not None else 0
    roles = {role: used(pids)
             for role, pids in deployment.pids_by_role().items()}
    database = getattr(deployment, 'name', 'cyborg')
    counters = db_counters.snapshot(db, database) if counts else None
    started = time.monotonic()
    threads = [Client(deployment.url, nova, rps[i::clients] or rps,
                      started + duration, results, errors,
                      deployment.headers)
               for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    cycles = max(len(results['cycles']), 1)
    print('\n%sconcurrency %d: %d cycles in %.1fs = %.1f cycles/s, '
          '%d errors' % ('%s, ' % label if label else '', clients,
                         len(results['cycles']), elapsed,
                         len(results['cycles']) / elapsed, len(errors)))
    for error in errors[:3]:
        print('  error:', error)
    print('  %-14s %8s %8s %8s' % ('ms', 'p50', 'p95', 'p99'))
    for name in CALLS + ('bind_to_event',):
        values = [v * 1000 for v in results[name]]
        print('  %-14s %8.1f %8.1f %8.1f' % (
            name, percentile(values, .5), percentile(values, .95),
            percentile(values, .99)))
    service_ms = (used(deployment.server_pids()) - server) * 1000 / cycles
    db_ms = (used(pg_pids) - pg) * 1000 / cycles
    print('  CPU ms per cycle: cyborg %.1f, %s %.1f, Placement %.1f'
          % (service_ms, db_label, db_ms,
             (used(placement_pids) - plc) * 1000 / cycles))
    role_ms = {role: (used(pids) - roles[role]) * 1000 / cycles
               for role, pids in deployment.pids_by_role().items()}
    print('  cyborg CPU ms per cycle by process: %s' % ', '.join(
        '%s %.1f' % item for item in role_ms.items()))
    print('  other CPU ms per cycle: RabbitMQ %.1f, benchmark clients and '
          'fake Nova %.1f' % (
              (used(rabbit_pids) - rabbit) * 1000 / cycles,
              (cpu.own_cpu() - own) * 1000 / cycles))
    print('  Nova event requests per cycle: %.2f'
          % ((len(nova.requests) - nova_posts) / cycles), flush=True)
    if listener is not None:
        print('  notifications heard per cycle: %.2f'
              % ((listener.heard - heard) / cycles), flush=True)
    db_per_cycle = {}
    if counters is not None:
        db_counters.settle(db)
        db_per_cycle = db_counters.per_cycle(
            counters, db_counters.snapshot(db, database), cycles)
        print('  %s per cycle: %s' % (
            db_label, db_counters.describe(db_per_cycle)), flush=True)
    events = [v * 1000 for v in results['bind_to_event']]
    return {'cycles_per_s': len(results['cycles']) / elapsed,
            'errors': len(errors), 'event_p50': percentile(events, .5),
            'event_p99': percentile(events, .99), 'service_ms': service_ms,
            'db_ms': db_ms, 'role_ms': role_ms, 'db_commands': db_per_cycle,
            'create_p99': percentile([v * 1000 for v in results['create']],
                                     .99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--duration', type=int, default=20)
    parser.add_argument('--clients', default='1,8')
    parser.add_argument('--agents', type=int, default=3)
    parser.add_argument('--api-workers', type=int, default=2,
                        help='API worker processes (2)')
    parser.add_argument('--api-threads', type=int, default=4,
                        help='threads per API worker (4, keep-alive); 0: '
                        'single-threaded workers (under gunicorn: sync '
                        'workers, one connection per request)')
    parser.add_argument('--api-server', choices=servers.WSGI_SERVERS,
                        default=servers.default_wsgi_server(),
                        help='WSGI server of cyborg-api (uwsgi, as devstack '
                        'deploys it, when installed: pip install uwsgi; '
                        'else gunicorn)')
    parser.add_argument('--db', choices=sorted(DATABASES) + [GALERA,
                                                             ALL_IN_ONE],
                        default='postgresql',
                        help='cyborg\'s database: a private PostgreSQL '
                        '(default) or MariaDB server; galera: a three-node '
                        'MariaDB Galera cluster, two conductors writing '
                        'through different nodes; sqlite-all-in-one: '
                        'cyborg-all-in-one on SQLite instead of the '
                        'multi-process deployment')
    parser.add_argument('--service', choices=SERVICES, default='cyborg',
                        help='what to measure: cyborg (ours, default), '
                        'upstream (openstack-cyborg from .venv-upstream: '
                        'tools/bench/upstream-venv.sh), or both on the same '
                        'servers, interleaved (ours, upstream, upstream, '
                        'ours, ...), with a summary and the ratio')
    parser.add_argument('--rounds', type=int, default=1,
                        help='with --service both or --compare-root: '
                        'measurements of each deployment per concurrency, '
                        'interleaved (1)')
    parser.add_argument('--warmup', type=int, default=5,
                        help='with --service both or --compare-root: '
                        'seconds of an unrecorded run of each deployment '
                        'before the measured ones (5; 0: none)')
    parser.add_argument('--compare-root', metavar='DIR',
                        help='also measure another build of ours, the '
                        'checkout DIR with its virtualenv DIR/.venv (e.g. '
                        'the main branch), named "baseline", interleaved '
                        'with this one on the same servers')
    parser.add_argument('--notifications', action='store_true',
                        help='also measure this build with [notifications] '
                        'driver = messagingv2 (named "notify"), interleaved '
                        'with the others on the same servers')
    parser.add_argument('--quotas', action='store_true',
                        help='also measure this build with [quota] driver '
                        '= unified_limits (named "quotas") against a real '
                        'Keystone, interleaved with the others on the same '
                        'servers')
    parser.add_argument('--tolerations', action='store_true',
                        help='also measure this build with every host '
                        'tainted and a profile that tolerates some of the '
                        'taints (named "tolerations"), interleaved with the '
                        'others on the same servers')
    parser.add_argument('--notifications-consumer', action='store_true',
                        help='with --notifications: count them with a '
                        'notification listener in this process')
    parser.add_argument('--durable', nargs='?', metavar='DATABASES',
                        const=','.join(DURABLE_DATABASES),
                        help='measure this build on database servers with '
                        'their production defaults (every commit flushed '
                        'to disk), one deployment per server, interleaved '
                        '(--rounds, 2 by default here: A-B-B-A): cycles/s '
                        'and what each cycle cost each server (commits, '
                        'fsyncs, statements, lock waits), and the ratio '
                        'to the first; DATABASES: a comma-separated list '
                        'among postgresql, mysql and galera (three durable '
                        'nodes, two conductors through different nodes; '
                        'its certification retries are printed instead of '
                        'per-cycle counts) (default: %s)'
                        % ','.join(DURABLE_DATABASES))
    args = parser.parse_args()
    if args.durable:
        return _main_durable(parser, args)
    if args.db in (ALL_IN_ONE, GALERA):
        if (args.service != 'cyborg' or args.compare_root
                or args.notifications or args.quotas
                or args.tolerations):
            parser.error('--db %s measures ours only' % args.db)
        return (_main_all_in_one if args.db == ALL_IN_ONE
                else _main_galera)(args)
    if args.compare_root and args.service == 'upstream':
        parser.error('--compare-root compares builds of ours')
    db_server, db_label = DATABASES[args.db]
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-cycle-')
    deployments = []
    if args.service in ('cyborg', 'both'):
        deployments.append(Deployment(workdir, args.agents, args.api_workers,
                                      args.api_threads, args.api_server))
    if args.compare_root:
        deployments.append(Deployment(
            workdir, args.agents, args.api_workers, args.api_threads,
            args.api_server, name='baseline',
            venv=os.path.join(os.path.abspath(args.compare_root), '.venv')))
    if args.notifications:
        deployments.append(Deployment(
            workdir, args.agents, args.api_workers, args.api_threads,
            args.api_server, name='notify', notifications=True,
            consumer=args.notifications_consumer))
    if args.tolerations:
        deployments.append(Deployment(
            workdir, args.agents, args.api_workers, args.api_threads,
            args.api_server, name='tolerations', tolerations=True))
    if args.service in ('upstream', 'both'):
        deployments.append(upstream_lib.UpstreamDeployment(
            workdir, args.agents, args.api_workers, args.api_threads,
            args.api_server))
    print('load average before: %s' % _load())
    with db_server() as pg, \
            servers.RabbitMQServer() as rabbit, \
            placement_server.PlacementServer() as placement, \
            (upstream_lib.FakeNova() if args.service != 'cyborg'
             else fake_nova_lib.FakeNova()) as nova, \
            _keystone(args.quotas, pg) as keystone:
        if keystone is not None:
            deployments.append(Deployment(
                workdir, args.agents, args.api_workers, args.api_threads,
                args.api_server, name='quotas',
                sections=_quota_sections(keystone)))
        rounds = args.rounds if len(deployments) > 1 else 1
        try:
            rps = {}
            for deployment in deployments:
                deployment.start(pg, rabbit, placement, nova)
                rps[deployment.name] = _setup(deployment,
                                              deployment.deployables)
            pg_pids = cpu.pids_with(pg.data_dir)
            print('Nova cycle: %s API (%d %s workers), 1 conductor, '
                  '%d agents, RabbitMQ, %s, Placement, fake Nova; '
                  '%ds per run' % (
                      args.api_server, args.api_workers,
                      '%d-thread' % args.api_threads if args.api_threads
                      else 'sync', args.agents, db_label, args.duration))
            if args.service != 'cyborg':
                print('upstream: openstack-cyborg %s (%s), %d fake '
                      'deployables of %d accelerators; ours: %d fake '
                      'deployables' % (
                          upstream_lib.version(), upstream_lib.VENV,
                          args.agents * upstream_lib.DEPLOYABLES_PER_AGENT,
                          16, args.agents * 4))
            print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            summary = []
            if len(deployments) > 1 and args.warmup:
                # Unrecorded: the first run after the set-up is slower,
                # whichever deployment it measures.
                for deployment in deployments:
                    measure(deployment, nova, rps[deployment.name],
                            int(args.clients.split(',')[-1]), args.warmup,
                            pg_pids, [placement.process.pid],
                            [rabbit.process.pid], db_label,
                            label='%s warm-up (not counted)'
                            % deployment.name, db=pg)
            for clients in (int(c) for c in args.clients.split(',')):
                for round_ in range(rounds):
                    # Every other round the other goes first: a run
                    # measured right after the other's is not the same.
                    order = (deployments if round_ % 2 == 0
                             else deployments[::-1])
                    for deployment in order:
                        result = measure(
                            deployment, nova, rps[deployment.name], clients,
                            args.duration, pg_pids, [placement.process.pid],
                            [rabbit.process.pid], db_label,
                            label=deployment.name, db=pg)
                        summary.append((clients, round_ + 1,
                                        deployment.name, result))
            print('\nreference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            _print_summary(summary)
            for deployment in deployments:
                _report_log_errors(deployment)
        finally:
            for deployment in deployments:
                deployment.stop()
    print('load average after: %s' % _load())
    return 0


@contextlib.contextmanager
def _keystone(wanted: bool, db):
    """A real Keystone on the benchmark's database server (--quotas), or
    None."""
    if not wanted:
        yield None
        return
    with keystone_server.KeystoneServer(db.create_database('keystone')
                                        ) as keystone:
        yield keystone


# Far above what a run creates: the limits are read and checked, never
# reached.
BENCH_LIMIT = 10 ** 6


def _quota_sections(keystone) -> dict[str, dict]:
    """The configuration of the "quotas" deployment: its service and
    limits in ``keystone``, the project every request is made in."""
    keystone.add_service('accelerator', 'cyborg', 'http://127.0.0.1:9/v2')
    service_id = keystone._find('services', type='accelerator')['id']
    project_id = keystone.add_project('bench-quotas')
    for name in ('accelerator_requests', 'class:FPGA'):
        keystone.add_registered_limit(service_id, name, BENCH_LIMIT)
    keystone.add_project_limit(service_id, project_id, 'class:FPGA',
                               BENCH_LIMIT)
    return {'quota': {'driver': 'unified_limits'},
            'oslo_limit': keystone.oslo_limit_options(
                endpoint_service_type='accelerator',
                endpoint_region_name=keystone_server.REGION),
            'api': {'noauth_default_project_id': project_id}}


def _load() -> str:
    return ' '.join('%.2f' % value for value in os.getloadavg())


def _print_summary(summary) -> None:
    """Every run's numbers, and per concurrency the ratio of the mean
    cycles/s of ours to upstream's."""
    print('\n%-11s %5s %-9s %9s %7s %10s %10s  %s' % (
        'concurrency', 'round', 'service', 'cycles/s', 'errors',
        'event p50', 'event p99', 'CPU ms per cycle (service: by process; '
        'database)'))
    for clients, round_, name, result in summary:
        commands = result['db_commands']
        print('%-11d %5d %-9s %9.1f %7d %10.1f %10.1f  %.1f: %s; %.1f%s' % (
            clients, round_, name, result['cycles_per_s'], result['errors'],
            result['event_p50'], result['event_p99'], result['service_ms'],
            ', '.join('%s %.1f' % item for item in result['role_ms'].items()),
            result['db_ms'],
            ' (%.1f statements, %.1f pings per cycle)' % (
                commands['Questions'], commands['Com_admin_commands'])
            if 'Questions' in commands else ''))
    for clients in dict.fromkeys(c for c, _, _, _ in summary):
        means = {}
        for name in ('cyborg', 'upstream', 'baseline', 'notify', 'quotas',
                     'tolerations'):
            runs = [r for c, _, n, r in summary if c == clients and n == name]
            if runs:
                means[name] = {key: sum(r[key] for r in runs) / len(runs)
                               for key in ('cycles_per_s', 'service_ms',
                                           'create_p99')}
        if 'cyborg' in means and 'quotas' in means:
            print('concurrency %d: create p99 %.1f ms with quotas, %.1f ms '
                  'without (means): %+.1f ms' % (
                      clients, means['quotas']['create_p99'],
                      means['cyborg']['create_p99'],
                      means['quotas']['create_p99']
                      - means['cyborg']['create_p99']))
        for other in ('upstream', 'baseline', 'notify', 'quotas',
                      'tolerations'):
            if 'cyborg' not in means or other not in means:
                continue
            ours, theirs = means['cyborg'], means[other]
            print('concurrency %d: cyborg %.1f, %s %.1f cycles/s (means): '
                  'ratio %s; service CPU ms per cycle %.1f vs %.1f' % (
                      clients, ours['cycles_per_s'], other,
                      theirs['cycles_per_s'],
                      '%.2fx' % (ours['cycles_per_s']
                                 / theirs['cycles_per_s'])
                      if theirs['cycles_per_s'] else 'inf (%s 0)' % other,
                      ours['service_ms'], theirs['service_ms']))


def _report_log_errors(deployment, limit: int = 5) -> None:
    """The ERROR/Traceback lines of upstream's logs (kept in place)."""
    logs = getattr(deployment, 'logs', None)
    if logs is None:
        return
    print('\n%s logs: %s' % (deployment.name, deployment.workdir))
    for path in logs():
        with open(path, errors='replace') as f:
            lines = [line.rstrip() for line in f
                     if ' ERROR ' in line or line.startswith('Traceback')]
        if lines:
            print('  %s: %d error lines, first: %s' % (
                os.path.basename(path), len(lines), lines[0][:300]))


# --durable: the servers measured by default, the first being the one
# the others are compared with.
DURABLE_DATABASES = ('postgresql', 'mysql')


def _durable_server(name: str):
    """A server of database ``name`` (a DATABASES key) with its
    production defaults, not started; its label."""
    server_class, label = DATABASES[name]
    return server_class(durable=True), 'durable %s' % label


@dataclasses.dataclass
class _DurableRun:
    """One deployment of --durable: what measures it."""
    deployment: Any
    #: The server whose counters are read per cycle (None: none are).
    db: Any
    db_pids: list[int]
    label: str
    #: The Galera cluster, whose certification retries are counted.
    cluster: Any = None
    rps: list = dataclasses.field(default_factory=list)


def _durable_deployment(stack, name: str, deployment, rabbit, placement,
                        nova) -> _DurableRun:
    """``deployment`` started on a durable server of database ``name``
    (a DATABASES key, or galera: three durable nodes, a second conductor
    through node 1), the server stopped by ``stack``."""
    if name != GALERA:
        server, label = _durable_server(name)
        server = stack.enter_context(server)
        deployment.start(server, rabbit, placement, nova)
        return _DurableRun(deployment, server,
                           cpu.pids_with(server.data_dir), label)
    from tests.functional import galera

    cluster = stack.enter_context(galera.GaleraCluster(durable=True))
    databases = _GaleraDatabases(cluster)
    deployment.start(databases, rabbit, placement, nova)
    _second_conductor(deployment, cluster.nodes[1].url_for(
        databases.names[-1]))
    # The nodes' command lines name their my.cnf. Per-cycle counts are a
    # single server's: a cluster's certification retries stand for them.
    return _DurableRun(deployment, None,
                       [pid for node in cluster.nodes
                        for pid in cpu.pids_with(node.config_file)],
                       'durable Galera (3 nodes)', cluster)


def _print_certification_retries(before: dict[str, int],
                                 after: dict[str, int],
                                 cycles: float) -> None:
    retried = {key: after[key] - before[key] for key in after}
    print('  certification retries: %.1f per 1,000 cycles (%d '
          'certification failures, %d brute force aborts)' % (
              1000.0 * sum(retried.values()) / max(cycles, 1),
              retried['cert_failures'], retried['bf_aborts']), flush=True)


def _main_durable(parser, args) -> int:
    """--durable: this build on each durable database server (one
    deployment per server, named after it), with RabbitMQ, Placement
    and the fake Nova shared, interleaved A-B-B-A; prints what each
    cycle cost each server and the cycles/s of each against the
    first's."""
    names = [n.strip() for n in args.durable.split(',') if n.strip()]
    known = set(DATABASES) | {GALERA}
    unknown = sorted(set(names) - known)
    if unknown or not names or len(set(names)) != len(names):
        parser.error('--durable: a list of distinct databases among %s, '
                     'not %r' % (', '.join(sorted(known)), args.durable))
    if (args.service != 'cyborg' or args.compare_root or args.notifications
            or args.quotas or args.tolerations):
        parser.error('--durable measures this build alone')
    rounds = args.rounds if args.rounds > 1 else 2
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-durable-')
    print('load average before: %s' % _load())
    with contextlib.ExitStack() as stack:
        rabbit = stack.enter_context(servers.RabbitMQServer())
        placement = stack.enter_context(placement_server.PlacementServer())
        nova = stack.enter_context(fake_nova_lib.FakeNova())
        runs = []
        for name in names:
            # Not the server's own name: MariaDB has a database "mysql".
            deployment = Deployment(workdir, args.agents, args.api_workers,
                                    args.api_threads, args.api_server,
                                    name='durable' + name)
            stack.callback(deployment.stop)
            run_ = _durable_deployment(stack, name, deployment, rabbit,
                                       placement, nova)
            run_.rps = _setup(deployment, deployment.deployables)
            runs.append(run_)
        print('Nova cycle, durable databases: %s API (%d %s workers), '
              '1 conductor (2 on Galera, through nodes 0 and 1), %d '
              'agents per deployment, RabbitMQ, Placement, fake Nova; %ds '
              'per run, %d rounds' % (
                  args.api_server, args.api_workers,
                  '%d-thread' % args.api_threads if args.api_threads
                  else 'sync', args.agents, args.duration, rounds))
        summary = []

        def run(durable, clients, duration, title):
            before = durable.cluster.conflicts() if durable.cluster else None
            result = measure(durable.deployment, nova, durable.rps, clients,
                             duration, durable.db_pids,
                             [placement.process.pid], [rabbit.process.pid],
                             durable.label, label=title, db=durable.db,
                             counts=durable.db is not None)
            if before is not None:
                _print_certification_retries(
                    before, durable.cluster.conflicts(),
                    result['cycles_per_s'] * duration)
            return result
        if args.warmup:
            for durable in runs:
                run(durable, int(args.clients.split(',')[-1]), args.warmup,
                    '%s warm-up (not counted)' % durable.label)
        for clients in (int(c) for c in args.clients.split(',')):
            for round_ in range(rounds):
                for durable in (runs if round_ % 2 == 0 else runs[::-1]):
                    summary.append((clients, round_ + 1, durable.label, run(
                        durable, clients, args.duration, durable.label)))
                    print('  load average: %s' % _load(), flush=True)
        _print_durable_summary(summary, [r.label for r in runs])
    print('load average after: %s' % _load())
    return 0


def _print_durable_summary(summary, labels: list[str]) -> None:
    """Every run's cycles/s and counts, then per concurrency each
    server's means and their ratio to the first server's cycles/s."""
    print('\n%-11s %5s %-30s %9s %7s %10s %9s %9s' % (
        'concurrency', 'round', 'database', 'cycles/s', 'errors',
        'event p99', 'commits', 'fsyncs'))
    for clients, round_, label, result in summary:
        counts = result['db_commands']
        print('%-11d %5d %-30s %9.1f %7d %10.1f %9.2f %9.2f' % (
            clients, round_, label, result['cycles_per_s'],
            result['errors'], result['event_p99'],
            db_counters.commits(counts), db_counters.fsyncs(counts)))
    for clients in dict.fromkeys(c for c, _, _, _ in summary):
        means = {}
        for label in labels:
            runs = [r for c, _, n, r in summary
                    if c == clients and n == label]
            means[label] = sum(r['cycles_per_s'] for r in runs) / len(runs)
        first = labels[0]
        for label in labels[1:]:
            print('concurrency %d: %s %.1f, %s %.1f cycles/s (means): '
                  'ratio %s' % (
                      clients, label, means[label], first, means[first],
                      '%.2f' % (means[label] / means[first])
                      if means[first] else 'inf'))
        for label in labels:
            runs = [r for c, _, n, r in summary
                    if c == clients and n == label]
            if runs[-1]['db_commands']:  # none counted on a cluster
                print('concurrency %d, %s per cycle (last run): %s' % (
                    clients, label,
                    db_counters.describe(runs[-1]['db_commands'])))


def _main_all_in_one(args) -> int:
    deployment = AllInOne(tempfile.mkdtemp(prefix='cyborg-bench-aio-'),
                          args.agents)
    with fake_nova_lib.FakeNova() as nova:
        try:
            deployment.start(nova)
            rps = _setup(deployment, args.agents * 4)
            print('Nova cycle: cyborg-all-in-one on SQLite (embedded '
                  'Placement, %d fake devices), fake Nova; %ds per run'
                  % (args.agents * 4, args.duration))
            print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            for clients in (int(c) for c in args.clients.split(',')):
                measure(deployment, nova, rps, clients, args.duration, [],
                        [], [], 'SQLite (in process)')
            print('\nreference loop: %.0f ms CPU' % cpu.reference_loop_ms())
        finally:
            deployment.stop()
    return 0


def _second_conductor(deployment, url: str) -> None:
    """Another conductor of ``deployment``, like its first, writing
    through the database ``url`` (another Galera node)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(deployment.processes[0].config_file)
    config = {'DEFAULT': dict(parser.defaults())}
    config.update({name: {key: value for key, value in parser.items(name)
                          if key not in parser.defaults()}
                   for name in parser.sections()})
    config['DEFAULT']['host'] = 'bench-conductor-1'
    config['database']['connection'] = url
    deployment._spawn('cyborg-conductor', config, name='conductor-1')
    deployment.processes[-1].wait_log('Started cyborg-conductor')


class _GaleraDatabases:
    """The cluster as Deployment's database server: databases through
    node 0, remembered so that the second conductor uses node 1."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.names: list[str] = []

    def create_database(self, name: str) -> str:
        self.names.append(name)
        return self.cluster.create_database(name)


def _main_galera(args) -> int:
    """--db galera: the Nova cycle on a three-node Galera cluster, two
    conductors through different nodes; with --durable (where this build
    has it) the nodes flush their log at every commit."""
    from tests.functional import galera

    durable = bool(getattr(args, 'durable', False))
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-galera-')
    deployment = Deployment(workdir, args.agents, args.api_workers,
                            args.api_threads, args.api_server)
    print('load average before: %s' % _load())
    with galera.GaleraCluster(durable=durable) as cluster, \
            servers.RabbitMQServer() as rabbit, \
            placement_server.PlacementServer() as placement, \
            fake_nova_lib.FakeNova() as nova:
        databases = _GaleraDatabases(cluster)
        try:
            deployment.start(databases, rabbit, placement, nova)
            _second_conductor(deployment, cluster.nodes[1].url_for(
                databases.names[-1]))
            rps = _setup(deployment, deployment.deployables)
            # The nodes' command lines name their my.cnf.
            node_pids = [pid for node in cluster.nodes
                         for pid in cpu.pids_with(node.config_file)]
            label = 'Galera (3 nodes%s)' % (', durable' if durable else '')
            print('Nova cycle: %s API (%d %s workers) through node 0, 2 '
                  'conductors through nodes 0 and 1, %d agents, RabbitMQ, '
                  '%s, Placement, fake Nova; %ds per run' % (
                      args.api_server, args.api_workers,
                      '%d-thread' % args.api_threads if args.api_threads
                      else 'sync', args.agents, label, args.duration))
            print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            summary = []
            for clients in (int(c) for c in args.clients.split(',')):
                before = cluster.conflicts()
                result = measure(deployment, nova, rps, clients,
                                 args.duration, node_pids,
                                 [placement.process.pid],
                                 [rabbit.process.pid], label,
                                 label='galera')
                _print_certification_retries(
                    before, cluster.conflicts(),
                    result['cycles_per_s'] * args.duration)
                summary.append((clients, 1, 'galera', result))
            print('\nreference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            _print_summary(summary)
        finally:
            deployment.stop()
    print('load average after: %s' % _load())
    return 0


# --tolerations: what the profile's group tolerates, and each taint rule
# (host index, key, value; the last applies to every other host).
TOLERATIONS = {'toleration:bench.drain': 'Exists',
               'toleration:bench.zone': 'Equal:a'}
TAINTS = [(0, 'bench.drain', ''), (1, 'bench.zone', 'a'),
          (None, 'bench.zone', 'b'), (None, 'bench.maint', '')]
# Forbidden in each read once the taints are active: bench.maint's key,
# and bench.zone's value b (the group tolerates only a).
FORBIDDEN_KEY = 'trait:CUSTOM_TAINT_BENCH_MAINT'
TAINTS_VERSION = {'OpenStack-API-Version': 'accelerator 2.8'}


def _setup(deployment, deployables: int) -> list[tuple[str, str]]:
    """The profile, and the deployables' providers with their hosts (a
    bind names both) once all reported (--tolerations: and the taints
    active in Nova's read)."""
    group = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
    headers = dict(deployment.headers)
    if getattr(deployment, 'tolerations', False):
        group.update(TOLERATIONS)
        headers.update(TAINTS_VERSION)
    created = requests.post(deployment.url + '/device_profiles', json=[{
        'name': PROFILE, 'groups': [group]}], headers=headers, timeout=30)
    if created.status_code not in (200, 201):
        raise RuntimeError('%s: device profile not created: %s %s' % (
            deployment.name, created.status_code, created.text[:200]))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = requests.get(deployment.url + '/deployables',
                             headers=dict(deployment.headers,
                                          **{'X-Roles': 'admin'}),
                             timeout=30).json()['deployables']
        if len(found) >= deployables:
            hosts = _provider_hosts(deployment.db_url)
            if getattr(deployment, 'tolerations', False):
                _taint(deployment, sorted({host for _, host in hosts}))
            return hosts
        time.sleep(0.5)
    raise RuntimeError('agents did not report %d deployables: %s'
                       % (deployables, json.dumps(found)[:200]))


def _taint(deployment, hosts: list[str]) -> None:
    """The taint rules of TAINTS on ``hosts``; returns once Nova's read
    of the profile forbids the untolerated key (the rules' Placement
    sync is done)."""
    headers = dict(deployment.headers, **{'X-Roles': 'admin'},
                   **TAINTS_VERSION)
    for index, key, value in TAINTS:
        selected = ([hosts[index]] if index is not None
                    else hosts[2:] or hosts[-1:])
        for host in selected:
            made = requests.post(
                deployment.url + '/device_taint_rules', json={
                    'selector': {'host': host},
                    'taint': {'key': key, 'value': value,
                              'effect': 'NoSchedule'}},
                headers=headers, timeout=30)
            if made.status_code not in (200, 201):
                raise RuntimeError('%s: taint rule not created: %s %s' % (
                    deployment.name, made.status_code, made.text[:200]))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        read = requests.get(deployment.url + '/device_profiles',
                            params={'name': PROFILE},
                            headers=deployment.headers, timeout=30).json()
        groups = read['device_profiles'][0]['groups']
        if FORBIDDEN_KEY in groups[0]:
            print('%s: profile group as Nova reads it: %s' % (
                deployment.name, json.dumps(groups[0], sort_keys=True)))
            return
        time.sleep(0.5)
    raise RuntimeError('%s: the taints did not reach the profile read'
                       % deployment.name)


def _provider_hosts(db_url: str) -> list[tuple[str, str]]:
    """(resource provider, host) of every deployable: the API shows a
    device's host, not which device a deployable belongs to."""
    engine = sqlalchemy.create_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sqlalchemy.text(
                'SELECT deployables.rp_uuid, devices.hostname FROM '
                'deployables JOIN devices ON devices.id = '
                'deployables.device_id ORDER BY deployables.id'))]
    finally:
        engine.dispose()


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
