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

"""The ARQ flow through the real clients, against the all-in-one
(``cyborg_endpoint``: fake driver with 4 TEST_PCI handles, embedded
Placement).

* openstacksdk: ``auth_type none`` with the endpoint; binding needs the
  service role, which a keystoneauth ``Session(additional_headers=...)``
  given to ``Connection(session=...)`` sends on every request (there is
  no Connection or clouds.yaml option for extra headers).
* ``openstack accelerator arq ...``: create, list, show and delete work
  with ``OS_AUTH_TYPE=none``. ``arq bind`` cannot be tested: it looks the
  server up in Nova (``compute.find_server``) and no Nova exists here;
  and the CLI has no way to send ``X-Service-Roles``, so ``arq unbind``
  is refused (403) as it would be for any user token.
* Nova's own client module (nova_arq_probe.py) for the same flow.
"""

import json
import os
import sys
import time
import uuid
import warnings

from keystoneauth1 import session as ksa_session
from keystoneauth1.loading import get_plugin_loader
from openstack import connection
from openstack import exceptions as sdk_exc
import pytest
import requests

from tests.compat.nova_arq_probe import Probe
from tests.functional import servers

OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
SERVICE = {'X-Service-Roles': 'service'}
ARQ_PATH = '/v2/accelerator_requests'


def _connect(endpoint, headers=None):
    auth = get_plugin_loader('none').load_from_options(endpoint=endpoint)
    session = ksa_session.Session(auth=auth, additional_headers=headers)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return connection.Connection(session=session)


@pytest.fixture(scope='module')
def service_conn(cyborg_endpoint):
    conn = _connect(cyborg_endpoint, SERVICE)
    yield conn
    conn.close()


@pytest.fixture(scope='module')
def user_conn(cyborg_endpoint):
    conn = _connect(cyborg_endpoint)
    yield conn
    conn.close()


@pytest.fixture(scope='module')
def rp_uuid(cyborg_endpoint):
    deployables = requests.get(cyborg_endpoint + '/v2/deployables',
                               timeout=10).json()['deployables']
    assert deployables and deployables[0]['rp_uuid']
    return deployables[0]['rp_uuid']


@pytest.fixture(scope='module')
def host(cyborg_endpoint):
    """The host of the deployable ``rp_uuid`` names: a bind must name it
    (or its compute node)."""
    devices = requests.get(cyborg_endpoint + '/v2/devices',
                           timeout=10).json()['devices']
    assert len({d['hostname'] for d in devices}) == 1, devices
    return devices[0]['hostname']


@pytest.fixture
def profile(cyborg_endpoint, unique_name):
    """A device profile asking for one FPGA: one ARQ per create."""
    name = unique_name('arq')
    response = requests.post(cyborg_endpoint + '/v2/device_profiles',
                             json=[{'name': name,
                                    'groups': [{'resources:FPGA': '1'}]}],
                             timeout=10)
    assert response.status_code == 201, response.text
    yield name
    requests.delete(cyborg_endpoint + '/v2/device_profiles/' + name,
                    timeout=10)


@pytest.fixture
def cleanup(cyborg_endpoint):
    """Deletes (service token) the ARQs a test registers."""
    uuids = []
    yield uuids
    for arq in uuids:
        requests.delete(cyborg_endpoint + ARQ_PATH + '/' + arq,
                        headers=SERVICE, timeout=10)


def _wait_resolved(endpoint, arq_uuid, timeout=30):
    """Binding is asynchronous: poll until Bound or BindFailed."""
    deadline = time.monotonic() + timeout
    while True:
        state = requests.get(endpoint + ARQ_PATH + '/' + arq_uuid,
                             timeout=10).json()['state']
        if state in ('Bound', 'BindFailed') or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def _bind_ops(hostname, rp, instance):
    return [{'op': 'add', 'path': '/hostname', 'value': hostname},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]


# openstacksdk ----------------------------------------------------------------

def test_sdk_create_list_get_bind_unbind_delete(host, service_conn, profile,
                                                rp_uuid, cleanup,
                                                cyborg_endpoint):
    acc = service_conn.accelerator
    arq = acc.create_accelerator_request(device_profile_name=profile)
    cleanup.append(arq.uuid)
    assert arq.state == 'Initial'
    assert arq.device_profile_name == profile
    assert arq.device_profile_group_id == 0
    assert arq.instance_uuid is None
    assert arq.uuid in {a.uuid for a in acc.accelerator_requests()}

    instance = str(uuid.uuid4())
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # deprecated alias of patch_...
        acc.update_accelerator_request(
            arq.uuid, _bind_ops(host, rp_uuid, instance))
    assert _wait_resolved(cyborg_endpoint, arq.uuid) == 'Bound'
    bound = acc.get_accelerator_request(arq.uuid)
    assert bound.state == 'Bound'
    assert bound.hostname == host
    assert bound.device_rp_uuid == rp_uuid
    assert bound.instance_uuid == instance
    assert bound.attach_handle_type == 'TEST_PCI'
    assert set(bound.attach_handle_info) == {'domain', 'bus', 'device',
                                             'function'}
    # openstacksdk knows no query parameter of this resource: it drops
    # ``instance`` and lists every ARQ, so filter as a caller must.
    listed = list(acc.accelerator_requests(instance=instance))
    assert {a.uuid for a in listed} == {
        a.uuid for a in acc.accelerator_requests()}
    assert [a.uuid for a in listed if a.instance_uuid == instance] == [
        arq.uuid]

    acc.patch_accelerator_request(
        arq.uuid, [{'op': 'remove', 'path': '/hostname'},
                   {'op': 'remove', 'path': '/device_rp_uuid'},
                   {'op': 'remove', 'path': '/instance_uuid'}])
    unbound = acc.get_accelerator_request(arq.uuid)
    assert unbound.state == 'Unbound'
    assert unbound.instance_uuid is None
    assert unbound.attach_handle_info == {}

    acc.delete_accelerator_request(arq.uuid, ignore_missing=False)
    with pytest.raises(sdk_exc.NotFoundException):
        acc.get_accelerator_request(arq.uuid)
    with pytest.raises(sdk_exc.NotFoundException):
        acc.delete_accelerator_request(arq.uuid, ignore_missing=False)
    assert acc.delete_accelerator_request(arq.uuid) is None


def test_sdk_create_returns_only_the_first_arq(service_conn, unique_name,
                                               cyborg_endpoint, cleanup):
    """openstacksdk's AcceleratorRequest keeps ``arqs[0]`` of the 201: a
    profile asking for 2 gives one resource back, both exist."""
    name = unique_name('arq2')
    response = requests.post(cyborg_endpoint + '/v2/device_profiles',
                             json=[{'name': name,
                                    'groups': [{'resources:FPGA': '2'}]}],
                             timeout=10)
    assert response.status_code == 201, response.text
    acc = service_conn.accelerator
    arq = acc.create_accelerator_request(device_profile_name=name)
    mine = [a.uuid for a in acc.accelerator_requests()
            if a.device_profile_name == name]
    cleanup.extend(mine)
    assert len(mine) == 2 and arq.uuid in mine


def test_sdk_without_service_role_cannot_bind(host, user_conn, service_conn,
                                              profile, rp_uuid, cleanup):
    arq = user_conn.accelerator.create_accelerator_request(
        device_profile_name=profile)
    cleanup.append(arq.uuid)
    with pytest.raises(sdk_exc.ForbiddenException):
        user_conn.accelerator.patch_accelerator_request(
            arq.uuid, _bind_ops(host, rp_uuid, str(uuid.uuid4())))
    assert user_conn.accelerator.get_accelerator_request(
        arq.uuid).state == 'Initial'
    service_conn.accelerator.patch_accelerator_request(
        arq.uuid, _bind_ops(host, rp_uuid, str(uuid.uuid4())))
    # Bound: only a service may delete it.
    with pytest.raises(sdk_exc.ForbiddenException):
        user_conn.accelerator.delete_accelerator_request(arq.uuid)
    service_conn.accelerator.delete_accelerator_request(arq.uuid)
    assert user_conn.accelerator.delete_accelerator_request(arq.uuid) is None


# openstack CLI ---------------------------------------------------------------

class CLI:
    def __init__(self, endpoint, cwd):
        self.argv0 = [OPENSTACK if os.path.exists(OPENSTACK)
                      else 'openstack']
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith('OS_')}
        self.env.update(OS_AUTH_TYPE='none', OS_ENDPOINT=endpoint,
                        PYTHONWARNINGS='ignore')
        self.cwd = cwd

    def run(self, *args):
        return servers.run(self.argv0 + list(args), env=self.env,
                           cwd=self.cwd, timeout=120)

    def json(self, *args):
        proc = self.run(*(args + ('-f', 'json')))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope='module')
def cli(cyborg_endpoint, tmp_path_factory):
    cli = CLI(cyborg_endpoint, str(tmp_path_factory.mktemp('cli')))
    commands = cli.run('help', 'accelerator').stdout
    for command in ('arq create', 'arq list', 'arq show', 'arq delete',
                    'arq bind', 'arq unbind'):
        assert 'accelerator ' + command in commands
    return cli


def test_cli_create_list_show_delete(cli, profile, cleanup):
    created = cli.json('accelerator', 'arq', 'create', profile)
    cleanup.append(created['uuid'])
    assert created['state'] == 'Initial'
    assert created['device_profile_name'] == profile
    listed = cli.json('accelerator', 'arq', 'list', '--long')
    assert created['uuid'] in {row['uuid'] for row in listed}
    shown = cli.json('accelerator', 'arq', 'show', created['uuid'])
    assert shown['uuid'] == created['uuid']
    assert shown['state'] == 'Initial'
    proc = cli.run('accelerator', 'arq', 'delete', created['uuid'])
    assert proc.returncode == 0, proc.stderr
    proc = cli.run('accelerator', 'arq', 'show', created['uuid'])
    assert proc.returncode != 0
    assert 'not found' in (proc.stdout + proc.stderr).lower()
    proc = cli.run('accelerator', 'arq', 'delete', created['uuid'])
    assert proc.returncode != 0
    assert '1 of 1 accelerator requests failed to delete' in proc.stderr


def test_cli_unbind_refused_without_service_role(host, cli, service_conn,
                                                 profile, rp_uuid, cleanup,
                                                 cyborg_endpoint):
    arq = service_conn.accelerator.create_accelerator_request(
        device_profile_name=profile)
    cleanup.append(arq.uuid)
    instance = str(uuid.uuid4())
    service_conn.accelerator.patch_accelerator_request(
        arq.uuid, _bind_ops(host, rp_uuid, instance))
    assert _wait_resolved(cyborg_endpoint, arq.uuid) == 'Bound'
    shown = cli.json('accelerator', 'arq', 'show', arq.uuid)
    assert shown['state'] == 'Bound'
    assert shown['instance_uuid'] == instance
    assert shown['attach_handle_type'] == 'TEST_PCI'
    proc = cli.run('accelerator', 'arq', 'unbind', arq.uuid)
    assert proc.returncode != 0
    assert '403' in proc.stderr or 'forbidden' in proc.stderr.lower(), (
        proc.stderr)
    assert cli.json('accelerator', 'arq', 'show',
                    arq.uuid)['state'] == 'Bound'
    proc = cli.run('accelerator', 'arq', 'delete', arq.uuid)
    assert proc.returncode != 0


# Nova's client module --------------------------------------------------------

def test_nova_client_flow(host, cyborg_endpoint, profile, rp_uuid):
    instance = str(uuid.uuid4())
    with Probe(cyborg_endpoint) as nova:
        arqs = nova('create_and_match', dp_name=profile,
                    rg_rp_map={'device_profile_0': [rp_uuid]})
        assert [a['device_rp_uuid'] for a in arqs] == [rp_uuid]
        nova('bind', bindings={arqs[0]['uuid']: {
            'hostname': host, 'device_rp_uuid': rp_uuid,
            'instance_uuid': instance}})
        # No Nova to wait for events from: poll as Nova's code cannot.
        assert _wait_resolved(cyborg_endpoint, arqs[0]['uuid']) == 'Bound'
        [arq] = nova('get_for_instance', instance_uuid=instance,
                     only_resolved=True)
        assert arq['state'] == 'Bound'
        assert arq['attach_handle_type'] == 'TEST_PCI'
        nova('delete_for_instance', instance_uuid=instance)
        assert requests.get(cyborg_endpoint + ARQ_PATH,
                            params={'instance': instance},
                            timeout=10).json() == {'arqs': []}
