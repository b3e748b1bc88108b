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

"""Benchmark: inventory reports from many hosts through the conductor.

Simulates compute hosts by sending fake device trees to a real conductor
over RabbitMQ (the agents: threads of a child process, no agent
processes) with a real Placement and PostgreSQL, in three phases:

1. registration: every host reports its devices for the first time;
2. steady state: every host reports the same tree again, as its digest
   alone (as an agent does once the conductor answered a report of that
   tree: conductor RPC 1.3), then once more with the tree (as agents
   capped below 1.3 do: ``steady, trees``);
3. churn: 1% of the hosts change one device.

With ``--utilization`` every report also carries a utilization reading of
each device (outside the tree's digest), and a fourth phase changes every
host's readings (the tree unchanged). A report with readings costs one
statement more than without, changed or not (the readings are written
with the report's time, ``reported_at``), and no Placement request.

The conductor runs in this process, alone: its CPU is the server side of
the reports (and of its Placement syncs, which a phase waits for: a phase
ends once no host is left pending). Before the phases, the same child
sends empty calls to an endpoint of this process on the same transport:
their server-side CPU is the floor an unchanged report is measured
against (as ``rpc_roundtrip.py``, but across processes).

Prints, per phase, wall time (until Placement is synced), DB statements
and Placement requests per report, the agents' wait per report (mean and
95th percentile: what an agent's report call takes), and the CPU
milliseconds per report of the conductor, of Placement (all its worker
processes) and of PostgreSQL.

``--root DIR`` runs another checkout's ``cyborg`` (e.g. the tree before a
change, ``git worktree add /tmp/before <commit>``) with this harness, so
two runs back to back compare the builds.

    .venv/bin/python tools/bench/inventory_sync.py [--hosts 1000]
"""

import argparse
import concurrent.futures
import contextlib
import copy
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
# --root DIR: the cyborg package of DIR (read before cyborg is imported,
# here and in the sender process, which gets this sys.argv).
if '--root' in sys.argv:
    sys.path.insert(0, os.path.abspath(
        sys.argv[sys.argv.index('--root') + 1]))
warnings.filterwarnings('ignore')

import sqlalchemy as sa  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.allinone import embedded_placement  # noqa: E402
from cyborg.clients import placement as placement_client  # noqa: E402
from cyborg.common import rpc  # noqa: E402
from cyborg.conductor import rpcapi  # noqa: E402
from cyborg.conductor import service as conductor_service  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.domain import device_tree  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import hardware_trees  # noqa: E402
from tools.bench import placement as bench_placement  # noqa: E402
from tools.bench import placement_requests  # noqa: E402


def bench_tree(devices: int, changed: bool = False) -> list[dict]:
    tree = []
    for index in range(devices):
        address = '0000:%02x:00.0' % (0x10 + index)
        accelerators = 5 if changed and index == 0 else 4
        pf = device_tree.pci_address_info(address)
        handles = [device_tree.AttachHandle('PCI',
                                            dict(pf, function=str(fn)))
                   for fn in range(1, accelerators + 1)]
        tree.append(device_tree.Device(
            type='FPGA', vendor='0x8086', model='bench', address=address,
            controlpath_ids=[device_tree.ControlPathID('PCI', pf)],
            deployables=[device_tree.Deployable(
                name=address.replace(':', '_').replace('.', '_'),
                num_accelerators=accelerators,
                resource_class='CUSTOM_BENCH_ACCEL',
                traits=['CUSTOM_BENCH_FAST'], attach_handles=handles,
                driver_name='bench')],
            driver='bench'))
    return device_tree.tree_to_wire(tree)


def host_tree(args, changed: bool = False) -> list[dict]:
    """One host's tree (a copy of its own: the in-process transport
    hands the conductor the object itself)."""
    if args.tree == 'bench':
        return bench_tree(args.devices, changed)
    return copy.deepcopy(_hardware_tree(args.tree, changed))


_HARDWARE_TREES: dict = {}


def _hardware_tree(kind: str, changed: bool) -> list[dict]:
    if (kind, changed) not in _HARDWARE_TREES:
        _HARDWARE_TREES[kind, changed] = hardware_trees.wire_tree(kind,
                                                                  changed)
    return _HARDWARE_TREES[kind, changed]


class StatementCounter:
    def __init__(self, engine):
        self.count = 0
        self._lock = threading.Lock()
        sa.event.listen(engine, 'before_cursor_execute', self._count)

    def _count(self, *_args):
        with self._lock:
            self.count += 1


class CPUMeter:
    """CPU seconds of this process, Placement and PostgreSQL.

    The conductor's figure leaves out what the harness itself spends in
    this process (the scans of the other processes' CPU, the polls for
    pending hosts: see :meth:`harness`): a scan walks every process of the
    machine, which on a busy machine costs as much as tens of reports.
    """

    def __init__(self, placement_pids, pg_pids):
        self.groups = {'conductor': [os.getpid()],
                       'placement': list(placement_pids),
                       'postgres': list(pg_pids)}
        self._harness_cpu = 0.0

    @contextlib.contextmanager
    def harness(self):
        """Leave the CPU of this block out of the conductor's."""
        started = cpu.own_cpu()
        try:
            yield
        finally:
            self._harness_cpu += cpu.own_cpu() - started

    def sample(self) -> dict[str, float]:
        with self.harness():
            result = {name: cpu.process_cpu(pids) for name, pids in
                      self.groups.items() if name != 'conductor'}
        result['conductor'] = cpu.own_cpu() - self._harness_cpu
        return result


def host_utilization(wire, load: int) -> dict:
    """A reading of each device of a host's tree: ``load`` percent busy,
    as a GPU driver reports it."""
    return {device['address']: {'gpu_percent': float(load),
                                'memory_used_mib': 64 * load,
                                'memory_total_mib': 15360}
            for device in wire}


# The agents: a child process ------------------------------------------------

class PingEndpoint:
    """An empty call's server side: the floor of a report's."""

    def ping(self, context, value):
        return value


PING_TOPIC = 'bench-ping'


def _sender(args, transport_url: str, commands, answers) -> None:
    """The simulated agents (run in a child process): for each command
    from ``commands``, send its calls with ``args.workers`` threads and
    answer the seconds each call waited."""
    conf = CONF
    conf([], project='cyborg', default_config_files=[])
    rpc.register_opts(conf)
    conf.set_override('transport_url', transport_url)
    transport = rpc.get_transport(conf)
    conductor_api = rpcapi.ConductorAPI(transport)
    ping = rpc.get_client(transport, PING_TOPIC)
    context = cyborg_context.get_admin_context()
    hosts = host_names(args)
    trees = {host: host_tree(args) for host in hosts}
    changed = set(hosts[::100])
    # The digest of each host's last answered report: as an agent does, a
    # tree the conductor answered goes as its digest alone (RPC 1.3).
    acknowledged: dict[str, str] = {}

    def report(host, churn, load, full):
        wire = (host_tree(args, changed=True) if churn and host in changed
                else trees[host])
        readings = None if load is None else host_utilization(wire, load)
        digest = device_tree.tree_digest({'devices': wire, 'failed': []})
        started = time.monotonic()
        conductor_api.report_inventory(
            context, host, host, wire, digest, [], utilization=readings,
            acknowledged=not full and acknowledged.get(host) == digest)
        acknowledged[host] = digest
        return time.monotonic() - started

    def empty(number):
        started = time.monotonic()
        ping.call(context, 'ping', value=number)
        return time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        while True:
            command = commands.get()
            if command is None:
                break
            kind, churn, load, full = command
            if kind == 'ping':
                answers.put(list(pool.map(empty, range(args.floor_calls))))
            else:
                answers.put(list(pool.map(
                    report, hosts, [churn] * len(hosts),
                    [load] * len(hosts), [full] * len(hosts))))
    rpc.cleanup(transport)


def host_names(args) -> list[str]:
    return ['bench-host-%05d' % i for i in range(args.hosts)]


# The conductor's side -------------------------------------------------------

def _pending(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(sa.text(
            "SELECT count(*) FROM services WHERE \"binary\" = "
            "'cyborg-agent' AND sync_requested > sync_done")).scalar()


def _wait_synced(engine, meter: CPUMeter, timeout: float = 3600) -> None:
    """Until no host waits for a Placement sync (the polls are the
    harness's CPU, not the conductor's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with meter.harness():
            if not _pending(engine):
                return
        time.sleep(0.05)


class Run:
    """One run's collaborators: the child's queues, the meters."""

    def __init__(self, commands, answers, counter, client, meter, engine):
        self.commands, self.answers = commands, answers
        self.counter, self.client = counter, client
        self.meter, self.engine = meter, engine

    def floor(self, calls: int) -> float:
        """Server-side CPU milliseconds of an empty call; prints it."""
        before = self.meter.sample()['conductor']
        self.commands.put(('ping', False, None, False))
        waits = self.answers.get()
        cpu_ms = (self.meter.sample()['conductor'] - before) * 1000 / calls
        print('%-13s %7d %9s %12s %14s %9.2f %7.2f %9.2f' % (
            'empty call', calls, '', '', '', statistics.mean(waits) * 1000,
            _p95(waits) * 1000, cpu_ms), flush=True)
        return cpu_ms

    def phase(self, name: str, reports: int, churn: bool = False,
              load: int | None = None, full: bool = False
              ) -> dict[str, float]:
        statements = self.counter.count
        requests = self.client.request_count
        cpu_before = self.meter.sample()
        started = time.monotonic()
        self.commands.put(('report', churn, load, full))
        waits = self.answers.get()
        _wait_synced(self.engine, self.meter)
        elapsed = time.monotonic() - started
        cpu_after = self.meter.sample()
        cpu_ms = {key: (cpu_after[key] - cpu_before[key]) * 1000 / reports
                  for key in cpu_after}
        print('%-13s %7d %9.1f %12.1f %14.2f %9.2f %7.2f %9.2f %9.1f %9.1f'
              % (name, reports, elapsed,
                 (self.counter.count - statements) / reports,
                 (self.client.request_count - requests) / reports,
                 statistics.mean(waits) * 1000, _p95(waits) * 1000,
                 cpu_ms['conductor'], cpu_ms['placement'],
                 cpu_ms['postgres']), flush=True)
        return dict(cpu_ms, wall=elapsed)


def _compare_with_placement_floor(args, client, meter: CPUMeter,
                                  registration: dict[str, float]) -> None:
    """Sends the requests of a registration straight to the same
    Placement (``placement_requests.py``) and prints the registration
    phase against that floor, per host."""
    # The floor's requests are those of a host of 8 deployables (each its
    # own provider): the bench tree of 8 devices, or 8 GPUs.
    if (args.tree, args.devices) not in (
            ('bench', placement_requests.DEVICES_PER_HOST),
            ('gpu8', args.devices)):
        print('(Placement floor: measured for hosts of %d deployables '
              'only)' % placement_requests.DEVICES_PER_HOST)
        return
    print('Placement\'s own floor, same Placement:')
    floor = placement_requests.registration_floor(placement_requests.measure(
        client, placement_requests.Meter(
            meter.groups['placement'], meter.groups['postgres'],
            args.workers),
        min(800, args.hosts * args.devices), prefix='floor-host'))
    wall = registration['wall'] * 1000 / args.hosts
    print('registration per host: %.1f ms wall, %.1f ms Placement CPU; '
          'floor %.1f ms wall, %.1f ms Placement CPU: %.2f and %.2f times '
          'the floor' % (wall, registration['placement'], floor['wall'],
                         floor['placement'], wall / floor['wall'],
                         registration['placement'] / floor['placement']))


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8)
    parser.add_argument('--tree', default='bench',
                        choices=('bench',) + hardware_trees.KINDS,
                        help='each host\'s tree: bench (--devices synthetic '
                        'FPGAs of 4 handles), gpu8 (8 NVIDIA T4s as the '
                        'NVIDIA driver reports them) or qat2x16 (2 QAT PFs '
                        'of 16 VFs, as the QAT driver reports them)')
    parser.add_argument('--utilization', action='store_true',
                        help='send a utilization reading of every device '
                        'with each report, and add a phase whose reports '
                        'change only the readings')
    parser.add_argument('--workers', type=int, default=8,
                        help='reports sent concurrently (8)')
    parser.add_argument('--floor-calls', type=int, default=2000,
                        help='empty calls that measure the floor (2000)')
    parser.add_argument('--steady-rounds', type=int, default=1,
                        help='steady-state phases in a row (1); the '
                        'unchanged report\'s CPU is their median')
    parser.add_argument('--root', metavar='DIR',
                        help="bench DIR's cyborg package (another "
                        'checkout) with this harness')
    bench_placement.add_arguments(parser)
    parser.add_argument('--roles', default='admin,service',
                        help="the conductor's roles in Placement "
                        '(admin,service; admin alone: no reshaper)')
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-inventory-')
    with servers.PostgreSQLServer(base_dir=workdir) as pg, \
            servers.RabbitMQServer(
                base_dir=os.path.join(workdir, 'rabbit')) as rabbit:
        cyborg_url = pg.create_database('cyborg')
        with bench_placement.server(args, pg, workdir) as placement:
            meter = CPUMeter([placement.process.pid],
                             cpu.pids_with(pg.data_dir))
            return _run(args, cyborg_url, placement.url, rabbit.url, meter)


def _run(args, cyborg_url, placement_url, transport_url, meter) -> int:
    CONF([], project='cyborg', default_config_files=[])
    rpc.register_opts(CONF)
    CONF.set_override('connection', cyborg_url, group='database')
    CONF.set_override('transport_url', transport_url)
    # The periodic retry of pending hosts would sync, during a later
    # phase, hosts it listed while registration was under way.
    CONF.set_override('periodic_interval', 3600)
    db_api.configure(CONF)
    migration.upgrade()
    setup_client = placement_client.PlacementClient.for_endpoint(
        placement_url)
    hosts = host_names(args)
    print('cyborg from %s' % os.path.dirname(os.path.dirname(
        os.path.abspath(conductor_service.__file__))))
    print('creating %d compute node providers (not measured)...' %
          len(hosts), flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(lambda h: embedded_placement.ensure_compute_node(
            setup_client, h), hosts))

    # The conductor's Placement user, as deployed: a service user, with
    # the service role besides admin (what POST /reshaper needs).
    client = placement_client.PlacementClient.for_endpoint(
        placement_url, roles=args.roles.split(','))
    transport = rpc.get_transport(CONF)
    conductor = conductor_service.create(CONF, transport, lambda: client)
    conductor.start()
    ping_server = rpc.get_server(transport, PING_TOPIC, 'bench',
                                 PingEndpoint())
    ping_server.start()
    counter = StatementCounter(db_api.get_engine())
    # Polled for pending hosts at the end of each phase: an engine of its
    # own, whose statements are not counted.
    engine = sa.create_engine(cyborg_url, poolclass=sa.pool.NullPool)
    context = multiprocessing.get_context('spawn')
    commands, answers = context.Queue(), context.Queue()
    sender = context.Process(target=_sender, name='bench-agents', args=(
        args, transport_url, commands, answers))
    sender.start()
    run = Run(commands, answers, counter, client, meter, engine)
    print('%d hosts x %s, %d concurrent reports, PostgreSQL, RabbitMQ, '
          'real Placement (%s, %d workers), conductor roles %s' % (
              args.hosts, '%d devices' % args.devices if args.tree == 'bench'
              else args.tree, args.workers, args.placement_server,
              args.placement_workers, args.roles))
    print('%-13s %7s %9s %12s %14s %9s %7s %9s %9s %9s' % (
        'phase', 'calls', 'wall s', 'DB stmts/rep', 'Placement/rep',
        'wait ms', 'p95 ms', 'cond ms', 'plc ms', 'pg ms'))
    print('(wait: an agent\'s wait per call; cond/plc/pg ms: CPU '
          'milliseconds per call of the conductor, Placement and '
          'PostgreSQL; wall: until Placement is synced)')
    print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    load = 10 if args.utilization else None
    try:
        floor = run.floor(args.floor_calls)
        registration = run.phase('registration', len(hosts), load=load)
        steady = statistics.median(
            run.phase('steady state', len(hosts), load=load)['conductor']
            for _ in range(args.steady_rounds))
        trees = statistics.median(
            run.phase('steady, trees', len(hosts), load=load,
                      full=True)['conductor']
            for _ in range(args.steady_rounds))
        if load is not None:
            load = 90
            run.phase('util changed', len(hosts), load=load)
        run.phase('1% changed', len(hosts), churn=True, load=load)
        floor_after = run.floor(args.floor_calls)
        _compare_with_placement_floor(args, client, meter, registration)
        floor_min = min(floor, floor_after)
        print('unchanged report / empty call (server-side CPU): %.2f as a '
              'digest, %.2f with its tree (floor %.2f ms before the '
              'phases, %.2f ms after)' % (
                  steady / floor_min, trees / floor_min, floor,
                  floor_after))
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    finally:
        commands.put(None)
        sender.join(60)
        ping_server.stop()
        ping_server.wait()
        conductor.stop()
        rpc.cleanup(transport)
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
