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

"""Replacing a running upstream Cyborg under real Nova, servers running.

One real Nova deployment (nova_services.py: Keystone, Placement on
PostgreSQL, nova-api, conductor, scheduler, computes with Nova's fake
virt driver) serves both runs of :func:`test_switch_from_upstream`, one
per import target (MariaDB, PostgreSQL). Each run has compute hosts of
its own, so nothing of the other run's is in its way:

1. upstream Cyborg 17.0.0 (upstream_cyborg.py, on MariaDB) on two new
   compute hosts: upstream's fake driver on both, its NVIDIA driver on a
   host tree with one passthrough T4 on the first;
2. device profiles created through upstream's API, flavors with
   ``accel:device_profile``; servers booted through nova-api (two on the
   fake device of host 1, one on host 2's, one on the GPU); every
   server's ``GET /v2/accelerator_requests?instance=`` answer,
   Placement's providers and the servers' allocations recorded;
3. our database migrated on the target, ``cyborg-manage upstream-import
   --dry-run`` while upstream still runs; then upstream's services
   stopped, ``cyborg-manage upstream-import --source`` run, our
   conductor, API (on upstream's endpoint) and agents started on the
   same hosts (our fake driver shaped as upstream's fake device, our
   NVIDIA driver on the same tree); the control-plane downtime (upstream
   stopped to our API answering with every host's first report applied
   and synced to Placement) is printed;
4. checks: every server's ARQs answer as before (uuids, states, attach
   handle info and every other field both APIs show); the same providers,
   the same allocations, none of them touched while we took over
   (:class:`PlacementWatch`); hard reboot and stop/start keep the ARQs;
   shelve (offloaded) frees the GPU and unshelve binds it again; delete
   frees the handle and the allocation; a new boot takes a free
   accelerator; Placement has no allocation whose provider or consumer
   is gone; deleting every server leaves nothing bound.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
import time
from typing import Any
import uuid

import pytest
import requests

from tests.fixtures.hosts import hosts as host_trees
from tests.functional import nova_services
from tests.functional import servers
from tests.functional import upstream_cyborg

TARGETS = ('mariadb', 'postgresql')
BUILD_TIMEOUT = 120
PLACEMENT = {'X-Auth-Token': 'admin',
             'OpenStack-API-Version': nova_services.PLACEMENT_VERSION}
# Nova's view of the ARQs: no microversion header (2.0); both services
# answer it.
ARQ_VERSION = 'accelerator 2.0'
# Fields both services show that may be written differently (upstream
# and our API format timestamps their own way).
NOT_COMPARED = {'links', 'created_at', 'updated_at'}
# Fields whose values must be there, equal, before and after.
ESSENTIAL = {'uuid', 'state', 'device_profile_name',
             'device_profile_group_id', 'hostname', 'device_rp_uuid',
             'instance_uuid', 'attach_handle_type', 'attach_handle_info'}
FPGA_PROFILE = 'us-fpga'
PGPU_PROFILE = 'us-pgpu'
PGPU_TRAIT = 'CUSTOM_NVIDIA_1EB8'  # upstream's trait of a T4

_module_started = time.monotonic()


def _report(text: str) -> None:
    sys.__stderr__.write('\n[test_upstream_switch] %s\n' % text)
    sys.__stderr__.flush()


@pytest.fixture(scope='module')
def nova(postgres, rabbitmq, mariadb, placement_pg, keystone, work_dir):
    """Real Nova with no Cyborg yet (each run starts its own); fails at
    once, before starting anything, without upstream's virtualenv."""
    version = upstream_cyborg.require_venv()
    assert version == '17.0.0', (
        'upstream virtualenv has openstack-cyborg %s, not 17.0.0: '
        'recreate it with tools/bench/upstream-venv.sh' % version)
    started = time.monotonic()
    with nova_services.real_nova(
            'upstream-switch', postgres, rabbitmq, placement_pg, keystone,
            work_dir, [], with_cyborg=False,
            cyborg_path=upstream_cyborg.API_PATH) as d:
        _report('Nova started in %.1f s: %s' % (time.monotonic() - started,
                                                d.timings))
        d.flavors = {}
        yield d
        keep = os.environ.get('REAL_NOVA_LOG_DIR')
        if keep:  # the work directory goes at the end of the session
            import shutil
            shutil.copytree(d.directory, keep, dirs_exist_ok=True)
    _report('module ran %.1f s' % (time.monotonic() - _module_started))


# Nova ------------------------------------------------------------------------

def _flavor(d, profile: str) -> str:
    """A flavor with ``accel:device_profile`` naming ``profile`` (once
    per deployment: each run's Cyborg has a profile of that name)."""
    if profile not in d.flavors:
        flavor = d.compute('POST', '/flavors', json={'flavor': {
            'name': profile, 'ram': 64, 'vcpus': 1, 'disk': 1}})['flavor']
        d.compute('POST', '/flavors/%s/os-extra_specs' % flavor['id'],
                  json={'extra_specs': {'accel:device_profile': profile}})
        d.flavors[profile] = flavor['id']
    return d.flavors[profile]


def _boot(d, profile: str, host: str) -> str:
    body = {'name': 'us-%s' % uuid.uuid4().hex[:6],
            'imageRef': nova_services.IMAGE_ID,
            'flavorRef': _flavor(d, profile), 'networks': 'none',
            'host': host}
    return d.compute('POST', '/servers', json={'server': body})['server'][
        'id']


def _server(d, server: str) -> dict:
    return d.compute('GET', '/servers/%s' % server)['server']


def _wait_status(d, server: str, status: str,
                 timeout: float = BUILD_TIMEOUT) -> dict:
    """Until ``server`` has ``status`` and no task; fails at once on an
    unexpected ERROR."""
    last: dict = {}

    def reached() -> bool:
        last.clear()
        last.update(_server(d, server))
        if last['status'] == 'ERROR' and status != 'ERROR':
            raise AssertionError('server %s ERROR: %s\n%s' % (
                server, last.get('fault'), d.logs(30)))
        return (last['status'] == status
                and last.get('OS-EXT-STS:task_state') is None)
    if nova_services.poll_nova(reached, timeout):
        return last
    raise AssertionError('server %s not %s after %ss: %s %s\n%s' % (
        server, status, timeout, last.get('status'),
        last.get('OS-EXT-STS:task_state'), d.logs(30)))


def _action(d, server: str, action: dict, status: str) -> dict:
    d.compute('POST', '/servers/%s/action' % server, json=action)
    return _wait_status(d, server, status)


def _delete(d, server: str, timeout: float = 60) -> None:
    d.compute('DELETE', '/servers/%s' % server, ok=(204, 404))
    if not nova_services.poll_nova(lambda: d.compute_response(
            'GET', '/servers/%s' % server).status_code == 404, timeout):
        raise AssertionError('server %s not deleted after %ss'
                             % (server, timeout))


# Cyborg and Placement --------------------------------------------------------

def _arqs(d, server: str) -> list[dict]:
    """The instance's ARQs as Nova reads them, sorted by uuid."""
    arqs = d.cyborg('GET', '/accelerator_requests', version=ARQ_VERSION,
                    params={'instance': server})['arqs']
    return sorted(arqs, key=lambda a: a['uuid'])


def _comparable(arqs: list[dict]) -> list[dict]:
    return [{k: v for k, v in arq.items() if k not in NOT_COMPARED}
            for arq in arqs]


def _placement(d, path: str) -> Any:
    response = requests.get(d.placement.url + path, headers=PLACEMENT,
                            timeout=10)
    assert response.status_code == 200, (path, response.text)
    return response.json()


def _allocations(d, consumer: str) -> dict[str, dict]:
    """{provider: resources} of ``consumer``."""
    return {rp: value['resources'] for rp, value in _placement(
        d, '/allocations/' + consumer)['allocations'].items()}


def _providers(d, hosts) -> dict[str, dict]:
    """Every provider in the trees of ``hosts``' compute nodes:
    {uuid: provider}."""
    found = {}
    for host in hosts:
        root = nova_services._compute_node_provider(d.placement, host)
        assert root, host
        for rp in _placement(d, '/resource_providers?in_tree=%s'
                             % root)['resource_providers']:
            found[rp['uuid']] = rp
    return found


def _capacity(d, rp: str) -> dict[str, int]:
    """{resource class: total - reserved} of provider ``rp``."""
    return {rc: inv['total'] - inv['reserved'] for rc, inv in _placement(
        d, '/resource_providers/%s/inventories' % rp)['inventories'].items()}


def _device_providers(d, hosts) -> set[str]:
    """The accelerator providers of ``hosts`` (the compute nodes'
    children)."""
    return {rp for rp, p in _providers(d, hosts).items()
            if p['parent_provider_uuid']}


class PlacementWatch:
    """Polls Placement while we take over: every provider of ``hosts``
    that holds an allocation must stay, and every consumer of
    ``frozen`` must keep exactly its allocations, on every poll."""

    def __init__(self, d, hosts, frozen: dict[str, dict]):
        self.d = d
        self.hosts = hosts
        self.frozen = frozen
        self.polls = 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PlacementWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        holding: set[str] = set()
        while not self._stop.wait(0.2):
            try:
                providers = set(_providers(self.d, self.hosts))
                for consumer, expected in self.frozen.items():
                    found = _allocations(self.d, consumer)
                    if found != expected:
                        self.violations.append(
                            'allocations of %s changed: %s -> %s'
                            % (consumer, expected, found))
                gone = holding - providers
                if gone:
                    self.violations.append(
                        'providers holding allocations deleted: %s' % gone)
                holding = {rp for alloc in self.frozen.values()
                           for rp in alloc} & providers
                self.polls += 1
            except (requests.RequestException, AssertionError) as e:
                self.violations.append('poll failed: %s' % e)


def _no_orphan_allocations(d, hosts) -> None:
    """Placement has no allocation on ``hosts``' providers whose
    consumer Nova does not know, nor one naming a provider that is
    gone."""
    providers = _providers(d, hosts)
    for rp in providers:
        consumers = _placement(d, '/resource_providers/%s/allocations'
                               % rp)['allocations']
        for consumer in consumers:
            assert d.compute_response(
                'GET', '/servers/%s' % consumer).status_code == 200, (
                'allocation of a deleted server %s on %s' % (consumer, rp))
            everything = _placement(d, '/allocations/' + consumer)[
                'allocations']
            known = _placement(d, '/resource_providers')[
                'resource_providers']
            assert set(everything) <= {p['uuid'] for p in known}, (
                consumer, everything)


def _handle_of(d, arq: str) -> tuple[str, bool] | None:
    """(attach handle uuid, in_use) of ``arq``'s handle in our
    database."""
    rows = d.db_rows(
        'SELECT h.uuid, h.in_use FROM extended_accelerator_requests a '
        'JOIN attach_handles h ON h.id = a.attach_handle_id '
        'WHERE a.uuid = :arq', arq=arq)
    return (rows[0][0], bool(rows[0][1])) if rows else None


def _handle_in_use(d, handle: str) -> bool:
    (row,) = d.db_rows('SELECT in_use FROM attach_handles '
                       'WHERE uuid = :handle', handle=handle)
    return bool(row[0])


def _reports_applied(d, hosts) -> bool:
    """Every host's first agent report applied (the import leaves the
    report hash empty)."""
    # The agents' rows are the only ones named by the compute hosts
    # (and "binary" is quoted differently by MariaDB and PostgreSQL).
    rows = d.db_rows('SELECT host, report_hash FROM services')
    return set(hosts) <= {host for host, digest in rows if digest}


def _manage(conf: str, *args: str) -> subprocess.CompletedProcess:
    return servers.run(
        [servers.venv_script('cyborg-manage'), '--config-file', conf]
        + list(args), timeout=300)


def _assert_bound_like(d, server: str, before: list[dict], what: str
                       ) -> None:
    after = _arqs(d, server)
    assert _comparable(after) == _comparable(before), (
        '%s: the ARQs of %s changed:\nbefore %s\nafter  %s'
        % (what, server, before, after))


# The test --------------------------------------------------------------------

def _target_database(request, d, target: str) -> str:
    """A new database for our Cyborg on ``target``; dropped after."""
    if target == 'postgresql':
        return d.database('cyborg_target')
    mariadb = request.getfixturevalue('mariadb')
    name = 'cyborg_target_%s' % d.suffix
    url = mariadb.create_database(name)
    request.addfinalizer(lambda: mariadb.drop_database(name))
    return url


@pytest.mark.parametrize('target', TARGETS)
def test_switch_from_upstream(nova, mariadb, work_dir, request, target):
    d = nova
    started = time.monotonic()
    tag = target[:2]
    host_1, host_2 = 'us-%s-1' % tag, 'us-%s-2' % tag
    tree = host_trees.passthrough_gpu_host(
        os.path.join(work_dir, 'upstream-switch-%s-host' % tag))
    computes = [
        nova_services.ComputeSpec(host_1, [upstream_cyborg.fake_device_spec()],
                                  host_root=tree.root, gpus=1),
        nova_services.ComputeSpec(host_2,
                                  [upstream_cyborg.fake_device_spec()])]
    hosts = [host_1, host_2]
    booted: list[str] = []
    try:
        _run(d, request, target, computes, hosts, booted, started)
    finally:
        ended = time.monotonic()
        for server in booted:
            d.compute_response('DELETE', '/servers/%s' % server)
        d.stop_cyborg()
        stopped = time.monotonic()
        d.retire_computes([h for h in hosts if h in d.computes])
        _report('%s: Cyborg stopped in %.1f s, hosts retired in %.1f s'
                % (target, stopped - ended, time.monotonic() - stopped))


def _run(d, request, target, computes, hosts, booted, started) -> None:
    host_1, host_2 = hosts
    # 1. Upstream on its hosts.
    d.start_computes(computes)
    upstream = upstream_cyborg.UpstreamCyborg(
        request.getfixturevalue('mariadb'), label='upstream-%s' % target)
    d.start_cyborg(upstream, agents=False)
    d.wait_computes(computes)
    _report('%s: upstream running on %s after %.1f s'
            % (target, hosts, time.monotonic() - started))

    # 2. Servers with accelerators under upstream.
    # Upstream takes one profile per request.
    for name, group in (
            (FPGA_PROFILE, {'resources:FPGA': '1', 'trait:%s'
                            % upstream_cyborg.FAKE_TRAIT: 'required'}),
            (PGPU_PROFILE, {'resources:PGPU': '1',
                            'trait:%s' % PGPU_TRAIT: 'required'})):
        d.cyborg('POST', '/device_profiles', version=ARQ_VERSION,
                 json=[{'name': name, 'groups': [group]}])
    fpga_1, fpga_1b, fpga_2, gpu = (
        _boot(d, FPGA_PROFILE, host_1), _boot(d, FPGA_PROFILE, host_1),
        _boot(d, FPGA_PROFILE, host_2), _boot(d, PGPU_PROFILE, host_1))
    booted += [fpga_1, fpga_1b, fpga_2, gpu]
    for server in booted:
        _wait_status(d, server, 'ACTIVE')
    before = {server: _arqs(d, server) for server in booted}
    for server, arqs in before.items():
        assert len(arqs) == 1 and arqs[0]['state'] == 'Bound', (server, arqs)
        assert ESSENTIAL <= set(arqs[0]), arqs
    assert before[gpu][0]['attach_handle_type'] == 'PCI', before[gpu]
    allocations = {server: _allocations(d, server) for server in booted}
    for server, arqs in before.items():
        assert arqs[0]['device_rp_uuid'] in allocations[server], (
            arqs, allocations[server])
    providers = _device_providers(d, hosts)
    assert len(providers) == 3, providers  # 2 fake devices, 1 GPU
    inventories = {rp: _capacity(d, rp) for rp in providers}
    upstream_url = upstream.database_url
    _report('%s: %d servers booted under upstream after %.1f s'
            % (target, len(booted), time.monotonic() - started))

    # 3. Our database ready; what the import would do, upstream running.
    ours = nova_services.OurCyborg(
        database_url=_target_database(request, d, target),
        label='cyborg-%s' % target)
    ours.configure(d)
    ours.migrate(d)
    dry_run = _manage(ours.conf, 'upstream-import', '--source',
                      upstream_url, '--dry-run')
    assert dry_run.returncode == 0, dry_run.stdout + dry_run.stderr
    _report('%s: upstream-import --dry-run:\n%s' % (target, dry_run.stdout))
    assert _empty_target(ours), 'the dry run wrote to the target'

    with PlacementWatch(d, hosts, allocations) as watch:
        d.stop_cyborg()
        stopped = time.monotonic()
        result = _manage(ours.conf, 'upstream-import', '--source',
                         upstream_url)
        assert result.returncode == 0, result.stdout + result.stderr
        imported = time.monotonic()
        d.start_cyborg(ours, configured=True)
        servers.wait_for(lambda: _reports_applied(d, hosts), 120,
                         'the first reports of %s applied\n%s'
                         % (hosts, d.logs(30)), interval=0.2)
        downtime = time.monotonic() - stopped
        time.sleep(2)  # a few more polls after the first sync
    _report('%s: control-plane downtime %.1f s (import %.1f s)\n%s'
            % (target, downtime, imported - stopped, result.stdout))
    assert not watch.violations, watch.violations
    assert watch.polls > 5, watch.polls

    # 4. Everything Nova holds on to, as it was.
    for server, arqs in before.items():
        _assert_bound_like(d, server, arqs, 'after the switch')
        assert _allocations(d, server) == allocations[server], server
    assert _device_providers(d, hosts) == providers
    # Our drivers report the same capacity on the adopted providers.
    assert {rp: _capacity(d, rp) for rp in providers} == inventories
    _no_orphan_allocations(d, hosts)
    # Providers that wait for their allocations to go leave their host
    # synced (retried every [conductor] adoption_interval), so reports
    # cost Placement nothing.
    sync_sql = ('SELECT host, sync_requested, sync_done FROM services '
                'WHERE report_hash IS NOT NULL')
    servers.wait_for(
        lambda: all(row[1] <= row[2] for row in d.db_rows(sync_sql)), 30,
        'every adopted host synced: %s' % (d.db_rows(sync_sql),),
        interval=0.5)
    handles = {server: _handle_of(d, arqs[0]['uuid'])
               for server, arqs in before.items()}
    assert all(h and h[1] for h in handles.values()), handles
    d.check_alive()

    # Hard reboot and stop/start keep the ARQs.
    for action, status in (({'reboot': {'type': 'HARD'}}, 'ACTIVE'),
                           ({'os-stop': None}, 'SHUTOFF'),
                           ({'os-start': None}, 'ACTIVE')):
        _action(d, fpga_1, action, status)
        _assert_bound_like(d, fpga_1, before[fpga_1], str(action))
    _action(d, gpu, {'reboot': {'type': 'HARD'}}, 'ACTIVE')
    _assert_bound_like(d, gpu, before[gpu], 'hard reboot')

    # Shelve (offloaded at once) frees the GPU; unshelve binds it again.
    _action(d, gpu, {'shelve': None}, 'SHELVED_OFFLOADED')
    assert _arqs(d, gpu) == []
    assert _allocations(d, gpu) == {}
    assert not _handle_in_use(d, handles[gpu][0])
    unshelved = _action(d, gpu, {'unshelve': None}, 'ACTIVE')
    assert unshelved['OS-EXT-SRV-ATTR:host'] == host_1
    (again,) = _arqs(d, gpu)
    assert again['state'] == 'Bound', again
    assert again['uuid'] != before[gpu][0]['uuid']
    assert again['device_rp_uuid'] == before[gpu][0]['device_rp_uuid']
    assert again['attach_handle_info'] == before[gpu][0][
        'attach_handle_info']
    assert again['device_rp_uuid'] in _allocations(d, gpu)

    # Delete frees the handle and the allocation.
    _delete(d, fpga_2)
    booted.remove(fpga_2)
    assert _arqs(d, fpga_2) == []
    assert _allocations(d, fpga_2) == {}
    assert not _handle_in_use(d, handles[fpga_2][0])

    # A new boot takes a free accelerator.
    fresh = _boot(d, FPGA_PROFILE, host_1)
    booted.append(fresh)
    _wait_status(d, fresh, 'ACTIVE')
    (arq,) = _arqs(d, fresh)
    assert arq['state'] == 'Bound', arq
    assert arq['device_rp_uuid'] == before[fpga_1][0]['device_rp_uuid']
    held = [_arqs(d, s)[0]['attach_handle_info'] for s in (fpga_1, fpga_1b)]
    assert arq['attach_handle_info'] not in held, (arq, held)
    assert arq['device_rp_uuid'] in _allocations(d, fresh)
    _no_orphan_allocations(d, hosts)
    assert _device_providers(d, hosts) == providers

    # Deleting every server leaves nothing bound.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda s: _delete(d, s), booted))
    gone, booted[:] = list(booted), []
    for server in gone:
        assert _arqs(d, server) == []
        assert _allocations(d, server) == {}
    servers.wait_for(lambda: d.db_rows(
        'SELECT count(*) FROM attach_handles WHERE in_use')[0][0] == 0, 30,
        'every attach handle free')
    for rp in providers:
        assert _placement(d, '/resource_providers/%s/allocations' % rp)[
            'allocations'] == {}, rp
    d.check_alive()
    _report('%s: run took %.1f s; downtime %.1f s' % (
        target, time.monotonic() - started, downtime))


def _empty_target(ours) -> bool:
    """Whether our database holds no device and no ARQ (what the import
    requires; a dry run must leave it so)."""
    counts = [ours.db_rows('SELECT count(*) FROM %s' % table)[0][0]
              for table in ('devices', 'extended_accelerator_requests',
                            'device_profiles')]
    return not any(counts)
