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

"""Benchmark: importing an upstream OpenStack Cyborg database, then the
first report of every host.

1. Generation (not measured): upstream's schema made by upstream's own
   migrations (``.venv-upstream``'s ``cyborg-dbsync``) on PostgreSQL, and
   ``--hosts`` hosts of ``--devices`` devices, each device as upstream
   records the device our fake driver reports (one deployable of 4
   TEST_PCI handles, upstream's name and provider uuid), and ``--arqs``
   ARQs, half of them Bound.
2. Import (measured): ``cyborg-manage upstream-import``'s code into a
   migrated PostgreSQL database: seconds and rows written per second.
3. First reports (measured; ``--no-reports`` skips it): Placement as
   upstream left it (a compute node per host, a provider per deployable
   with upstream's uuid and name, its inventory and traits, an allocation
   per Bound ARQ; not measured), then each host's first report of our
   fake driver applied by the conductor's code (``apply_report``) and
   synced to Placement, 8 hosts at once: wall time, resource providers
   created and deleted (target 0), devices and deployables that kept
   their uuids, Bound ARQs whose handle is still theirs, FPGA units
   still allocated.

    .venv/bin/python tools/bench/upstream_import.py [--hosts 1000]
"""

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import sys
import tempfile
import time
import uuid
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)
warnings.filterwarnings('ignore')

import sqlalchemy as sa  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.accelerator.drivers.fake import driver as fake  # noqa: E402
from cyborg.allinone import embedded_placement  # noqa: E402
from cyborg.clients import placement as placement_client  # noqa: E402
from cyborg.conductor import placement_sync  # noqa: E402
from cyborg.conf import CONF  # noqa: E402
from cyborg.db import api as db_api  # noqa: E402
from cyborg.db import inventory  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import models  # noqa: E402
from cyborg.db import upstream_import  # noqa: E402
from cyborg.domain import device_tree  # noqa: E402
from tests.functional import servers  # noqa: E402
from tests.functional import upstream_db  # noqa: E402
from tools import bench  # noqa: E402
from tools.bench import cpu  # noqa: E402
from tools.bench import placement as bench_placement  # noqa: E402

ACCELERATORS = 4  # our fake driver's accelerators_per_device default
TRAITS = ['CUSTOM_FAKE_DEVICE', 'OWNER_CYBORG']
PROJECT = 'bench-project'
ALLOCATION_VERSION = '1.36'
ALLOCATIONS_PER_REQUEST = 20
WHEN = datetime.datetime(2025, 1, 1)


def _bus(index: int) -> str:
    """Our fake driver's bus of its device ``index``."""
    return '%02x' % (0x10 + index)


def _handle_info(bus: str, index: int) -> str:
    """Upstream's attach info of handle ``index`` (from 1) of the device
    on ``bus``: the function our fake driver reports, spelt as upstream's
    fake driver spells it (no padding)."""
    return json.dumps({'domain': '0000', 'bus': bus,
                       'device': '%x' % (index // 8),
                       'function': str(index % 8)})


def upstream_rows(hosts: list[str], devices: int, arqs: int) -> dict:
    """Upstream's rows: per host ``devices`` devices, each one deployable
    (upstream's name and provider uuid) of :data:`ACCELERATORS` handles;
    ``arqs`` ARQs, the first half Bound to a handle each."""
    rows = collections.defaultdict(list)
    rows['device_profiles'].append(dict(
        id=1, uuid=str(uuid.uuid4()), name='bench-fpga', created_at=WHEN,
        profile_json=json.dumps({'groups': [{'resources:FPGA': '1'}]})))
    number = 0
    for host in hosts:
        for index in range(devices):
            number += 1
            bus = _bus(index)
            name = '%s_%s' % (host, bus)
            rows['devices'].append(dict(
                id=number, uuid=str(uuid.uuid4()), type='FPGA',
                vendor='0xABCD', model='Fake Accelerator', hostname=host,
                status='enabled', created_at=WHEN))
            rows['controlpath_ids'].append(dict(
                id=number, uuid=str(uuid.uuid4()), device_id=number,
                cpid_type='PCI', created_at=WHEN, cpid_info=json.dumps(
                    {'domain': '0000', 'bus': bus, 'device': '00',
                     'function': '0'})))
            rows['deployables'].append(dict(
                id=number, uuid=str(uuid.uuid4()), name=name,
                num_accelerators=ACCELERATORS, device_id=number,
                rp_uuid=str(uuid.uuid3(uuid.NAMESPACE_DNS, name)),
                driver_name='fake', created_at=WHEN))
            for key, value in (('rc', 'FPGA'), ('trait0', TRAITS[0])):
                rows['attributes'].append(dict(
                    id=len(rows['attributes']) + 1, uuid=str(uuid.uuid4()),
                    deployable_id=number, key=key, value=value,
                    created_at=WHEN))
            for handle in range(1, ACCELERATORS + 1):
                rows['attach_handles'].append(dict(
                    id=len(rows['attach_handles']) + 1,
                    uuid=str(uuid.uuid4()), deployable_id=number,
                    cpid_id=number, in_use=False, attach_type='TEST_PCI',
                    attach_info=_handle_info(bus, handle),
                    created_at=WHEN))
    bound = arqs // 2
    deployables = rows['deployables']
    for index in range(arqs):
        arq = dict(id=index + 1, uuid=str(uuid.uuid4()), project_id=PROJECT,
                   device_profile_id=1, device_profile_group_id=0,
                   substate='Initial', created_at=WHEN, hostname=None,
                   device_rp_uuid=None, instance_uuid=None,
                   attach_handle_id=None, deployable_id=None)
        if index < bound:
            # Spread over the deployables, one handle each.
            deployable = deployables[index % len(deployables)]
            handle = rows['attach_handles'][
                (deployable['id'] - 1) * ACCELERATORS
                + index // len(deployables)]
            handle['in_use'] = True
            device = rows['devices'][deployable['device_id'] - 1]
            arq.update(state='Bound', hostname=device['hostname'],
                       device_rp_uuid=deployable['rp_uuid'],
                       instance_uuid=str(uuid.uuid4()),
                       attach_handle_id=handle['id'],
                       deployable_id=deployable['id'])
        else:
            arq['state'] = ('Initial', 'BindFailed', 'Unbound')[index % 3]
        rows['extended_accelerator_requests'].append(arq)
    return rows


def generate(pg, hosts, args) -> tuple[str, dict]:
    source = pg.create_database('cyborg_upstream')
    started = time.monotonic()
    upstream_db.migrate(source)
    migrated = time.monotonic() - started
    rows = upstream_rows(hosts, args.devices, args.arqs)
    started = time.monotonic()
    upstream_db.insert(source, rows)
    print('upstream database: schema by upstream 17.0.0\'s migrations in '
          '%.1f s, %d rows inserted in %.1f s (not measured)' % (
              migrated, sum(map(len, rows.values())),
              time.monotonic() - started), flush=True)
    return source, rows


def measure_import(source: str, target_url: str) -> None:
    target = sa.create_engine(target_url)
    migration.upgrade(engine=target)
    marks = []
    started = time.monotonic()
    cpu_before = cpu.own_cpu()
    report = upstream_import.import_database(
        source, target, step=lambda table: marks.append(
            (table, time.monotonic())))
    elapsed = time.monotonic() - started
    own = cpu.own_cpu() - cpu_before
    written = sum(report.imported_rows.values()) + 1
    print('import: %.2f s, %d rows written, %.0f rows/s (%d rows read); '
          'importer CPU %.2f s' % (elapsed, written, written / elapsed,
                                   sum(report.source_rows.values()), own))
    previous = started
    steps = []
    for table, at in marks:
        steps.append('%s %.2f' % (table, at - previous))
        previous = at
    print('  seconds to the end of each table (the first includes reading '
          'and planning): ' + ', '.join(steps))
    print('  ARQ states: %s' % json.dumps(report.states, sort_keys=True))
    target.dispose()


def _provider(client, compute: str, deployable: dict) -> None:
    """A deployable's provider as upstream's conductor made it."""
    generation = client.create_provider(deployable['rp_uuid'],
                                        deployable['name'],
                                        compute)['generation']
    generation = client.set_inventories(deployable['rp_uuid'], generation, {
        'FPGA': {'total': ACCELERATORS, 'max_unit': ACCELERATORS}})
    client.set_traits(deployable['rp_uuid'], generation, TRAITS)


def _allocate(client, arqs) -> None:
    """One FPGA of its deployable's provider to each ARQ's instance."""
    client.request('POST', '/allocations', json={
        arq['instance_uuid']: {
            'allocations': {arq['device_rp_uuid']: {
                'resources': {'FPGA': 1}}},
            'project_id': PROJECT, 'user_id': 'nova',
            'consumer_generation': None}
        for arq in arqs}, microversion=ALLOCATION_VERSION)


def upstream_placement(client, hosts, rows, workers: int) -> None:
    """Placement as upstream left it (not measured)."""
    started = time.monotonic()
    for trait in TRAITS:
        client.ensure_trait(trait)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        computes = dict(zip(hosts, pool.map(
            lambda h: embedded_placement.ensure_compute_node(client, h),
            hosts), strict=True))
        by_id = {d['id']: d for d in rows['devices']}
        list(pool.map(lambda d: _provider(
            client, computes[by_id[d['device_id']]['hostname']], d),
            rows['deployables']))
        bound = [arq for arq in rows['extended_accelerator_requests']
                 if arq['state'] == 'Bound']
        # Nova's allocations, many consumers per request.
        list(pool.map(lambda start: _allocate(
            client, bound[start:start + ALLOCATIONS_PER_REQUEST]),
            range(0, len(bound), ALLOCATIONS_PER_REQUEST)))
    print('Placement as upstream left it: %d compute nodes, %d providers, '
          '%d allocations in %.1f s (not measured)' % (
              len(hosts), len(rows['deployables']), len(bound),
              time.monotonic() - started), flush=True)


def _providers(client) -> set[str]:
    return {provider['uuid'] for provider in client.request(
        'GET', '/resource_providers').json()['resource_providers']}


def _allocated(client) -> int:
    usages = client.request('GET', '/usages?project_id=%s' % PROJECT,
                            microversion='1.9').json()['usages']
    return usages.get('FPGA', 0)


def first_reports(client, hosts, rows, target_url: str,
                  workers: int) -> None:
    """Every host's first report of our fake driver, applied and synced
    as the conductor does; what became of the imported rows."""
    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('connection', target_url, group='database')
    CONF.set_override('num_devices', len(rows['devices']) // len(hosts),
                      group='fake_driver')
    db_api.configure(CONF)
    wire = device_tree.tree_to_wire(fake.FakeDriver(CONF).discover())
    digest = device_tree.tree_digest(wire)
    context = cyborg_context.get_admin_context()
    sync = placement_sync.PlacementSync(client)
    before, allocated = _providers(client), _allocated(client)
    requests = client.request_count

    def report(host):
        inventory.apply_report(context, host, host, wire, digest, [])
        return sync.sync_host(context, host)

    started = time.monotonic()
    cpu_before = cpu.own_cpu()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        synced = list(pool.map(report, hosts))
    elapsed = time.monotonic() - started
    own = cpu.own_cpu() - cpu_before
    after = _providers(client)
    print('first reports: %d hosts in %.1f s (%.1f ms per host, %.1f '
          'Placement requests per host; conductor code CPU %.1f s); %d '
          'hosts fully synced (the others wait for allocations to go '
          'before renaming a provider)' % (
              len(hosts), elapsed, elapsed * 1000 / len(hosts),
              (client.request_count - requests) / len(hosts), own,
              sum(synced)))
    print('resource providers created: %d, deleted: %d (target 0); FPGA '
          'units allocated: %d before, %d after' % (
              len(after - before), len(before - after), allocated,
              _allocated(client)))
    _check_rows(rows)


def _check_rows(rows) -> None:
    engine = db_api.get_engine()
    with engine.connect() as connection:
        devices = {row.uuid for row in connection.execute(
            sa.select(models.DEVICES.c.uuid))}
        deployables = set(connection.execute(sa.select(
            models.DEPLOYABLES.c.uuid, models.DEPLOYABLES.c.rp_uuid,
            models.DEPLOYABLES.c.retained)).all())
        bound = set(connection.execute(sa.select(
            models.ARQS.c.uuid, models.HANDLES.c.uuid).join(
            models.HANDLES, models.HANDLES.c.id
            == models.ARQS.c.attach_handle_id).where(
            models.ARQS.c.state == 'Bound',
            models.HANDLES.c.in_use == sa.true())).all())
    handles = {h['id']: h['uuid'] for h in rows['attach_handles']}
    kept_devices = len(devices & {d['uuid'] for d in rows['devices']})
    kept = len({(d, rp) for d, rp, _retained in deployables}
               & {(d['uuid'], d['rp_uuid']) for d in rows['deployables']})
    kept_bound = len(bound & {
        (arq['uuid'], handles[arq['attach_handle_id']])
        for arq in rows['extended_accelerator_requests']
        if arq['state'] == 'Bound'})
    print('devices kept: %d of %d; deployables kept (uuid and provider): '
          '%d of %d (now %d, %d retained); Bound ARQs still holding their '
          'handle: %d of %d' % (
              kept_devices, len(rows['devices']), kept,
              len(rows['deployables']), len(deployables),
              sum(1 for row in deployables if row[2]), kept_bound,
              sum(1 for arq in rows['extended_accelerator_requests']
                  if arq['state'] == 'Bound')))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8,
                        help='devices per host (8)')
    parser.add_argument('--arqs', type=int, default=10000,
                        help='ARQs, half of them Bound (10000)')
    parser.add_argument('--workers', type=int, default=8,
                        help='hosts reported at once (8)')
    parser.add_argument('--no-reports', action='store_true',
                        help='measure the import only')
    bench_placement.add_arguments(parser)
    args = parser.parse_args()
    if args.arqs // 2 > args.hosts * args.devices * ACCELERATORS:
        parser.error('more Bound ARQs than attach handles')
    upstream_db.dbsync()  # fails early, saying how, without upstream
    workdir = tempfile.mkdtemp(prefix='cyborg-bench-upstream-import-')
    hosts = ['bench-host-%04d' % i for i in range(args.hosts)]
    print('%d hosts x %d devices, %d ARQs (half Bound), PostgreSQL to '
          'PostgreSQL' % (args.hosts, args.devices, args.arqs))
    print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    with servers.PostgreSQLServer(base_dir=workdir) as pg:
        source, rows = generate(pg, hosts, args)
        target_url = pg.create_database('cyborg')
        measure_import(source, target_url)
        if not args.no_reports:
            with bench_placement.server(args, pg, workdir) as placement:
                client = placement_client.PlacementClient.for_endpoint(
                    placement.url, roles=['admin', 'service'])
                upstream_placement(client, hosts, rows, args.workers)
                first_reports(client, hosts, rows, target_url,
                              args.workers)
    print('reference loop: %.0f ms CPU' % cpu.reference_loop_ms())
    return 0


if __name__ == '__main__':
    bench.exit_on_sigterm()
    sys.exit(main())
