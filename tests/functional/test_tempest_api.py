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

"""The unmodified cyborg-tempest-plugin API tests against this service.

A deployment as in production, on the session's PostgreSQL, RabbitMQ,
Placement and a real Keystone: ``cyborg-conductor``, ``cyborg-api`` with
``[api] auth_strategy = keystone`` (keystonemiddleware validates the
tokens Keystone issues to tempest's users) and one ``cyborg-agent`` with
the fake driver (one FPGA with the trait CUSTOM_FAKE_DEVICE, which the
plugin's device profiles ask for). The ``accelerator`` service and its
endpoint are in Keystone's catalog, where tempest finds them.

Tempest runs the installed plugin's ``cyborg_tempest_plugin.tests.api``
in a child process (``stestr``, two workers) with a generated
tempest.conf: dynamic credentials, so tempest creates the personas the
plugin's base class asks for (admin, project admin, manager, member,
reader, a user with the ``service`` role, a system admin) with
Keystone's admin; new policy defaults enforced. Its subunit stream is
read back here: every test must pass, except the
:data:`EXPECTED_DIFFERENCES` (see doc/source/api.rst, "Tempest
compatibility"), which must each fail, and only because this service
answered what it documents instead of upstream's 500.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
import time
import uuid as uuid_lib

import pytest
import requests

from cyborg.allinone import embedded_placement
from tests.functional import servers

START_TIMEOUT = 90
RUN_TIMEOUT = 420
AGENT_HOST = 'tempest-agent-1'
SERVICE_USER = 'cyborg-tempest-api'
PLUGIN_API_TESTS = 'cyborg_tempest_plugin.tests.api'
# The fake driver's default device (the plugin's profiles ask for
# resources:FPGA and trait:CUSTOM_FAKE_DEVICE).
FAKE_DEVICES = [{
    'address': '0000:10:00.0', 'type': 'FPGA', 'resource_class': 'FPGA',
    'traits': ['CUSTOM_FAKE_DEVICE'], 'accelerators': 4,
    'handle_type': 'TEST_PCI', 'health': 'healthy'}]

_DP_NEGATIVE = ('cyborg_tempest_plugin.tests.api.test_device_profile_negative'
                '.DeviceProfileNegativeTest.')

# Test id -> (HTTP status of our answer, what it sends), for the plugin's
# tests that expect upstream's 500 (tempest's ServerFault). Each must fail
# with tempest's exception for our status instead.
EXPECTED_DIFFERENCES = {
    _DP_NEGATIVE + 'test_create_device_profile_name_is_null': (
        400, 'a device profile with an empty name'),
    _DP_NEGATIVE + 'test_create_device_profile_name_to_long': (
        400, 'a device profile name of 256 characters'),
    _DP_NEGATIVE + 'test_create_device_profile_server_fault': (
        409, 'a device profile with the uuid of an existing one'),
}

# What tempest raises for an answer of each status.
TEMPEST_EXCEPTIONS = {400: 'tempest.lib.exceptions.BadRequest',
                      403: 'tempest.lib.exceptions.Forbidden',
                      404: 'tempest.lib.exceptions.NotFound',
                      409: 'tempest.lib.exceptions.Conflict'}


def _plugin_dir() -> str:
    import cyborg_tempest_plugin
    return os.path.dirname(os.path.abspath(cyborg_tempest_plugin.__file__))


@pytest.fixture(scope='module')
def cloud(postgres, rabbitmq, placement, keystone, work_dir):
    """The deployment of the module docstring; yields its API URL."""
    directory = os.path.join(work_dir, 'tempest-api')
    os.makedirs(directory)
    suffix = uuid_lib.uuid4().hex[:8]
    db_name = 'tempest_api_%s' % suffix
    db_url = postgres.create_database(db_name)
    transport = rabbitmq.create_vhost('tempest-api-%s' % suffix)
    port = servers.free_port()
    url = 'http://%s:%d' % (servers.LOOPBACK, port)
    password = secrets.token_hex(8)
    # Its own service user: other modules may give user "cyborg" another
    # password on the session's Keystone.
    keystone.add_user(SERVICE_USER, password, 'service',
                      ['admin', 'service'])
    keystone.add_service('accelerator', 'cyborg', url + '/v2')
    config = {
        'DEFAULT': {'transport_url': transport, 'state_path': directory,
                    'host': 'tempest-api-control',
                    'heartbeat_interval': 2, 'periodic_interval': 2},
        'database': {'connection': db_url},
        'api': {'auth_strategy': 'keystone', 'host_ip': servers.LOOPBACK,
                'port': port},
        'keystone_authtoken': keystone.authtoken_options(SERVICE_USER,
                                                         password),
        'placement': {'auth_type': 'admin_token', 'endpoint': placement.url,
                      'token': 'admin',
                      'endpoint_override': placement.url},
    }
    config_file = servers.write_config(
        os.path.join(directory, 'cyborg.conf'), config)
    servers.upgrade_cyborg_database(config_file, postgres)
    embedded_placement.ensure_compute_node(placement.client(), AGENT_HOST)
    devices_file = os.path.join(directory, 'agent-devices.json')
    with open(devices_file, 'w') as f:
        json.dump(FAKE_DEVICES, f)
    agent_config = {
        'DEFAULT': {'transport_url': transport, 'host': AGENT_HOST,
                    'state_path': directory, 'heartbeat_interval': 2},
        'agent': {'resource_provider_name': AGENT_HOST,
                  'discovery_interval': 2,
                  'enabled_drivers': 'fake_driver'},
        'fake_driver': {'devices_file': devices_file},
    }
    processes: list[servers.CyborgProcess] = []
    try:
        servers.start_control_plane(directory, config_file, port, processes,
                                    START_TIMEOUT)
        agent = servers.CyborgProcess('cyborg-agent', agent_config,
                                      directory).start()
        processes.append(agent)
        admin = keystone.admin_session()

        def device_visible():
            response = admin.get(url + '/v2/deployables', raise_exc=False)
            return (response.status_code == 200
                    and response.json()['deployables'])
        servers.wait_for(device_visible, START_TIMEOUT,
                         'the device of %s in the API' % AGENT_HOST,
                         agent.process, agent.log)
        yield {'url': url, 'directory': directory, 'processes': processes}
    finally:
        for process in reversed(processes):
            process.stop()
        postgres.drop_database(db_name)


def _tempest_conf(keystone, directory: str) -> str:
    """A tempest workspace's config for ``keystone``; its directory."""
    etc = os.path.join(directory, 'tempest-etc')
    os.makedirs(etc, exist_ok=True)
    servers.write_config(os.path.join(etc, 'tempest.conf'), {
        'DEFAULT': {'log_file': os.path.join(directory, 'tempest.log'),
                    'use_stderr': False},
        'oslo_concurrency': {'lock_path': os.path.join(directory,
                                                       'tempest-locks')},
        'auth': {'use_dynamic_credentials': True,
                 'create_isolated_networks': False,
                 'admin_username': 'admin',
                 'admin_password': keystone.admin_password,
                 'admin_project_name': 'admin',
                 'admin_domain_name': 'Default',
                 'admin_system': 'all',
                 'default_credentials_domain_name': 'Default'},
        'identity': {'uri_v3': keystone.url + '/v3', 'auth_version': 'v3',
                     'region': 'RegionOne', 'v3_endpoint_type': 'public',
                     'disable_ssl_certificate_validation': True},
        'identity-feature-enabled': {'api_v2': False, 'api_v3': True},
        'enforce_scope': {'keystone': True},
        'service_available': {'cyborg': True, 'nova': False,
                              'neutron': False, 'glance': False,
                              'cinder': False, 'swift': False},
        'cyborg_policy': {'enforce_new_defaults': True},
    })
    return etc


def _run_tempest(keystone, directory: str) -> tuple[dict, bytes, float]:
    """Run the plugin's API tests; ({test id: result}, stderr, seconds).

    A result is testtools' StreamToDict's dict: ``status`` (success,
    fail, skip, ...) and ``details`` (the traceback among them).
    """
    import subunit
    import testtools

    etc = _tempest_conf(keystone, directory)
    plugin = _plugin_dir()
    workspace = os.path.join(directory, 'tempest-run')
    os.makedirs(workspace, exist_ok=True)
    env = dict(os.environ, TEMPEST_CONFIG_DIR=etc,
               TEMPEST_CONFIG='tempest.conf', PYTHONUNBUFFERED='1')
    stestr = [sys.executable, '-m', 'stestr', '--test-path',
              os.path.join(plugin, 'tests', 'api'), '--top-dir',
              os.path.dirname(plugin),
              # tempest's grouping: a class runs in one worker, so its
              # credentials and resources are set up once.
              '--group-regex', r'([^\.]*\.)*']
    started = time.monotonic()
    result = subprocess.run(
        stestr + ['run', '--subunit', '--concurrency', '2',
                  PLUGIN_API_TESTS],
        cwd=workspace, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, timeout=RUN_TIMEOUT, check=False)
    elapsed = time.monotonic() - started
    results: dict = {}
    sink = testtools.StreamToDict(
        lambda test: results.__setitem__(test['id'], test))
    sink.startTestRun()
    subunit.ByteStreamToStreamResult(
        io.BytesIO(result.stdout), non_subunit_name='stdout').run(sink)
    sink.stopTestRun()
    results.pop('stdout', None)
    return results, result.stderr, elapsed


def _traceback(test: dict) -> str:
    return '\n'.join(detail.as_text() for name, detail in
                     test['details'].items()
                     if name in ('traceback', 'reason'))


def _test_source(test_id: str) -> str:
    import importlib
    import inspect
    module, cls, method = test_id.rsplit('.', 2)
    return inspect.getsource(getattr(getattr(
        importlib.import_module(module), cls), method))


@pytest.mark.parametrize('test_id', sorted(EXPECTED_DIFFERENCES))
def test_expected_differences_expect_upstream_500(test_id):
    """Each expected difference is a test of the installed plugin that
    expects upstream's 500 (and nothing else)."""
    source = _test_source(test_id)
    assert 'lib_exc.ServerFault' in source
    assert source.count('assertRaises') == 1


def test_tempest_plugin_api_tests(cloud, keystone):
    results, stderr, elapsed = _run_tempest(keystone, cloud['directory'])
    for process in cloud['processes']:
        assert process.running(), '%s died:\n%s' % (
            process.name, servers.tail(process.log))
    logs = '\n'.join('==== %s ====\n%s' % (p.name, servers.tail(p.log, 30))
                     for p in cloud['processes'])
    assert results, 'no test ran (%.0fs):\n%s\n%s' % (
        elapsed, stderr.decode(errors='replace')[-4000:], logs)
    unexpected = {}
    for test_id, test in sorted(results.items()):
        short = test_id.split('[')[0]
        if short in EXPECTED_DIFFERENCES:
            status, _what = EXPECTED_DIFFERENCES[short]
            raised = TEMPEST_EXCEPTIONS[status]
            traceback = _traceback(test)
            # It fails because we answered ``status`` where upstream
            # answers 500, and for no other reason.
            if not (test['status'] == 'fail' and raised in traceback):
                unexpected[test_id] = '%s, not the expected %s:\n%s' % (
                    test['status'], raised, traceback)
        elif test['status'] != 'success':
            unexpected[test_id] = '%s:\n%s' % (test['status'],
                                               _traceback(test))
    ran = {test_id.split('[')[0] for test_id in results}
    missing = set(EXPECTED_DIFFERENCES) - ran
    summary = {}
    for test in results.values():
        summary[test['status']] = summary.get(test['status'], 0) + 1
    assert not unexpected and not missing, (
        'tempest (%d tests, %s, %.0fs): unexpected results:\n%s\n'
        'expected differences that did not run: %s\n%s' % (
            len(results), summary, elapsed,
            '\n\n'.join('%s: %s' % item for item in unexpected.items()),
            sorted(missing), logs))
    # All the plugin's API tests ran (a skip is a failure above).
    assert len(results) >= 40, sorted(results)
    print('tempest: %d tests, %s, %.0fs' % (len(results), summary, elapsed))


def test_accelerator_endpoint_in_catalog(cloud, keystone):
    """What tempest's clients find: the v2 endpoint of the catalog, which
    refuses a request without a token."""
    session = keystone.admin_session()
    endpoint = session.get_endpoint(service_type='accelerator',
                                    interface='public',
                                    region_name='RegionOne')
    assert endpoint == cloud['url'] + '/v2'
    response = requests.get(endpoint + '/devices', timeout=10)
    assert response.status_code == 401
    assert 'Keystone uri=' in response.headers['WWW-Authenticate']
    assert session.get(endpoint + '/devices').status_code == 200
