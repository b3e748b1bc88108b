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

Simulates compute hosts by sending fake device trees straight to the
conductor RPC API (no agent processes) with a real Placement and
PostgreSQL, in three phases:

1. registration: every host reports its devices for the first time;
2. steady state: every host reports the same tree again;
3. churn: 1% of the hosts change one device.

With ``--utilization`` every report also carries a utilization reading of
each device (outside the tree's digest), and a fourth phase changes every
host's readings (the tree unchanged). A report with readings costs one
statement more than without, changed or not (the readings are written
with the report's time, ``reported_at``), and no Placement request.

Prints wall time, DB statements and Placement requests per report, and
the CPU milliseconds per report of the conductor (this process), of
Placement (all its worker processes) and of PostgreSQL.

    .venv/bin/python tools/bench/inventory_sync.py [--hosts 1000]
"""

import argparse
import concurrent.futures
import copy
import os
import sys
import tempfile
import threading
import time
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

import sqlalchemy as sa  # noqa: E402

from cyborg.clients import placement as placement_client  # noqa: E402
from cyborg.allinone import embedded_placement  # noqa: E402
from cyborg.common import rpc  # noqa: E402
from cyborg.conductor import rpcapi  # noqa: E402
from cyborg.conductor import service as conductor_service  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg import context as cyborg_context  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.domain import device_tree  # noqa: E402
from tools import bench  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import hardware_trees  # noqa: E402
from tools.bench import placement as bench_placement  # noqa: E402


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
    """CPU seconds of this process, Placement and PostgreSQL."""

    def __init__(self, placement_pids, pg_pids):
        self.groups = {'conductor': [os.getpid()],
                       'placement': list(placement_pids),
                       'postgres': list(pg_pids)}

    def sample(self) -> dict[str, float]:
        result = {name: cpu.process_cpu(pids) for name, pids in
                  self.groups.items() if name != 'conductor'}
        result['conductor'] = cpu.own_cpu()
        return result


def host_utilization(wire, load: int) -> dict:
    """A reading of each device of a host's tree: ``load`` percent busy,
    as a GPU driver reports it."""
    return {device['address']: {'gpu_percent': float(load),
                                 'memory_used_mib': 64 * load,
                                 'memory_total_mib': 15360}
            for device in wire}


def run_phase(name, conductor_api, hosts, trees, workers, counter, client,
              meter, utilization=None):
    context = cyborg_context.get_admin_context()
    statements, requests = counter.count, client.request_count
    cpu_before = meter.sample()
    started = time.monotonic()

    def report(host):
        wire = trees[host]
        return conductor_api.report_inventory(
            context, host, host, wire, device_tree.tree_digest(
                {'devices': wire, 'failed': []}), [],
            utilization=None if utilization is None else utilization[host])

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(report, hosts))
    elapsed = time.monotonic() - started
    cpu_after = meter.sample()
    unsynced = sum(1 for r in results if not r['synced'])
    cpu_ms = {key: (cpu_after[key] - cpu_before[key]) * 1000 / len(hosts)
              for key in cpu_after}
    print('%-13s %7d %9.1f %12.1f %14.2f %9d %9.1f %9.1f %9.1f' % (
        name, len(hosts), elapsed,
        (counter.count - statements) / len(hosts),
        (client.request_count - requests) / len(hosts), unsynced,
        cpu_ms['conductor'], cpu_ms['placement'], cpu_ms['postgres']),
        flush=True)


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
    bench_placement.add_arguments(parser)
    parser.add_argument('--roles', default='admin,service',
                        help="the conductor's roles in Placement "
                        '(admin,service; admin alone: no reshaper)')
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-inventory-')
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        cyborg_url = pg.create_database('cyborg')
        with bench_placement.server(args, pg, workdir) as placement:
            meter = CPUMeter([placement.process.pid],
                             cpu.pids_with(pg.data_dir))
            return _run(args, cyborg_url, placement.url, meter)


def _run(args, cyborg_url, placement_url, meter) -> int:
    CONF([], project='cyborg', default_config_files=[])
    rpc.register_opts(CONF)
    CONF.set_override('connection', cyborg_url, group='database')
    CONF.set_override('transport_url', 'inproc://')
    db_api.configure(CONF)
    migration.upgrade()
    setup_client = placement_client.PlacementClient.for_endpoint(
        placement_url)
    hosts = ['bench-host-%04d' % i for i in range(args.hosts)]
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
    counter = StatementCounter(db_api.get_engine())
    conductor_api = rpcapi.ConductorAPI(transport)
    print('%d hosts x %s, %d concurrent reports, PostgreSQL, real '
          'Placement (%s, %d workers), conductor roles %s' % (
              args.hosts, '%d devices' % args.devices if args.tree == 'bench'
              else args.tree, args.workers, args.placement_server,
              args.placement_workers, args.roles))
    print('%-13s %7s %9s %12s %14s %9s %9s %9s %9s' % (
        'phase', 'reports', 'wall s', 'DB stmts/rep', 'Placement/rep',
        'unsynced', 'cond ms', 'plc ms', 'pg ms'))
    print('(cond/plc/pg ms: CPU milliseconds per report of the conductor, '
          'Placement and PostgreSQL)')
    trees = {host: host_tree(args) for host in hosts}
    print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    readings = ({host: host_utilization(trees[host], 10) for host in hosts}
                if args.utilization else None)
    try:
        run_phase('registration', conductor_api, hosts, trees, args.workers,
                  counter, client, meter, readings)
        run_phase('steady state', conductor_api, hosts, trees, args.workers,
                  counter, client, meter, readings)
        if readings is not None:
            readings = {host: host_utilization(trees[host], 90)
                        for host in hosts}
            run_phase('util changed', conductor_api, hosts, trees,
                      args.workers, counter, client, meter, readings)
        changed = hosts[::100]
        for host in changed:
            trees[host] = host_tree(args, changed=True)
            if readings is not None:
                readings[host] = host_utilization(trees[host], 90)
        run_phase('1% changed', conductor_api, hosts, trees, args.workers,
                  counter, client, meter, readings)
        print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    finally:
        conductor.stop()
        rpc.cleanup(transport)
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
