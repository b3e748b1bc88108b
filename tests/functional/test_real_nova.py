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

"""Cyborg with real Nova services: servers with accelerators.

The deployment (nova_services.py) runs nova-api, nova-conductor,
nova-scheduler and two nova-computes (Nova's fake virt driver) from the
installed ``nova`` package, a real Keystone, the real Placement,
cyborg-api (keystone), cyborg-conductor and one cyborg-agent per compute
host, Glance and Neutron stand-ins. Servers are booted through nova-api
as Keystone's admin, with flavors whose ``accel:device_profile`` names a
device profile created through Cyborg's API, and no networks.

Devices (fake driver):

* ``real-nova-1``: a PCI device with 2 handles (trait PCI_TRAIT) and an
  MDEV device with 2 handles (trait MDEV_TRAIT) whose preparation always
  fails (``[fake_driver] prepare_failures``);
* ``real-nova-2``: a PCI device with 2 handles (PCI_TRAIT).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import sys
import time
from typing import Any
import uuid

import pytest
import requests

from tests.functional import nova_services
from tests.functional import servers

HOST_1 = 'real-nova-1'
HOST_2 = 'real-nova-2'
PCI_TRAIT = 'CUSTOM_REAL_NOVA_PCI'
MDEV_TRAIT = 'CUSTOM_REAL_NOVA_MDEV'
GHOST_TRAIT = 'CUSTOM_REAL_NOVA_GHOST'
MDEV_ADDRESS = '0000:62:00.0'
PCI_HANDLES = 2
BUILD_TIMEOUT = 120
PLACEMENT = {'X-Auth-Token': 'admin',
             'OpenStack-API-Version': nova_services.PLACEMENT_VERSION}


def _device(address, trait, handle_type='PCI'):
    return {'address': address, 'type': 'FPGA', 'resource_class': 'FPGA',
            'traits': [trait], 'accelerators': PCI_HANDLES,
            'handle_type': handle_type, 'health': 'healthy'}


COMPUTES = [
    nova_services.ComputeSpec(
        HOST_1, [_device('0000:61:00.0', PCI_TRAIT),
                 _device(MDEV_ADDRESS, MDEV_TRAIT, 'MDEV')],
        fake_driver={'prepare_failures': MDEV_ADDRESS}),
    nova_services.ComputeSpec(HOST_2, [_device('0000:71:00.0', PCI_TRAIT)]),
]

_module_started = time.monotonic()


def _report(text: str) -> None:
    sys.__stderr__.write('\n[test_real_nova] %s\n' % text)
    sys.__stderr__.flush()


@pytest.fixture(scope='module')
def rn(postgres, rabbitmq, placement_pg, keystone, work_dir):
    started = time.monotonic()
    with nova_services.real_nova(
            'real-nova', postgres, rabbitmq, placement_pg, keystone,
            work_dir, COMPUTES,
            cyborg_options={'nova': {'retry_interval': 0.2,
                                     'retry_max_interval': 2}}) as d:
        _report('deployment started in %.1f s, %.1f s after the module '
                'was imported (Keystone and Placement included): %s'
                % (time.monotonic() - started,
                   time.monotonic() - _module_started, d.timings))
        d.profiles = {}
        d.flavors = {}
        try:
            yield d
            d.check_alive()
        finally:
            keep = os.environ.get('REAL_NOVA_LOG_DIR')
            if keep:  # the work directory goes at the end of the session
                shutil.copytree(d.directory, keep, dirs_exist_ok=True)
    _report('module ran %.1f s' % (time.monotonic() - _module_started))


@pytest.fixture
def boots(rn):
    """Servers a test boots (ids); deleted after it, and then nothing of
    theirs may be left in Cyborg or Placement."""
    ids: list[str] = []
    yield ids
    for server in ids:
        rn.compute_response('DELETE', '/servers/%s' % server)
    for server in ids:
        _wait_gone(rn, server)
    for server in ids:
        _assert_nothing_left(rn, server)
    # Every attach handle free again (MDEV ones once their agent
    # released them).
    servers.wait_for(lambda: _handles_in_use(rn) == 0, 30,
                     'every attach handle free: %s' % _handle_rows(rn))


# Helpers -------------------------------------------------------------------

def _profile(rn, trait: str) -> str:
    """A device profile (one FPGA with ``trait``), once per trait."""
    if trait not in rn.profiles:
        name = 'rn-%s' % trait.lower()[-8:]
        rn.cyborg('POST', '/device_profiles', json=[{
            'name': name,
            'groups': [{'resources:FPGA': '1', 'trait:' + trait:
                        'required'}]}])
        rn.profiles[trait] = name
    return rn.profiles[trait]


def _flavor(rn, trait: str) -> str:
    """A flavor with ``accel:device_profile`` for ``trait``'s profile."""
    if trait not in rn.flavors:
        profile = _profile(rn, trait)
        flavor = rn.compute('POST', '/flavors', json={'flavor': {
            'name': 'rn-%s' % profile, 'ram': 64, 'vcpus': 1,
            'disk': 1}})['flavor']
        rn.compute('POST', '/flavors/%s/os-extra_specs' % flavor['id'],
                   json={'extra_specs': {'accel:device_profile': profile}})
        rn.flavors[trait] = flavor['id']
    return rn.flavors[trait]


def _boot(rn, boots, trait: str = PCI_TRAIT, host: str | None = None
          ) -> str:
    body = {'name': 'rn-%s' % uuid.uuid4().hex[:6],
            'imageRef': nova_services.IMAGE_ID,
            'flavorRef': _flavor(rn, trait), 'networks': 'none'}
    if host:
        body['host'] = host
    server = rn.compute('POST', '/servers', json={'server': body})['server']
    boots.append(server['id'])
    return server['id']


def _server(rn, server: str) -> dict:
    return rn.compute('GET', '/servers/%s' % server)['server']


def _evacuation_ended(rn, server: str) -> bool:
    """Whether Nova has finished (or given up on) the evacuation of
    ``server``: its migration record is in a final state."""
    migrations = rn.compute(
        'GET', '/os-migrations?instance_uuid=%s' % server)['migrations']
    return any(m['migration_type'] == 'evacuation'
               and m['status'] in ('done', 'failed', 'error')
               for m in migrations)


def _wait_status(rn, server: str, status: str,
                 timeout: float = BUILD_TIMEOUT) -> dict:
    """Until ``server`` has ``status`` and no task; fails at once on an
    unexpected ERROR."""
    last: dict = {}

    def reached():
        last.clear()
        last.update(_server(rn, server))
        if last['status'] == 'ERROR' and status != 'ERROR':
            raise AssertionError('server %s ERROR: %s\nhandles: %s\n%s' % (
                server, last.get('fault'), _handle_rows(rn), rn.logs(30)))
        return (last['status'] == status
                and last.get('OS-EXT-STS:task_state') is None)
    if nova_services.poll_nova(reached, timeout):
        return dict(last)
    raise AssertionError('server %s not %s after %ss: %s %s\n%s' % (
        server, status, timeout, last.get('status'),
        last.get('OS-EXT-STS:task_state'), rn.logs(30)))


def _wait_gone(rn, server: str, timeout: float = 60) -> None:
    if nova_services.poll_nova(lambda: rn.compute_response(
            'GET', '/servers/%s' % server).status_code == 404, timeout):
        return
    raise AssertionError('server %s not deleted after %ss' % (server,
                                                              timeout))


def _action(rn, server: str, action: dict, status: str = 'ACTIVE') -> dict:
    rn.compute('POST', '/servers/%s/action' % server, json=action)
    return _wait_status(rn, server, status)


def _arqs(rn, instance: str | None = None) -> list[dict]:
    params = {'instance': instance} if instance else {}
    return rn.cyborg('GET', '/accelerator_requests', params=params)['arqs']


def _allocations(rn, consumer: str) -> dict[str, dict]:
    """Placement's allocations of ``consumer``: {provider: resources}."""
    response = requests.get(rn.placement.url + '/allocations/' + consumer,
                            headers=PLACEMENT, timeout=10)
    assert response.status_code == 200, response.text
    return {rp: value['resources']
            for rp, value in response.json()['allocations'].items()}


def _deployables(rn) -> dict[str, tuple[str, str]]:
    """Cyborg's providers: {rp_uuid: (host, device address)}."""
    rows = rn.db_rows(
        'SELECT dep.rp_uuid, d.hostname, d.address FROM deployables dep '
        'JOIN devices d ON d.id = dep.device_id '
        'WHERE dep.rp_uuid IS NOT NULL')
    return {str(rp): (host, address) for rp, host, address in rows}


def _events_accepted(rn, arq: str) -> int:
    """How many ``accelerator-request-bound`` events for ``arq`` nova-api
    accepted (it logs each one it passes to the instance's compute)."""
    return len(re.findall(r'Creating event accelerator-request-bound:%s '
                          % arq, rn.log_of('nova-api')))


def _events(rn, arq: str) -> list[Any]:
    """Cyborg's outbox rows of ``arq``'s events to Nova (status, when
    sent, Nova's refusal if any)."""
    return rn.db_rows('SELECT status, sent_at, last_error, attempts FROM '
                      'nova_events WHERE arq_uuid = :arq ORDER BY id',
                      arq=arq)


def _assert_one_event_each(rn, arqs, timeout: float = 30) -> dict:
    """Nova accepted exactly one ``completed`` event per ARQ of ``arqs``.

    The bind completes before Nova's conductor hands the instance to a
    compute, so nova-api may first refuse the event (422, no host yet):
    Cyborg sends it again until the instance has its host. {arq: the
    number of times it was sent}."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = {a: _events(rn, a) for a in arqs}
        if all(r and all(e.sent_at for e in r) for r in rows.values()):
            break
        time.sleep(0.25)
    else:
        raise AssertionError('events not sent: %s\n%s' % (rows,
                                                          rn.logs(30)))
    time.sleep(1)  # an extra event would follow at once
    sends = {}
    for arq in arqs:
        rows = _events(rn, arq)
        assert len(rows) == 1, rows
        (event,) = rows
        assert event.status == 'completed', event
        assert event.last_error is None, event  # taken, not dropped
        assert _events_accepted(rn, arq) == 1, arq
        sends[arq] = event.attempts
    return sends


def _assert_bound(rn, server: str, host: str, count: int = 1
                  ) -> dict[str, dict]:
    """``server``'s ARQs: ``count`` Bound on ``host``, each in Placement
    allocations of the server on Cyborg's provider of ``host``."""
    arqs = {a['uuid']: a for a in _arqs(rn, server)}
    assert len(arqs) == count, arqs
    providers = _deployables(rn)
    allocations = _allocations(rn, server)
    for arq in arqs.values():
        assert arq['state'] == 'Bound', arq
        assert arq['instance_uuid'] == server
        assert arq['hostname'] == host
        assert arq['attach_handle_type'] == 'PCI'
        assert providers[arq['device_rp_uuid']][0] == host
        assert allocations.get(arq['device_rp_uuid']) == {'FPGA': 1}, (
            allocations)
    return arqs


def _assert_nothing_left(rn, server: str) -> None:
    assert _arqs(rn, server) == []
    assert _allocations(rn, server) == {}


def _handle_rows(rn) -> list:
    return rn.db_rows(
        'SELECT h.id, h.in_use, d.hostname, d.address, a.uuid, a.state, '
        'a.instance_uuid FROM attach_handles h JOIN deployables dep ON '
        'dep.id = h.deployable_id JOIN devices d ON d.id = dep.device_id '
        'LEFT JOIN extended_accelerator_requests a ON '
        'a.attach_handle_id = h.id ORDER BY h.id')


def _handles_in_use(rn, address: str | None = None) -> int:
    sql = ('SELECT count(*) FROM attach_handles h JOIN deployables dep '
           'ON dep.id = h.deployable_id JOIN devices d ON '
           'd.id = dep.device_id WHERE h.in_use')
    if address:
        sql += ' AND d.address = :address'
    return rn.db_rows(sql, address=address)[0][0]


# Tests ---------------------------------------------------------------------

def test_boot_binds_arqs_allocates_and_notifies_nova(rn, boots):
    server = _boot(rn, boots)
    active = _wait_status(rn, server, 'ACTIVE')
    host = active['OS-EXT-SRV-ATTR:host']
    assert host in (HOST_1, HOST_2)
    arqs = _assert_bound(rn, server, host)
    # Nova's own request groups went to Placement with the accelerator:
    # the server's allocation includes the compute node and the device.
    allocations = _allocations(rn, server)
    assert len(allocations) == 2, allocations
    # One event per ARQ, answered by nova-api.
    _report('boot: sends per event %s' % _assert_one_event_each(rn, arqs))
    rn.check_alive()


def test_lifecycle_keeps_bound_arqs(rn, boots):
    server = _boot(rn, boots)
    host = _wait_status(rn, server, 'ACTIVE')['OS-EXT-SRV-ATTR:host']
    arqs = _assert_bound(rn, server, host)
    for action, status in (
            ({'reboot': {'type': 'SOFT'}}, 'ACTIVE'),
            ({'reboot': {'type': 'HARD'}}, 'ACTIVE'),
            ({'os-stop': None}, 'SHUTOFF'),
            ({'os-start': None}, 'ACTIVE'),
            ({'pause': None}, 'PAUSED'),
            ({'unpause': None}, 'ACTIVE'),
            ({'rebuild': {'imageRef': nova_services.IMAGE_ID}}, 'ACTIVE')):
        after = _action(rn, server, action, status)
        assert after['OS-EXT-SRV-ATTR:host'] == host
        assert _assert_bound(rn, server, host) == arqs, action
    # No further event for them.
    _assert_one_event_each(rn, arqs)


def test_shelve_offload_releases_and_unshelve_binds_new(rn, boots):
    server = _boot(rn, boots)
    host = _wait_status(rn, server, 'ACTIVE')['OS-EXT-SRV-ATTR:host']
    old = _assert_bound(rn, server, host)
    # [DEFAULT] shelved_offload_time = 0: offloaded at once.
    _action(rn, server, {'shelve': None}, 'SHELVED_OFFLOADED')
    assert _arqs(rn, server) == []
    assert _allocations(rn, server) == {}
    for arq in old:
        rn.cyborg('GET', '/accelerator_requests/%s' % arq, ok=(404,))
    assert _handles_in_use(rn) == 0
    active = _action(rn, server, {'unshelve': None}, 'ACTIVE')
    new = _assert_bound(rn, server, active['OS-EXT-SRV-ATTR:host'])
    assert not set(new) & set(old)
    _report('unshelve: sends per event %s'
            % _assert_one_event_each(rn, new))


def test_parallel_boots_take_every_accelerator_then_no_valid_host(rn,
                                                                  boots):
    free = PCI_HANDLES * 2
    with concurrent.futures.ThreadPoolExecutor(free) as pool:
        servers_ = list(pool.map(lambda _n: _boot(rn, boots), range(free)))
    hosts = {}
    for server in servers_:
        hosts[server] = _wait_status(rn, server, 'ACTIVE')[
            'OS-EXT-SRV-ATTR:host']
    assert sorted(hosts.values()) == sorted([HOST_1, HOST_2] * PCI_HANDLES)
    bound = {}
    for server, host in hosts.items():
        bound.update(_assert_bound(rn, server, host))
    # Placement agrees: every PCI provider full, none beyond.
    for rp, (_host, address) in _deployables(rn).items():
        response = requests.get(
            rn.placement.url + '/resource_providers/%s/usages' % rp,
            headers=PLACEMENT, timeout=10)
        used = response.json()['usages'].get('FPGA', 0)
        assert used == (0 if address == MDEV_ADDRESS else PCI_HANDLES), (
            rp, address, used)
    handles = {(a['attach_handle_info']['bus'],
                a['attach_handle_info']['function']) for a in bound.values()}
    assert len(handles) == free
    # One more: no accelerator left anywhere.
    extra = _boot(rn, boots)
    failed = _wait_status(rn, extra, 'ERROR')
    assert 'No valid host' in failed['fault']['message'], failed['fault']
    assert _arqs(rn, extra) == []
    assert _allocations(rn, extra) == {}
    # No ARQ beyond the bound ones.
    assert {a['uuid'] for a in _arqs(rn)} == set(bound)


@contextlib.contextmanager
def _ghost_provider(rn, host: str):
    """A child provider of ``host``'s compute node with one FPGA and
    GHOST_TRAIT that no agent reports (Cyborg has no deployable for
    it); deleted after."""
    root = nova_services._compute_node_provider(rn.placement, host)
    rp = str(uuid.uuid4())

    def call(method, path, ok, **kwargs):
        response = requests.request(method, rn.placement.url + path,
                                    headers=PLACEMENT, timeout=10, **kwargs)
        assert response.status_code in ok, response.text
        return response.json() if response.content else None
    call('PUT', '/traits/' + GHOST_TRAIT, (201, 204))
    call('POST', '/resource_providers', (200,), json={
        'uuid': rp, 'name': '%s_ghost' % host,
        'parent_provider_uuid': root})
    call('PUT', '/resource_providers/%s/inventories' % rp, (200,), json={
        'resource_provider_generation': 0,
        'inventories': {'FPGA': {'total': 1}}})
    call('PUT', '/resource_providers/%s/traits' % rp, (200,), json={
        'resource_provider_generation': 1, 'traits': [GHOST_TRAIT]})
    try:
        yield rp
    finally:
        call('DELETE', '/resource_providers/%s' % rp, (204, 404))


def test_bind_to_provider_without_deployable_fails_build(rn, boots):
    """Synchronous path: Placement picks a provider Cyborg has no
    deployable for; the bind PATCH answers 4xx, Nova's conductor fails
    the build and deletes the ARQs."""
    with _ghost_provider(rn, HOST_1) as ghost:
        server = _boot(rn, boots, GHOST_TRAIT)
        failed = _wait_status(rn, server, 'ERROR')
        assert _arqs(rn, server) == []
        profile = rn.profiles[GHOST_TRAIT]
        assert [a for a in _arqs(rn)
                if a['device_profile_name'] == profile] == []
        # Nova keeps an ERROR server's allocations until it is deleted.
        rn.compute('DELETE', '/servers/%s' % server)
        _wait_gone(rn, server)
        response = requests.get(
            rn.placement.url + '/resource_providers/%s/allocations' % ghost,
            headers=PLACEMENT, timeout=10)
        assert response.json()['allocations'] == {}
    conductor = rn.log_of('nova-conductor')
    refused = re.findall(r'AcceleratorRequestBindingFailed[^\n]*', conductor)
    assert refused, failed.get('fault')
    assert re.search(r'\b4(04|09)\b', '\n'.join(refused)), refused
    assert _events_accepted_for_server(rn, server) == 0
    assert _handles_in_use(rn) == 0


def _events_accepted_for_server(rn, server: str) -> int:
    return len(re.findall(r'Creating event accelerator-request-bound:\S+ '
                          r'for instance %s' % server, rn.log_of('nova-api')))


def test_failed_preparation_aborts_build(rn, boots):
    """Asynchronous path: the agent fails to prepare the MDEV handle. The
    ARQ never looks resolved to Nova (BindStarted, with bind_error), the
    ``failed`` event reaches the waiting nova-compute, which aborts the
    build and deletes the ARQ."""
    server = _boot(rn, boots, MDEV_TRAIT)
    seen: dict[str, set] = {}
    errors = set()
    events: dict[str, Any] = {}
    deadline = time.monotonic() + BUILD_TIMEOUT
    status = None
    while time.monotonic() < deadline:
        for arq in _arqs(rn, server):
            seen.setdefault(arq['uuid'], set()).add(arq['state'])
            if arq.get('bind_error'):
                errors.add(arq['bind_error'])
        for arq in seen:
            events[arq] = _events(rn, arq) or events.get(arq)
        status = _server(rn, server)
        if status['status'] == 'ERROR':
            break
        assert status['status'] != 'ACTIVE', (
            'built with an unprepared accelerator: %s' % seen)
        time.sleep(0.2)
    assert status and status['status'] == 'ERROR', (status, rn.logs(30))
    assert not any({'Bound', 'BindFailed'} & states
                   for states in seen.values()), seen
    _report('failed preparation: ARQ states seen %s, bind_error %s, '
            'events (status, sent, refusal, attempts) %s'
            % (seen, errors, events))
    assert any(e.status == 'failed' for rows in events.values() if rows
               for e in rows), events
    assert _arqs(rn, server) == []
    assert _allocations(rn, server) == {}
    assert _events_accepted_for_server(rn, server) >= 1
    compute = rn.log_of('nova-compute-%s' % HOST_1)
    assert 'Failure getting accelerator requests' in compute or (
        'Failure getting accelerator requests' in str(status.get('fault')))
    servers.wait_for(lambda: _handles_in_use(rn, MDEV_ADDRESS) == 0, 30,
                     'the MDEV handle released')


def test_evacuate_binds_new_arqs_on_the_other_host(rn, boots):
    server = _boot(rn, boots, host=HOST_1)
    assert _wait_status(rn, server, 'ACTIVE')['OS-EXT-SRV-ATTR:host'] == (
        HOST_1)
    old = _assert_bound(rn, server, HOST_1)
    compute_1 = 'nova-compute-%s' % HOST_1
    rn.stop_process(compute_1)
    service = rn.compute('GET', '/os-services?binary=nova-compute&host=%s'
                         % HOST_1)['services'][0]
    rn.compute('PUT', '/os-services/%s' % service['id'],
               json={'forced_down': True})
    try:
        rn.compute('POST', '/servers/%s/action' % server,
                   json={'evacuate': {}})
        # The server stays ACTIVE, with no task, until Nova's conductor
        # picks the evacuation up: wait for its migration record to end
        # first, or the check below may read the server before it moved.
        servers.wait_for(lambda: _evacuation_ended(rn, server),
                         BUILD_TIMEOUT, 'the evacuation of %s' % server,
                         interval=0.5)
        after = _wait_status(rn, server, 'ACTIVE')
        # An evacuation Nova gave up on (no valid host) leaves the server
        # ACTIVE where it was: say why.
        assert after['OS-EXT-SRV-ATTR:host'] == HOST_2, (
            'evacuation did not move the server: %s\nmigrations: %s\n%s'
            % (after.get('fault'), rn.compute(
                'GET', '/os-migrations?instance_uuid=%s' % server),
               rn.logs(60)))
        new = _assert_bound(rn, server, HOST_2)
        assert not set(new) & set(old)
        for arq in old:
            rn.cyborg('GET', '/accelerator_requests/%s' % arq, ok=(404,))
        _report('evacuate: sends per event %s'
                % _assert_one_event_each(rn, new))
    finally:
        # HOST_1 back: it removes the evacuated server's allocations on
        # its providers when it starts.
        process, start = rn.start_compute(HOST_1)
        process.wait_log('Starting compute node', start=start)
        # Nova refuses to force it up until the restarted compute has
        # completed the evacuation's migration record.
        servers.wait_for(lambda: rn.compute_response(
            'PUT', '/os-services/%s' % service['id'],
            json={'forced_down': False}).status_code == 200, 60,
            '%s forced up' % HOST_1, interval=1)
    host_1_rps = {rp for rp, (host, _a) in _deployables(rn).items()
                  if host == HOST_1}
    servers.wait_for(
        lambda: not set(_allocations(rn, server)) & host_1_rps, 60,
        'the evacuated server\'s allocations on %s removed' % HOST_1)
    assert set(_allocations(rn, server)) >= {
        a['device_rp_uuid'] for a in new.values()}


def test_delete_leaves_no_arq_and_no_allocation(rn, boots):
    server = _boot(rn, boots)
    _wait_status(rn, server, 'ACTIVE')
    _assert_bound(rn, server, _server(rn, server)['OS-EXT-SRV-ATTR:host'])
    rn.compute('DELETE', '/servers/%s' % server)
    _wait_gone(rn, server)
    boots.remove(server)
    _assert_nothing_left(rn, server)
    assert _arqs(rn) == []
    assert _handles_in_use(rn) == 0
    # No consumer left on any of Cyborg's providers.
    for rp in _deployables(rn):
        response = requests.get(
            rn.placement.url + '/resource_providers/%s/allocations' % rp,
            headers=PLACEMENT, timeout=10)
        assert response.json()['allocations'] == {}, rp
    rn.check_alive()


# Taints and tolerations ----------------------------------------------------

TAINT_KEY = 'rn.drain'
TAINT_TRAIT = 'CUSTOM_TAINT_RN_DRAIN'
TAINTED_ADDRESS = '0000:71:00.0'


def _write_devices(rn, host: str, devices: list[dict]) -> None:
    """What ``host``'s fake driver reports from its next discovery."""
    path = os.path.join(rn.directory, 'devices-%s.json' % host)
    with open(path + '.new', 'w') as f:
        json.dump(devices, f)
    os.replace(path + '.new', path)


def _provider_traits(rn, rp: str) -> list[str]:
    response = requests.get(
        rn.placement.url + '/resource_providers/%s/traits' % rp,
        headers=PLACEMENT, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()['traits']


def _tolerating_flavor(rn) -> str:
    """A flavor whose profile (PCI_TRAIT) tolerates TAINT_KEY."""
    rn.cyborg('POST', '/device_profiles', version='accelerator 2.8', json=[{
        'name': 'rn-tolerant',
        'groups': [{'resources:FPGA': '1', 'trait:' + PCI_TRAIT: 'required',
                    'toleration:' + TAINT_KEY: 'Exists'}]}])
    flavor = rn.compute('POST', '/flavors', json={'flavor': {
        'name': 'rn-tolerant', 'ram': 64, 'vcpus': 1, 'disk': 1}})['flavor']
    rn.compute('POST', '/flavors/%s/os-extra_specs' % flavor['id'],
               json={'extra_specs': {'accel:device_profile': 'rn-tolerant'}})
    return flavor['id']


def test_a_taint_keeps_untolerating_servers_off_its_device(rn, boots):
    """A NoSchedule driver taint on HOST_2's device: servers whose
    profile does not tolerate it land on HOST_1's device (and fill it);
    one whose profile tolerates it may still use the tainted device."""
    (spec,) = [c for c in COMPUTES if c.host == HOST_2]
    rp = next(rp for rp, (host, address) in _deployables(rn).items()
              if (host, address) == (HOST_2, TAINTED_ADDRESS))
    # The driver's taint alone (the agent derives the device's health
    # from it): a health verdict would add the catalog's own taint,
    # which the tolerating profile does not tolerate.
    tainted = [dict(device, taints=[{
        'key': TAINT_KEY, 'value': '', 'effect': 'NoSchedule',
        'source': 'driver', 'reason': 'drained for a test'}])
        for device in spec.devices]
    _write_devices(rn, HOST_2, tainted)
    try:
        servers.wait_for(lambda: TAINT_TRAIT in _provider_traits(rn, rp),
                         30, 'the taint trait on %s' % TAINTED_ADDRESS)
        # The profile Nova reads forbids it (once the sync is recorded
        # and the API's profile cache has let its last answer go).
        name = _profile(rn, PCI_TRAIT)
        servers.wait_for(lambda: rn.cyborg(
            'GET', '/device_profiles', params={'name': name})[
            'device_profiles'][0]['groups'][0].get(
            'trait:' + TAINT_TRAIT) == 'forbidden', 30,
            'the profile forbidding %s' % TAINT_TRAIT, interval=0.5)
        untolerating = [_boot(rn, boots) for _ in range(PCI_HANDLES)]
        for server in untolerating:
            assert _wait_status(rn, server, 'ACTIVE')[
                'OS-EXT-SRV-ATTR:host'] == HOST_1
            _assert_bound(rn, server, HOST_1)
        # HOST_1's PCI device is full: the tolerating server can only
        # land on the tainted device, and does.
        body = {'name': 'rn-tolerant-%s' % uuid.uuid4().hex[:6],
                'imageRef': nova_services.IMAGE_ID,
                'flavorRef': _tolerating_flavor(rn), 'networks': 'none'}
        server = rn.compute('POST', '/servers',
                            json={'server': body})['server']['id']
        boots.append(server)
        assert _wait_status(rn, server, 'ACTIVE')[
            'OS-EXT-SRV-ATTR:host'] == HOST_2
        (arq,) = _assert_bound(rn, server, HOST_2).values()
        assert arq['device_rp_uuid'] == rp
        # Its owner sees why its device is unhealthy (2.8).
        health = rn.cyborg('GET', '/accelerator_requests/%s' % arq['uuid'],
                           version='accelerator 2.8')['device_health']
        assert health['status'] == 'Unhealthy'
        assert health['reason'] == 'rn.drain: drained for a test'
    finally:
        _write_devices(rn, HOST_2, spec.devices)
        servers.wait_for(
            lambda: TAINT_TRAIT not in _provider_traits(rn, rp), 30,
            'the taint trait gone from %s' % TAINTED_ADDRESS)
