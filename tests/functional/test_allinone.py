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

"""The all-in-one shows its host's devices, and Placement schedules them.

What a new user sees after the README's run command: the fake driver's
device in the API and, in the embedded Placement, a provider under the
host's compute node that allocation candidates find. And Nova's cycle
from several clients at once, on the all-in-one's SQLite.
"""

import collections
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg.allinone import demo_host
from cyborg.clients import placement as placement_client
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional.fake_nova import FakeNova

SERVICE = {'X-Service-Roles': 'service'}
OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')


def _placement_url(allinone) -> str:
    with open(allinone.processes[0].log) as f:
        match = re.search(r'Placement:\s+(http://\S+)', f.read())
    assert match, allinone.logs()
    return match.group(1)


def _wait(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_devices_are_listed(allinone):
    # No waiting: the all-in-one says it is running only once the agent's
    # first report is stored, and a client may start on that line.
    devices = requests.get(allinone.url + '/v2/devices',
                           timeout=10).json()['devices']
    assert [d['type'] for d in devices] == ['FPGA']


@pytest.mark.parametrize('which', ['api', 'placement'])
def test_a_second_all_in_one_on_the_same_ports_says_which(allinone,
                                                          work_dir, which):
    """The README's start while another all-in-one runs: one line naming
    the busy address and the option that changes it, exit status 2,
    nothing left running (its ports and state stay free)."""
    busy = int(allinone.url.rsplit(':', 1)[1])
    option = '--port'
    ports = {'--port': str(servers.free_port()),
             '--placement-port': str(servers.free_port())}
    if which == 'placement':
        busy = int(_placement_url(allinone).rsplit(':', 1)[1])
        option = '--placement-port'
    ports[option] = str(busy)
    state = os.path.join(work_dir, 'busy-%s' % which)
    result = servers.run_script(
        'cyborg-all-in-one', '--state-dir', state,
        *[arg for item in ports.items() for arg in item], timeout=60)
    assert result.returncode == 2
    assert result.stderr == (
        'cyborg-all-in-one: cannot listen on 127.0.0.1:%d: Address already '
        'in use (the %s); choose another port with %s\n'
        % (busy, 'API' if which == 'api' else 'embedded Placement', option))
    assert 'Traceback' not in result.stdout
    assert not os.path.exists(os.path.join(state, 'cyborg.sqlite'))
    # The running one is unharmed.
    assert requests.get(allinone.url + '/v2/devices', timeout=10).ok


def test_ready_line_comes_after_the_first_inventory_report(work_dir):
    """A client that starts on the ready line finds the devices: with a
    discovery that takes 2 s, the line waits for the agent's first
    report to be stored."""
    directory = os.path.join(work_dir, 'allinone-slow-discovery')
    port = servers.free_port()
    process = servers.CyborgProcess(
        'cyborg-all-in-one', {
            'DEFAULT': {'host': 'functional-allinone-slow'},
            'fake_driver': {'discover_delay': 2},
        }, directory,
        args=['--host', servers.LOOPBACK, '--port', str(port),
              '--placement-port', '0',
              '--state-dir', os.path.join(directory, 'state')])
    try:
        process.start()
        process.wait_log(conftest.ALL_IN_ONE_RUNNING,
                         conftest.START_TIMEOUT)
        devices = conftest.api_devices(
            'http://%s:%d' % (servers.LOOPBACK, port))
        assert [d['hostname'] for d in devices] == [
            'functional-allinone-slow'], process.log_text()
    finally:
        process.stop()


def test_allocation_candidates_find_the_device(allinone):
    client = placement_client.PlacementClient.for_endpoint(
        _placement_url(allinone))

    def candidates():
        try:
            response = client.request(
                'GET', '/allocation_candidates?resources=FPGA:1'
                       '&required=CUSTOM_FAKE_DEVICE,OWNER_CYBORG')
        except placement_client.PlacementError:
            return None  # the trait does not exist until the first sync
        return response.json()['provider_summaries']

    summaries = _wait(candidates)
    deployable = requests.get(allinone.url + '/v2/deployables',
                              timeout=10).json()['deployables'][0]
    assert list(summaries) == [deployable['rp_uuid']]
    summary = summaries[deployable['rp_uuid']]
    assert summary['resources'] == {'FPGA': {'capacity': 4, 'used': 0}}
    assert set(summary['traits']) == {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'}


# Concurrency: Nova's cycle from 8 clients at once, on SQLite ----------------

CLIENTS = 8
CYCLES = 10  # per client
SERVICE = {'X-Service-Roles': 'service'}


@pytest.fixture(scope='module')
def busy_allinone(work_dir):
    """An all-in-one of its own on SQLite (2 fake devices of 8 PCI
    handles, enough for every client at once) whose Nova events go to a
    :class:`FakeNova`."""
    directory = os.path.join(work_dir, 'allinone-concurrency')
    port = servers.free_port()
    with FakeNova() as nova:
        process = servers.CyborgProcess(
            'cyborg-all-in-one', {
                'DEFAULT': {'host': 'functional-allinone-busy'},
                'fake_driver': {'num_devices': 2, 'handle_type': 'PCI',
                                'accelerators_per_device': 8},
                'nova': {'auth_type': 'admin_token', 'endpoint': nova.url,
                         'token': 'admin', 'endpoint_override': nova.url,
                         'timeout': 5},
            }, directory,
            args=['--host', servers.LOOPBACK, '--port', str(port),
                  '--placement-port', '0',
                  '--state-dir', os.path.join(directory, 'state')])
        try:
            process.start()
            process.wait_log(conftest.ALL_IN_ONE_RUNNING,
                             conftest.START_TIMEOUT)
            url = 'http://%s:%d' % (servers.LOOPBACK, port)
            servers.wait_for(
                lambda: len(conftest.api_devices(url)) == 2,
                conftest.START_TIMEOUT, 'the all-in-one\'s 2 devices',
                process.process, process.log)
            yield conftest.Deployment('allinone-busy', url, [process]), nova
        finally:
            process.stop()


def test_concurrent_nova_cycles(busy_allinone):
    """8 clients repeat Nova's cycle for an instance each (profile, create,
    bind, wait for the event, read the resolved ARQs, delete by instance)
    at once on the all-in-one's SQLite: no cycle fails, each ARQ's event
    is accepted once, and every handle is free at the end."""
    deployment, nova = busy_allinone
    api = deployment.url + '/v2'
    profile = 'aio-busy-%s' % uuid.uuid4().hex[:8]
    response = requests.post(api + '/device_profiles', timeout=30, json=[{
        'name': profile, 'groups': [{'resources:FPGA': '1',
                                     'trait:CUSTOM_FAKE_DEVICE':
                                         'required'}]}])
    assert response.status_code == 201, response.text
    hostname = conftest.api_devices(deployment.url)[0]['hostname']
    rps = [d['rp_uuid'] for d in requests.get(
        api + '/deployables', timeout=30).json()['deployables']]
    assert len(rps) == 2, rps
    failures, tags = [], []
    lock = threading.Lock()

    def cycle(client: int, number: int) -> None:
        session = requests.Session()
        instance = str(uuid.uuid4())
        response = session.get(api + '/device_profiles',
                               params={'name': profile}, timeout=30)
        assert response.status_code == 200, response.text
        response = session.post(api + '/accelerator_requests', timeout=30,
                                json={'device_profile_name': profile})
        assert response.status_code == 201, response.text
        arqs = [a['uuid'] for a in response.json()['arqs']]
        rp = rps[(client + number) % 2]
        response = session.patch(
            api + '/accelerator_requests', headers=SERVICE, timeout=30,
            json={arq: [{'op': 'add', 'path': '/hostname',
                         'value': hostname},
                        {'op': 'add', 'path': '/device_rp_uuid',
                         'value': rp},
                        {'op': 'add', 'path': '/instance_uuid',
                         'value': instance}] for arq in arqs})
        assert response.status_code == 202, response.text
        nova.wait_tags(arqs, 30)
        response = session.get(api + '/accelerator_requests', timeout=30,
                               params={'instance': instance,
                                       'bind_state': 'resolved'})
        assert response.status_code == 200, response.text
        resolved = response.json()['arqs']
        assert [(a['uuid'], a['state']) for a in resolved] == [
            (arq, 'Bound') for arq in arqs], resolved
        assert resolved[0]['attach_handle_type'] == 'PCI', resolved
        response = session.delete(api + '/accelerator_requests',
                                  params={'instance': instance},
                                  headers=SERVICE, timeout=30)
        assert response.status_code == 204, response.text
        with lock:
            tags.extend(arqs)

    def client(index: int) -> None:
        for number in range(CYCLES):
            try:
                cycle(index, number)
            except Exception as e:  # counted, reported below
                with lock:
                    failures.append('client %d cycle %d: %r'
                                    % (index, number, e))

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,))
               for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    elapsed = time.monotonic() - started
    print('%d cycles by %d clients in %.1fs (%.1f cycles/s)'
          % (len(tags), CLIENTS, elapsed, len(tags) / elapsed))
    assert failures == [], (failures[:5], deployment.logs())
    assert len(tags) == CLIENTS * CYCLES
    counts = nova.tag_counts()
    assert {counts[t] for t in tags} == {1}, collections.Counter(
        counts[t] for t in tags)
    assert requests.get(api + '/accelerator_requests',
                        timeout=30).json()['arqs'] == []
    # Every handle free again, none claimed twice meanwhile.
    engine = sa.create_engine('sqlite:///' + os.path.join(
        deployment.processes[0].work_dir, 'state', 'cyborg.sqlite'),
        poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            handles = list(connection.execute(sa.text(
                'SELECT in_use, count(*) FROM attach_handles '
                'GROUP BY in_use')))
    finally:
        engine.dispose()
    assert [tuple(row) for row in handles] == [(0, 16)], handles
    deployment.check_alive()


# The demo: --demo-hardware ------------------------------------------------

@pytest.fixture(scope='module')
def demo_allinone(work_dir):
    """``cyborg-all-in-one --demo-hardware``, as the README runs it."""
    directory = os.path.join(work_dir, 'allinone-demo')
    port = servers.free_port()
    process = servers.CyborgProcess(
        'cyborg-all-in-one', None, directory,
        args=['--demo-hardware', '--host', servers.LOOPBACK,
              '--port', str(port), '--placement-port', '0',
              '--state-dir', os.path.join(directory, 'state')])
    try:
        process.start()
        process.wait_log('Press Ctrl-C to stop.', conftest.START_TIMEOUT)
        yield conftest.Deployment(
            'allinone-demo', 'http://%s:%d' % (servers.LOOPBACK, port),
            [process])
    finally:
        process.stop()


def test_demo_lists_its_hardware_and_says_what_to_ask(demo_allinone):
    devices = conftest.api_devices(demo_allinone.url)
    assert sorted((d['type'], d['model']) for d in devices) == [
        ('FPGA', 'Intel FPGA N6000'), ('GPU', 'Tesla T4'),
        ('GPU', 'Tesla T4'), ('NIC', 'E810-C'), ('QAT', 'QAT 4xxx')]
    text = demo_allinone.processes[0].log_text()
    for asked in ('resources:PGPU=1', 'resources:VGPU=1',
                  'trait:%s=required' % demo_host.DEMO_VGPU_TRAIT,
                  'resources:CUSTOM_QAT=1', 'resources:CUSTOM_NIC=1',
                  'trait:%s=required' % demo_host.DEMO_PHYSNET_TRAIT,
                  'resources:FPGA=1', 'accel:function_name=gzip'):
        assert asked in text


def test_demo_allocation_candidates_find_a_qat_vf(demo_allinone):
    client = placement_client.PlacementClient.for_endpoint(
        _placement_url(demo_allinone))
    response = client.request('GET', '/allocation_candidates'
                                     '?resources=CUSTOM_QAT:1')
    qat = [d for d in requests.get(
        demo_allinone.url + '/v2/deployables',
        timeout=10).json()['deployables']
        if d['name'] == '0000_6b_00_0_vfs']  # the PF's VFs' child
    summaries = response.json()['provider_summaries']
    assert [rp for rp, s in summaries.items() if 'CUSTOM_QAT' in
            s['resources']] == [qat[0]['rp_uuid']]
    assert summaries[qat[0]['rp_uuid']]['resources']['CUSTOM_QAT'] == {
        'capacity': 4, 'used': 0}


def _demo_bind(demo, group: dict, deployable: str) -> tuple[dict, str]:
    """Create a profile of one ``group`` and its ARQ and bind it on the
    demo's ``deployable`` as Nova would: the Bound ARQ and its
    instance."""
    api = demo.url + '/v2'
    rp = {d['name']: d['rp_uuid'] for d in requests.get(
        api + '/deployables', timeout=10).json()['deployables']}[deployable]
    hostname = conftest.api_devices(demo.url)[0]['hostname']
    _arq, instance = nova_flow.start_bind(api, group, hostname, rp)

    def bound():
        arqs = requests.get(api + '/accelerator_requests', timeout=10,
                            params={'instance': instance}).json()['arqs']
        return arqs[0] if arqs[0]['state'] == 'Bound' else None

    arq = _wait(bound)
    assert arq, demo.logs()
    return arq, instance


def _demo_delete(demo, instance: str) -> None:
    response = requests.delete(demo.url + '/v2/accelerator_requests',
                               params={'instance': instance},
                               headers=SERVICE, timeout=30)
    assert response.status_code == 204, response.text


def test_demo_makes_the_vgpu_a_bind_creates(demo_allinone):
    """The demo's kernel stand-in: the mdev the driver creates on bind
    appears in the demo host, and goes on delete."""
    arq, instance = _demo_bind(
        demo_allinone,
        {'resources:VGPU': '1',
         'trait:' + demo_host.DEMO_VGPU_TRAIT: 'required'},
        '0000_d8_00_0_' + demo_host.DEMO_VGPU_TYPE)
    mdevs = os.path.join(demo_allinone.processes[0].work_dir, 'state',
                         'demo-host', 'sys', 'bus', 'mdev', 'devices')
    mdev = os.path.join(mdevs, arq['attach_handle_uuid'])
    assert _wait(lambda: os.path.isdir(mdev)), demo_allinone.logs()
    _demo_delete(demo_allinone, instance)
    assert _wait(lambda: not os.path.lexists(mdev)), demo_allinone.logs()
    demo_allinone.check_alive()


def test_demo_programs_the_fpga_with_the_function_a_profile_asks(
        demo_allinone):
    """The README's FPGA walk-through: a profile asking for the gzip
    function; the bind finds the demo's gzip bitstream in the served
    bitstream directory, programs it (the fake fpgaconf writes its
    accelerator id to the port's afu_id) and binds."""
    gzip_afu = demo_host.DEMO_BITSTREAMS['gzip'][0]
    arq, instance = _demo_bind(
        demo_allinone,
        {'resources:FPGA': '1', 'accel:function_name': 'gzip'},
        '0000_5e_00_0')
    afu_id = os.path.join(
        demo_allinone.processes[0].work_dir, 'state', 'demo-host', 'sys',
        'bus', 'pci', 'devices', demo_host.DEMO_FPGA_PF, 'fpga_region',
        'region0', 'dfl-port.0', 'afu_id')
    with open(afu_id) as f:
        assert f.read().strip() == gzip_afu
    (fpga,) = [d for d in requests.get(
        demo_allinone.url + '/v2/deployables', timeout=10,
        headers={'x-roles': 'admin'}).json()['deployables']
        if d['name'] == '0000_5e_00_0']
    assert fpga['bitstream_id'] is not None
    assert arq['attach_handle_type'] == 'PCI'
    _demo_delete(demo_allinone, instance)
    demo_allinone.check_alive()


# The openstack CLI against the demo, as the README runs it ------------------

def _cli(demo, *args: str) -> subprocess.CompletedProcess:
    """``openstack ARGS`` with ``OS_AUTH_TYPE=none`` and ``OS_ENDPOINT``
    the demo's API, as the README exports them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env.update(OS_AUTH_TYPE='none', OS_ENDPOINT=demo.url,
               PYTHONWARNINGS='ignore')
    return servers.run([OPENSTACK, *args], env=env, timeout=120)


def _deployable(demo, name: str) -> dict:
    (found,) = [d for d in requests.get(
        demo.url + '/v2/deployables', timeout=10).json()['deployables']
        if d['name'] == name]
    return found


def _arq_state(demo, arq: str) -> str:
    proc = _cli(demo, 'accelerator', 'arq', 'show', arq, '-f', 'value',
                '-c', 'state')
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_cli_programs_the_fpga_with_an_image_of_the_local_glance(
        demo_allinone):
    """``openstack accelerator deployable program`` first looks the image
    up in Glance, at the one endpoint a CLI without Keystone knows: the
    all-in-one answers Glance's image paths there with its local
    Glance's images."""
    demo = demo_allinone
    (aes,) = [image for image in requests.get(
        demo.url + '/v2/images', timeout=10).json()['images']
        if image['name'] == 'demo-aes']
    fpga = _deployable(demo, '0000_5e_00_0')
    proc = _cli(demo, 'accelerator', 'deployable', 'program', fpga['uuid'],
                aes['id'])
    assert proc.returncode == 0, proc.stderr + demo.logs()
    afu_id = os.path.join(
        demo.processes[0].work_dir, 'state', 'demo-host', 'sys', 'bus',
        'pci', 'devices', demo_host.DEMO_FPGA_PF, 'fpga_region', 'region0',
        'dfl-port.0', 'afu_id')
    with open(afu_id) as f:
        assert f.read().strip() == demo_host.DEMO_BITSTREAMS['aes'][0]
    unknown = str(uuid.uuid4())
    proc = _cli(demo, 'accelerator', 'deployable', 'program', fpga['uuid'],
                unknown)
    assert proc.returncode == 1
    assert 'image not found: %s' % unknown in proc.stderr
    demo.check_alive()


def test_cli_arq_commands_and_the_forms_that_stand_in_for_nova(
        demo_allinone):
    """What ``openstack accelerator arq`` does against the all-in-one:
    ``create`` and ``show`` work; ``bind`` looks the server up in Nova,
    which the all-in-one has not; ``unbind`` and deleting a bound ARQ
    need Nova's service token. Their working forms, as the README gives
    them: the API's PATCH and DELETE with ``X-Service-Roles: service``
    (noauth's stand-in for the service token)."""
    demo = demo_allinone
    api = demo.url + '/v2'
    name = 'cli-pgpu-%s' % uuid.uuid4().hex[:8]
    proc = _cli(demo, 'accelerator', 'device', 'profile', 'create', name,
                '--group', 'resources:PGPU=1')
    assert proc.returncode == 0, proc.stderr
    proc = _cli(demo, 'accelerator', 'arq', 'create', name, '-f', 'value',
                '-c', 'uuid')
    assert proc.returncode == 0, proc.stderr
    arq = proc.stdout.strip()
    rp = _deployable(demo, '0000_3b_00_0')['rp_uuid']
    hostname = conftest.api_devices(demo.url)[0]['hostname']
    instance = str(uuid.uuid4())

    proc = _cli(demo, 'accelerator', 'arq', 'bind', arq, hostname,
                instance, rp)
    assert proc.returncode == 1
    assert '/servers/' in proc.stderr and '404' in proc.stderr
    bind = [{'op': 'add', 'path': '/hostname', 'value': hostname},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
    response = requests.patch(api + '/accelerator_requests/' + arq,
                              json=bind, headers=SERVICE, timeout=30)
    assert response.status_code == 202, response.text
    assert _arq_state(demo, arq) == 'Bound'

    proc = _cli(demo, 'accelerator', 'arq', 'unbind', arq)
    assert proc.returncode == 1
    assert 'requires a service token' in proc.stderr
    response = requests.patch(
        api + '/accelerator_requests/' + arq, headers=SERVICE, timeout=30,
        json=[{'op': 'remove', 'path': '/' + field}
              for field in ('hostname', 'device_rp_uuid', 'instance_uuid')])
    assert response.status_code == 202, response.text
    assert _arq_state(demo, arq) == 'Unbound'

    response = requests.patch(api + '/accelerator_requests/' + arq,
                              json=bind, headers=SERVICE, timeout=30)
    assert response.status_code == 202, response.text
    proc = _cli(demo, 'accelerator', 'arq', 'delete', arq)
    assert proc.returncode == 1
    assert 'is bound to instance %s' % instance in proc.stderr
    response = requests.delete(api + '/accelerator_requests',
                               params={'instance': instance},
                               headers=SERVICE, timeout=30)
    assert response.status_code == 204, response.text
    proc = _cli(demo, 'accelerator', 'arq', 'show', arq)
    assert proc.returncode == 1 and 'not found' in proc.stderr
    # An unbound ARQ the CLI deletes itself.
    proc = _cli(demo, 'accelerator', 'arq', 'create', name, '-f', 'value',
                '-c', 'uuid')
    proc = _cli(demo, 'accelerator', 'arq', 'delete', proc.stdout.strip())
    assert proc.returncode == 0, proc.stderr
    demo.check_alive()
