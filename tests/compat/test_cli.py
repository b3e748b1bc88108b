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

"""The ``openstack accelerator device profile`` commands, run as a user runs
them: the real ``openstack`` binary in a subprocess with
``OS_AUTH_TYPE=none`` and ``OS_ENDPOINT=<base URL>``, ``-f json`` output.

Two implementations are driven:

* ``openstackclient``: the ``openstack`` console script exactly as
  installed. With python-openstackclient >= 7 installed next to
  python-cyborgclient, its own accelerator commands win.
* ``cyborgclient``: the same OpenStackShell with python-cyborgclient's
  device profile commands (see cyborgclient_osc.py).
"""

import json
import os
import sys
import time
import urllib.request
import uuid

import pytest

from tests.functional import servers

HERE = os.path.dirname(os.path.abspath(__file__))
OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
TIMEOUT = 120


class CLI:
    def __init__(self, kind, endpoint, cwd):
        self.kind = kind
        if kind == 'openstackclient':
            self.argv0 = [OPENSTACK if os.path.exists(OPENSTACK)
                          else 'openstack']
        else:
            self.argv0 = [sys.executable,
                          os.path.join(HERE, 'cyborgclient_osc.py')]
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith('OS_')}
        self.env.update(OS_AUTH_TYPE='none', OS_ENDPOINT=endpoint,
                        PYTHONWARNINGS='ignore')
        self.cwd = cwd

    def run(self, *args, check=True):
        proc = servers.run(self.argv0 + list(args), env=self.env,
                           cwd=self.cwd, timeout=TIMEOUT)
        if check and proc.returncode != 0:
            pytest.fail('%s exited %d\nstdout:\n%s\nstderr:\n%s' % (
                ' '.join(args), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def json(self, *args):
        proc = self.run(*(args + ('-f', 'json')))
        return json.loads(proc.stdout), proc

    def supports_group_option(self):
        proc = self.run('accelerator', 'device', 'profile', 'create',
                        '--help')
        return '--group' in proc.stdout


@pytest.fixture(params=['openstackclient', 'cyborgclient'], scope='module')
def cli(request, cyborg_endpoint, tmp_path_factory):
    return CLI(request.param, cyborg_endpoint,
               str(tmp_path_factory.mktemp('cli-cwd')))


@pytest.fixture
def cleanup(cli):
    names = []
    yield names
    for name in names:
        cli.run('accelerator', 'device', 'profile', 'delete', name,
                check=False)


GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
          {'resources:PGPU': '2', 'trait:CUSTOM_NO_MIG': 'forbidden'}]
PROFILE_COLUMNS = {'uuid', 'name', 'groups', 'description', 'created_at',
                   'updated_at'}


def _listed(cli, *extra):
    rows, _ = cli.json('accelerator', 'device', 'profile', 'list', *extra)
    return {row['uuid']: row for row in rows}


def test_create_json_groups_show_list_delete(cli, cleanup, unique_name):
    name = unique_name('cli')
    cleanup.append(name)
    created, proc = cli.json('accelerator', 'device', 'profile', 'create',
                             name, json.dumps(GROUPS),
                             '--description', 'from the CLI')
    assert set(created) == PROFILE_COLUMNS
    uuid.UUID(created['uuid'])
    assert created['name'] == name
    assert created['groups'] == GROUPS
    assert created['description'] == 'from the CLI'
    assert created['created_at']
    if cli.kind == 'openstackclient':
        assert 'deprecated' in proc.stderr

    shown, _ = cli.json('accelerator', 'device', 'profile', 'show',
                        created['uuid'])
    assert shown == created

    listed = _listed(cli)
    assert listed[created['uuid']] == {
        'uuid': created['uuid'], 'name': name, 'groups': GROUPS,
        'description': 'from the CLI'}
    long_row = _listed(cli, '--long')[created['uuid']]
    assert long_row['created_at'] == created['created_at']
    assert long_row['updated_at'] is None

    proc = cli.run('accelerator', 'device', 'profile', 'delete', name)
    assert proc.returncode == 0
    assert created['uuid'] not in _listed(cli)


@pytest.fixture
def osc(cyborg_endpoint, tmp_path):
    """python-openstackclient's commands: the ones with ``--group``."""
    return CLI('openstackclient', cyborg_endpoint, str(tmp_path))


def test_create_with_group_option(osc, unique_name):
    cli = osc
    assert cli.supports_group_option()
    name = unique_name('cli-grp')
    created, _ = cli.json(
        'accelerator', 'device', 'profile', 'create', name,
        '--group', 'resources:FPGA=1,trait:CUSTOM_FPGA_INTEL=required',
        '--group', 'resources:PGPU=2,trait:CUSTOM_NO_MIG=forbidden')
    try:
        assert created['name'] == name
        assert created['groups'] == GROUPS
        assert created['description'] is None
        assert _listed(cli)[created['uuid']]['groups'] == GROUPS
    finally:
        cli.run('accelerator', 'device', 'profile', 'delete', name,
                check=False)


def test_show_by_name_needs_2_2(cli, cleanup, unique_name):
    name = unique_name('cli-name')
    cleanup.append(name)
    created, _ = cli.json('accelerator', 'device', 'profile', 'create',
                          name, json.dumps([{'resources:CUSTOM_QAT': '1'}]))
    shown, _ = cli.json('--os-accelerator-api-version', '2.2',
                        'accelerator', 'device', 'profile', 'show', name)
    assert shown['uuid'] == created['uuid']
    proc = cli.run('accelerator', 'device', 'profile', 'show', name,
                   check=False)
    assert proc.returncode != 0
    assert ('The minimal required API version should be 2.2'
            in proc.stderr), proc.stderr


def test_show_missing_fails(cli):
    missing = str(uuid.uuid4())
    proc = cli.run('accelerator', 'device', 'profile', 'show', missing,
                   '-f', 'json', check=False)
    assert proc.returncode != 0
    assert proc.stdout.strip() == ''
    if cli.kind == 'openstackclient':
        assert ('Device Profile not found with uuid=%s' % missing
                in proc.stderr), proc.stderr
    else:
        # cyborgclient replaces the server's message with its own
        assert 'device_profile %s not found' % missing in proc.stderr


def test_delete_missing_fails(cli, unique_name):
    name = unique_name('cli-missing')
    proc = cli.run('accelerator', 'device', 'profile', 'delete', name,
                   check=False)
    assert proc.returncode != 0
    if cli.kind == 'openstackclient':
        assert 'Device Profile not found with name=%s' % name in proc.stderr
        assert '1 of 1 device profiles failed to delete' in proc.stderr
    else:
        assert 'device_profile %s not found' % name in proc.stderr


def test_create_duplicate_fails(cli, cleanup, unique_name):
    name = unique_name('cli-dup')
    cleanup.append(name)
    groups = json.dumps([{'resources:FPGA': '1'}])
    cli.json('accelerator', 'device', 'profile', 'create', name, groups)
    proc = cli.run('accelerator', 'device', 'profile', 'create', name,
                   groups, '-f', 'json', check=False)
    assert proc.returncode != 0
    assert ('A device_profile with name %s already exists.' % name
            in proc.stderr), proc.stderr


def _implicit_names(endpoint):
    request = urllib.request.Request(
        endpoint + '/v2/device_profiles',
        headers={'OpenStack-API-Version': 'accelerator 2.9'})
    with urllib.request.urlopen(request, timeout=30) as response:
        listed = json.load(response)['device_profiles']
    return [p['name'] for p in listed if p['name'].startswith('class:')]


def test_implicit_profile_shown_not_deleted(cli, cyborg_endpoint):
    """The implicit ``class:<RC>`` profile of a class the service's
    devices report: shown by name, read-only."""
    deadline = time.monotonic() + 60
    names = _implicit_names(cyborg_endpoint)
    while not names and time.monotonic() < deadline:  # the first report
        time.sleep(1)
        names = _implicit_names(cyborg_endpoint)
    assert names, 'no device reported a resource class'
    name = names[0]
    shown, _ = cli.json('--os-accelerator-api-version', '2.2',
                        'accelerator', 'device', 'profile', 'show', name)
    assert shown['groups'] == [{'resources:' + name[len('class:'):]: '1'}]
    proc = cli.run('accelerator', 'device', 'profile', 'delete', name,
                   check=False)
    assert proc.returncode != 0
    assert 'implicit and read-only' in proc.stderr, proc.stderr
