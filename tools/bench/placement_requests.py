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

"""Benchmark: what each Placement request of a host's registration costs.

Sends the requests the conductor makes when a new host registers, one
kind at a time and 8 at once, to a real Placement (as in
``inventory_sync.py``: 2 worker processes on PostgreSQL) and prints, per
request, the wall time and the CPU milliseconds of Placement, of
PostgreSQL and of the client (this process: keystoneauth and requests).

Registration costs 1 compute node lookup, then per deployable 1 provider
creation, 1 trait update and 1/8 of a reshape: the sum of those lines,
per host, is the floor of ``inventory_sync.py``'s registration phase.
``GET /`` is Placement's least request, for scale.

    .venv/bin/python tools/bench/placement_requests.py [--providers 800]
"""

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
import uuid
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

from cyborg.allinone import embedded_placement  # noqa: E402
from cyborg.clients import placement as placement_client  # noqa: E402
from tests.functional import servers  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import placement as bench_placement  # noqa: E402

DEVICES_PER_HOST = 8
RESOURCE_CLASS = 'CUSTOM_BENCH_ACCEL'
TRAITS = ['CUSTOM_BENCH_FAST', 'OWNER_CYBORG']
INVENTORY = {RESOURCE_CLASS: {
    'total': 4, 'reserved': 0, 'min_unit': 1, 'max_unit': 4,
    'step_size': 1, 'allocation_ratio': 1.0}}


class Meter:
    """Runs one kind of request and prints its cost per request."""

    def __init__(self, placement_pids, pg_pids, workers: int):
        self.placement_pids = list(placement_pids)
        self.pg_pids = list(pg_pids)
        self.workers = workers

    def _sample(self) -> tuple[float, float, float, float]:
        return (time.monotonic(), cpu.process_cpu(self.placement_pids),
                cpu.process_cpu(self.pg_pids), cpu.own_cpu())

    def run(self, name: str, send, items: list, per_item: int = 1
            ) -> dict[str, float]:
        """Prints and returns the milliseconds per request: ``wall``
        (elapsed over the requests sent, with ``workers`` at once),
        ``placement``, ``postgres`` and ``client`` CPU."""
        before = self._sample()
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            list(pool.map(send, items))
        after = self._sample()
        count = len(items) * per_item
        wall, plc, pg, client = ((a - b) * 1000 / count
                                 for a, b in zip(after, before, strict=True))
        print('%-34s %6d %8.2f %8.2f %8.2f %8.2f' % (
            name, count, wall, plc, pg, client), flush=True)
        return {'wall': wall, 'placement': plc, 'postgres': pg,
                'client': client}


#: The requests a new host's registration makes, per host: one compute
#: node lookup, then per deployable one creation, one trait update and
#: 1/8 of a reshape (a reshape line is per provider it carries).
REGISTRATION = {'GET /resource_providers?name=': 1,
                'POST /resource_providers': DEVICES_PER_HOST,
                'PUT /resource_providers/{u}/traits': DEVICES_PER_HOST,
                'POST /reshaper (8 providers)': DEVICES_PER_HOST}


def registration_floor(costs: dict[str, dict[str, float]]
                       ) -> dict[str, float]:
    """Milliseconds per host of a registration's requests (each cost
    as :meth:`Meter.run` returns it), from what :func:`measure`
    returns."""
    return {key: sum(costs[name][key] * count
                     for name, count in REGISTRATION.items())
            for key in ('wall', 'placement', 'postgres', 'client')}


def measure(client: placement_client.PlacementClient, meter: Meter,
            providers: int, prefix: str = 'bench-host'
            ) -> dict[str, dict[str, float]]:
    """Sends each kind of request; ``{request: costs}``."""
    hosts = ['%s-%04d' % (prefix, i)
             for i in range(max(2, providers // DEVICES_PER_HOST))]
    compute_nodes = {host: embedded_placement.ensure_compute_node(
        client, host) for host in hosts}
    client.ensure_resource_class(RESOURCE_CLASS)
    for trait in TRAITS:
        client.ensure_trait(trait)
    new = [(str(uuid.uuid4()), '%s_dev%d' % (host, index), parent)
           for host, parent in compute_nodes.items()
           for index in range(DEVICES_PER_HOST)]
    # Half of the hosts get their inventories by reshape, the other half
    # one provider at a time (both from generation 1, after the traits).
    reshaped_hosts = set(list(compute_nodes.values())[::2])
    by_host: dict[str, list[str]] = {}
    one_by_one = []
    for rp_uuid, _name, parent in new:
        if parent in reshaped_hosts:
            by_host.setdefault(parent, []).append(rp_uuid)
        else:
            one_by_one.append(rp_uuid)

    print('%-34s %6s %8s %8s %8s %8s' % (
        'request', 'count', 'wall ms', 'plc ms', 'pg ms', 'client ms'))
    print('(per request; a reshape line is per provider it carries)')
    names_and_sends = [
        ('GET /', lambda _: client.check_version(), new, 1),
        ('GET /resource_providers?name=', client.find_provider_by_name,
         hosts * DEVICES_PER_HOST, 1),
        ('POST /resource_providers', lambda rp: client.create_provider(*rp),
         new, 1),
        ('PUT /resource_providers/{u}/traits',
         lambda rp: client.set_traits(rp[0], 0, TRAITS), new, 1),
        ('POST /reshaper (8 providers)',
         lambda parent: client.reshape_inventories(
             dict.fromkeys(by_host[parent], (1, INVENTORY))),
         list(by_host), DEVICES_PER_HOST),
        ('PUT /resource_providers/{u}/inv.',
         lambda rp: client.set_inventories(rp, 1, INVENTORY), one_by_one, 1),
        ('GET /resource_providers/{u}', lambda rp: client.get_provider(rp[0]),
         new, 1),
    ]
    return {name: meter.run(name, send, items, per_item=per_item)
            for name, send, items, per_item in names_and_sends}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--providers', type=int, default=800,
                        help='providers created (800: 100 hosts of 8)')
    parser.add_argument('--workers', type=int, default=8,
                        help='requests sent concurrently (8)')
    bench_placement.add_arguments(parser)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-placement-')
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        with bench_placement.server(args, pg, workdir) as placement:
            # As the conductor's service user: the reshaper needs the
            # service role.
            client = placement_client.PlacementClient.for_endpoint(
                placement.url, roles=['admin', 'service'])
            meter = Meter([placement.process.pid],
                          cpu.pids_with(pg.data_dir), args.workers)
            print('Placement (%s, %d workers) on PostgreSQL, %d concurrent '
                  'requests' % (args.placement_server,
                                args.placement_workers, args.workers))
            print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
            floor = registration_floor(measure(client, meter,
                                               args.providers))
            print('a registration\'s requests, per host: %.1f ms wall, '
                  '%.1f ms Placement CPU' % (floor['wall'],
                                             floor['placement']))
            print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
