# Copyright 2026 The Cyborg Authors.
#
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
"""The devstack plugin's phases, run for each role with devstack's own
functions: what each node runs, writes and never touches.

Roles:

* all-in-one: Keystone, MySQL, RabbitMQ, Placement, Nova and tempest, no
  cyborg service named (the plugin enables its three);
* compute: nova-compute and cyborg-agent only, the controller's RabbitMQ
  and database at another address.
"""

import os

import pytest

from cyborg.api import microversion
from tests.devstack import plugin_harness as harness

AIO_SERVICES = ('key,mysql,rabbit,placement-api,n-api,n-cond,n-sch,n-cpu,'
                'tempest')
API_SERVICES = 'key,mysql,rabbit,placement-api,cyborg-api'
COMPUTE_SERVICES = 'n-cpu,placement-client,cyborg-agent'
# HOST_IP, and so SERVICE_HOST, in harness.sh unless a test sets them.
CONTROLLER_IP = '192.0.2.10'
COMPUTE_ENV = {'HOST_IP': '192.0.2.20', 'SERVICE_HOST': CONTROLLER_IP,
               'DATABASE_HOST': CONTROLLER_IP, 'RABBIT_HOST': CONTROLLER_IP}
LOCAL_CONF = """[[local|localrc]]
CYBORG_REPO=https://git.example.com/cloud/cyborg.git
enable_plugin cyborg $CYBORG_REPO main

[[post-config|$CYBORG_CONF]]
[agent]
discovery_interval = 7
"""


def _stack(tmp_path_factory, name, services, **env):
    node = harness.Node(str(tmp_path_factory.mktemp(name)))
    local_conf = node.path('local.conf')
    with open(local_conf, 'w') as f:
        f.write(LOCAL_CONF)
    harness.run(node, harness.STACK_PHASES, services, LOCAL_CONF=local_conf,
                **env)
    assert node.returncode == 0, node.output
    # What stack.sh left, before unstack.sh and clean.sh remove it (less
    # the harness's stand-ins for commands).
    node.stacked_files = sorted(
        path for path in (os.path.relpath(os.path.join(d, f), node.root)
                          for d, _dirs, files in os.walk(node.root)
                          for f in files)
        if not path.startswith(('bin' + os.sep, 'venv' + os.sep)))
    node.cyborg_conf = node.ini('etc', 'cyborg', 'cyborg.conf')
    uwsgi_ini = node.path('etc', 'cyborg', 'cyborg-api-uwsgi.ini')
    node.uwsgi_ini = node.ini(uwsgi_ini) if os.path.exists(uwsgi_ini) else None
    harness.run(node, ['unstack', 'clean'], services, **env)
    assert node.returncode == 0, node.output
    return node


@pytest.fixture(scope='module')
def aio(tmp_path_factory):
    return _stack(tmp_path_factory, 'aio', AIO_SERVICES)


@pytest.fixture(scope='module')
def compute(tmp_path_factory):
    return _stack(tmp_path_factory, 'compute', COMPUTE_SERVICES,
                  **COMPUTE_ENV)


def _matching(calls, *words):
    return [c for c in calls if all(w in c.split() for w in words)]


# All-in-one ----------------------------------------------------------------

def test_aio_enables_the_three_services(aio):
    enabled = aio.variables()['ENABLED_SERVICES'].split(',')
    assert {'cyborg-api', 'cyborg-cond', 'cyborg-agent'} <= set(enabled)


def test_aio_installs_from_the_plugin_checkout_whatever_its_name(aio):
    # The harness enables the plugin as "cyborg-checkout", not "cyborg".
    checkout = aio.path('opt', 'stack', 'cyborg-checkout')
    assert aio.variables()['CYBORG_DIR'] == checkout
    assert aio.calls('install') == [
        'setup_develop ' + checkout,
        'pip_install python-cyborgclient']


def test_aio_uwsgi_runs_the_application_module_at_accelerator(aio):
    ini = os.path.join('etc', 'cyborg', 'cyborg-api-uwsgi.ini')
    assert ini in aio.stacked_files
    calls = aio.calls('post-config')
    site = aio.path('etc', 'apache2', 'sites-available', 'cyborg-api.conf')
    assert 'sudo tee -a ' + site in calls
    assert 'sudo a2ensite cyborg-api' in calls
    uwsgi = aio.uwsgi_ini['uwsgi']
    assert uwsgi['module'] == 'cyborg.wsgi.api:application'
    assert 'wsgi-file' not in uwsgi
    assert uwsgi['socket'] == '/var/run/uwsgi/cyborg-api.socket'
    assert (uwsgi['processes'], uwsgi['threads']) == ('2', '4')
    assert uwsgi['env'] == 'CYBORG_CONFIG_FILES=' + aio.path(
        'etc', 'cyborg', 'cyborg.conf')
    run_api = _matching(aio.calls('extra'), 'run_process', 'cyborg-api')
    assert len(run_api) == 1 and run_api[0].endswith(
        '--procname-prefix cyborg-api --ini ' + aio.path(ini))


def test_aio_keystone_user_service_and_endpoint(aio):
    calls = aio.calls('post-config')
    assert _matching(calls, 'user', 'create', 'cyborg')
    for role in ('admin', 'service'):
        assert _matching(calls, 'role', 'add', role, '--user', 'cyborg')
    assert _matching(calls, 'service', 'create', 'accelerator')
    assert _matching(calls, 'endpoint', 'create', 'accelerator', 'public',
                     'http://%s/accelerator/v2' % CONTROLLER_IP)


def test_aio_config_has_every_service_part(aio):
    conf = aio.cyborg_conf
    # devstack's default database host.
    assert conf['database']['connection'] == (
        'mysql+pymysql://root:database-secret@127.0.0.1/cyborg?charset=utf8')
    assert conf['DEFAULT']['transport_url'].startswith('rabbit://')
    assert conf['api']['auth_strategy'] == 'keystone'
    assert conf['api']['public_endpoint'] == (
        'http://%s/accelerator' % CONTROLLER_IP)
    assert conf['keystone_authtoken']['username'] == 'cyborg'
    for section in ('placement', 'nova'):
        assert conf[section]['auth_type'] == 'password'
        assert conf[section]['region_name'] == 'RegionOne'
    assert conf['agent']['enabled_drivers'] == 'fake_driver'
    # setup_logging: devstack's log format (its systemd form).
    assert '%(global_request_id)s' in conf['DEFAULT'][
        'logging_context_format_string']


def test_local_conf_post_config_section_reaches_cyborg_conf(aio):
    assert aio.variables()['CYBORG_CONF'] == aio.path(
        'etc', 'cyborg', 'cyborg.conf')
    assert aio.cyborg_conf['agent']['discovery_interval'] == '7'


def test_aio_creates_and_migrates_the_database_then_starts(aio):
    calls = aio.calls('extra')
    drop = _matching(calls, 'mysql')
    assert [c.split(' -e ')[1] for c in drop] == [
        'DROP DATABASE IF EXISTS cyborg;',
        'CREATE DATABASE cyborg CHARACTER SET utf8;']
    dbsync = _matching(calls, 'cyborg-dbsync', 'upgrade')
    assert dbsync and calls.index(dbsync[0]) > calls.index(drop[-1])
    started = [c.split()[1] for c in calls if c.startswith('run_process')]
    assert started == ['cyborg-api', 'cyborg-cond', 'cyborg-agent']


def test_aio_nova_sends_its_service_token(aio):
    nova = aio.ini('etc', 'nova', 'nova.conf')
    assert nova['service_user']['send_service_user_token'] == 'True'
    assert nova['service_user']['username'] == 'nova'


def test_aio_tempest_knows_cyborg_and_its_versions(aio):
    tempest = aio.ini('opt', 'stack', 'tempest', 'etc', 'tempest.conf')
    assert tempest['service_available']['cyborg'] == 'True'
    assert tempest['cyborg_policy']['enforce_new_defaults'] == 'True'
    assert tempest['accelerator']['min_microversion'] == (
        microversion.as_string(microversion.MIN_VERSION))
    assert tempest['accelerator']['max_microversion'] == (
        microversion.as_string(microversion.MAX_VERSION))


def test_aio_unstack_stops_and_clean_removes_everything(aio):
    assert aio.calls('unstack') == ['stop_process cyborg-api',
                                    'stop_process cyborg-cond',
                                    'stop_process cyborg-agent']
    calls = aio.calls('clean')
    assert 'sudo a2dissite cyborg-api' in calls
    assert _matching(calls, 'mysql') == [
        'mysql -uroot -pdatabase-secret -h127.0.0.1 -e DROP DATABASE IF '
        'EXISTS cyborg;']
    for path in (('etc', 'cyborg'), ('opt', 'stack', 'data', 'cyborg'),
                 ('etc', 'apache2', 'sites-available', 'cyborg-api.conf')):
        assert not os.path.exists(aio.path(*path))


# Compute node --------------------------------------------------------------

def test_compute_keeps_its_one_cyborg_service(compute):
    enabled = compute.variables()['ENABLED_SERVICES'].split(',')
    assert [s for s in enabled if s.startswith('cyborg')] == ['cyborg-agent']


def test_compute_never_touches_the_database(compute):
    calls = compute.calls()
    assert not _matching(calls, 'mysql')
    assert not _matching(calls, 'psql')
    assert not _matching(calls, 'cyborg-dbsync')
    assert 'database' not in compute.cyborg_conf


def test_compute_creates_no_accounts_site_or_client(compute):
    calls = compute.calls()
    assert not [c for c in calls if c.startswith('openstack')]
    assert not [c for c in calls if 'a2ensite' in c or 'uwsgi' in c]
    assert not [f for f in compute.stacked_files
                if 'uwsgi' in f or 'apache2' in f]
    assert compute.uwsgi_ini is None
    assert not _matching(calls, 'python-cyborgclient')


def test_compute_runs_only_the_agent(compute):
    started = [c for c in compute.calls() if c.startswith('run_process')]
    assert started == [
        'run_process cyborg-agent %s --config-file %s' % (
            compute.path('venv', 'bin', 'cyborg-agent'),
            compute.path('etc', 'cyborg', 'cyborg.conf'))]
    assert compute.calls('unstack') == ['stop_process cyborg-agent']


def test_compute_config_has_only_what_the_agent_reads(compute):
    conf = compute.cyborg_conf
    assert set(conf.sections()) == {'agent'}
    assert conf['DEFAULT']['transport_url'] == (
        'rabbit://stackrabbit:rabbit-secret@%s:5672/' % CONTROLLER_IP)
    assert conf['agent']['enabled_drivers'] == 'fake_driver'
    assert conf['agent']['discovery_interval'] == '7'
    # setup_logging runs on every node.
    assert '%(global_request_id)s' in conf['DEFAULT'][
        'logging_context_format_string']


def test_compute_nova_sends_its_service_token(compute):
    nova = compute.ini('etc', 'nova', 'nova.conf')
    assert nova['service_user']['send_service_user_token'] == 'True'


def test_compute_clean_removes_only_its_own_files(compute):
    calls = compute.calls('clean')
    assert calls == ['sudo rm -rf %s %s' % (
        compute.path('etc', 'cyborg'),
        compute.path('opt', 'stack', 'data', 'cyborg'))]
    assert not os.path.exists(compute.path('etc', 'cyborg'))


def test_disable_service_makes_a_compute_node(tmp_path):
    node = harness.run(harness.Node(str(tmp_path)), ['pre-install'],
                       'n-cpu', DISABLED_SERVICES='cyborg-api,cyborg-cond',
                       **COMPUTE_ENV)
    assert node.returncode == 0, node.output
    enabled = node.variables()['ENABLED_SERVICES'].split(',')
    assert [s for s in enabled if s.startswith('cyborg')] == ['cyborg-agent']


# Options and dependencies --------------------------------------------------

def _uwsgi_env(node) -> list[str]:
    """Every ``env`` line of the uWSGI ini, in order."""
    with open(node.path('etc', 'cyborg', 'cyborg-api-uwsgi.ini')) as f:
        return [line.split('=', 1)[1].strip() for line in f
                if line.split('=', 1)[0].strip() == 'env']


def test_api_metrics_are_off_by_default(aio):
    assert aio.cyborg_conf['metrics']['api_enabled'] == 'False'
    # The last env line (the ini is gone after clean): no metrics
    # directory was added after the configuration's.
    assert aio.uwsgi_ini['uwsgi']['env'] == 'CYBORG_CONFIG_FILES=' + aio.path(
        'etc', 'cyborg', 'cyborg.conf')


def test_api_metrics_share_a_directory_between_uwsgi_workers(tmp_path):
    node = harness.run(harness.Node(str(tmp_path)), ['post-config'],
                       API_SERVICES, CYBORG_API_METRICS='True')
    assert node.returncode == 0, node.output
    conf = node.ini('etc', 'cyborg', 'cyborg.conf')
    assert conf['metrics']['api_enabled'] == 'True'
    directory = node.path('opt', 'stack', 'data', 'cyborg', 'api-metrics')
    # Made before the workers start (they write there from their import).
    assert os.path.isdir(directory)
    assert _uwsgi_env(node) == [
        'CYBORG_CONFIG_FILES=' + node.path('etc', 'cyborg', 'cyborg.conf'),
        'PROMETHEUS_MULTIPROC_DIR=' + directory]


def test_standalone_api_and_the_old_conf_variable(tmp_path):
    conf = str(tmp_path / 'etc' / 'cyborg' / 'legacy.conf')
    node = harness.run(harness.Node(str(tmp_path)),
                       ['post-config', 'extra'],
                       API_SERVICES, CYBORG_USE_UWSGI='False',
                       CYBORG_CONF_FILE=conf)
    assert node.returncode == 0, node.output
    assert node.variables()['CYBORG_CONF'] == conf
    assert node.ini(conf)['api']['port'] == '6666'
    assert not os.path.exists(node.path('etc', 'cyborg',
                                        'cyborg-api-uwsgi.ini'))
    assert _matching(node.calls(), 'run_process', 'cyborg-api') == [
        'run_process cyborg-api %s --config-file %s'
        % (node.path('venv', 'bin', 'cyborg-api'), conf)]
    assert _matching(node.calls(), 'endpoint', 'create', 'accelerator',
                     'public', 'http://%s:6666/v2' % CONTROLLER_IP)


@pytest.mark.parametrize('services,env,message', [
    ('mysql,rabbit,placement-api,cyborg-api', {},
     "cyborg-api needs Keystone: enable the 'key' service"),
    ('key,mysql,rabbit,cyborg-cond', {},
     "cyborg-cond needs Placement: enable the 'placement-api' service"),
    ('n-cpu,cyborg-agent', {},
     "cyborg needs RabbitMQ: enable the 'rabbit' service or set "
     "RABBIT_HOST and RABBIT_PASSWORD"),
])
def test_missing_dependency_stops_stack_with_a_message(tmp_path, services,
                                                       env, message):
    node = harness.run(harness.Node(str(tmp_path)), harness.STACK_PHASES,
                       services, **env)
    assert node.returncode != 0
    assert message in node.output
    # Nothing was installed before the check.
    assert node.calls('install') == []


def test_client_from_git(tmp_path):
    node = harness.run(harness.Node(str(tmp_path)), ['install'],
                       API_SERVICES, LIBS_FROM_GIT='python-cyborgclient')
    assert node.returncode == 0, node.output
    assert node.calls('install')[1:] == [
        'git_clone_by_name python-cyborgclient',
        'setup_dev_lib python-cyborgclient']


def test_api_answering_500_fails_stack(tmp_path):
    # wait_for_service takes any answer but 503 for a started service.
    node = harness.run(harness.Node(str(tmp_path)), ['post-config', 'extra'],
                       API_SERVICES, STUB_CURL_STATUS='500')
    assert node.returncode != 0
    assert ('cyborg-api does not answer GET http://%s/accelerator/'
            % CONTROLLER_IP) in node.output


def test_conductor_node_on_postgresql(tmp_path):
    services = 'key,postgresql,rabbit,placement-api,cyborg-cond'
    node = harness.run(harness.Node(str(tmp_path)), ['post-config', 'extra'],
                       services)
    assert node.returncode == 0, node.output
    assert node.ini('etc', 'cyborg', 'cyborg.conf')['database'][
        'connection'] == ('postgresql://root:database-secret@127.0.0.1/'
                          'cyborg?client_encoding=utf8')
    assert _matching(node.calls('extra'), 'createdb', 'cyborg')
    harness.run(node, ['unstack', 'clean'], services)
    assert node.returncode == 0, node.output
    psql = [c.split(' -c ')[1] for c in _matching(node.calls(), 'psql')]
    # Recreated by extra, dropped by clean.
    assert psql == ['DROP DATABASE IF EXISTS cyborg'] * 2
    assert not _matching(node.calls(), 'mysql')
