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
"""The API under uWSGI with the ini file the devstack plugin writes.

The plugin's post-config phase runs in the devstack harness
(``tests/devstack``) for an API node; devstack's own write_uwsgi_config
writes the ini. uWSGI then starts as devstack's run_process starts it,
and the version documents must answer 200: an ini that loads no
application (``wsgi-file`` instead of ``module``) answers 500.
"""

import os
import sys

import requests

from tests.devstack import plugin_harness as harness
from tests.functional import servers

API_NODE_SERVICES = 'key,mysql,rabbit,placement-api,cyborg-api'


def _serve_over_http(ini: str, port: int) -> None:
    """Listen on 127.0.0.1:``port`` instead of the unix socket.

    The one change to the plugin's ini: under devstack Apache proxies
    /accelerator to the unix socket in /var/run/uwsgi, which a test can
    neither create nor reach without Apache.
    """
    with open(ini) as f:
        lines = f.read().splitlines()
    rewritten = ['http-socket = %s:%d' % (servers.LOOPBACK, port)
                 if line.startswith('socket = ') else line
                 for line in lines if not line.startswith('chmod-socket')]
    assert rewritten != lines, 'the plugin wrote no unix socket:\n' + (
        '\n'.join(lines))
    with open(ini, 'w') as f:
        f.write('\n'.join(rewritten) + '\n')


def _test_config(node: harness.Node, conf_file: str) -> None:
    """The plugin's cyborg.conf, with no Keystone and a SQLite database.

    The version documents need neither; everything else (the public
    endpoint, the policy file, RabbitMQ's URL) stays as written.
    """
    conf = node.ini(conf_file)
    conf['api']['auth_strategy'] = 'noauth'
    conf['database']['connection'] = 'sqlite:///' + node.path('cyborg.db')
    with open(conf_file, 'w') as f:
        conf.write(f)


def test_api_answers_under_uwsgi_with_the_plugin_ini(tmp_path):
    node = harness.run(harness.Node(str(tmp_path / 'node')), ['post-config'],
                       API_NODE_SERVICES, HOST_IP=servers.LOOPBACK,
                       API_WORKERS='1')
    assert node.returncode == 0, node.output
    variables = node.variables()
    ini = variables['CYBORG_UWSGI_CONF']
    with open(ini) as f:
        assert 'module = cyborg.wsgi.api:application\n' in f.read()
    _test_config(node, variables['CYBORG_CONF'])
    port = servers.free_port()
    _serve_over_http(ini, port)

    # As devstack's run_process starts it; --venv is what run_process
    # adds with devstack's global virtualenv.
    argv = [servers.venv_script('uwsgi'), '--procname-prefix', 'cyborg-api',
            '--ini', ini, '--venv', sys.prefix]
    env = dict(os.environ, PYTHONPATH=harness.REPO)
    log = str(tmp_path / 'uwsgi.log')
    process = servers.spawn(argv, log, env=env, cwd=str(tmp_path))
    try:
        url = 'http://%s:%d' % (servers.LOOPBACK, port)
        # Any answer ends the wait (a Response of status 500 is false).
        root, = servers.wait_for(
            lambda: [requests.get(url + '/', timeout=2)], 60,
            'cyborg-api under uWSGI', process, log)
        assert root.status_code == 200, servers.tail(log)
        # The application read the plugin's cyborg.conf: its links use
        # the public endpoint the plugin set.
        links = [link['href'] for version in root.json()['versions']
                 for link in version['links']]
        assert links and all(link.startswith(variables['CYBORG_API_URL'])
                             for link in links), links
        v2 = requests.get(url + '/v2', timeout=10)
        assert v2.status_code == 200, servers.tail(log)
    finally:
        servers.kill_group(process)
    # The ini's SIGTERM hook: a graceful stop, not a kill.
    assert process.returncode == 0, servers.tail(log)
