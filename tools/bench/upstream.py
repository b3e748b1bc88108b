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

"""Upstream OpenStack Cyborg (``openstack-cyborg`` from PyPI) deployed
beside ours, for side-by-side benchmarks.

It runs from its own virtualenv (``tools/bench/upstream-venv.sh`` makes
``.venv-upstream``), on the same database server, RabbitMQ (a virtual
host of its own), Placement and fake Nova as our deployment:

* ``cyborg-dbsync upgrade`` on a database of its own;
* its API (``cyborg.wsgi.api:application``) under the same WSGI server,
  processes and threads as ours; upstream has no ``noauth`` strategy, so
  its paste pipeline is upstream's without ``authtoken`` and the client
  sends the identity headers keystonemiddleware would set
  (:data:`HEADERS`);
* one ``cyborg-conductor`` and ``cyborg-agent`` per host with upstream's
  fake driver (one device, one deployable of 16 accelerators per host);
* Placement and Nova reached with ``admin_token`` and an endpoint
  override, as ours.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request

import sqlalchemy

from tests.functional import fake_nova as fake_nova_lib
from tests.functional import servers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
VENV = os.path.join(ROOT, '.venv-upstream')
# What keystonemiddleware would put in front of Nova's requests: a project
# member that is admin, and (added per call where Nova sends its service
# token) X-Service-Roles.
PROJECT = '6f70656e-7374-6163-6b00-000000000001'
HEADERS = {'X-Roles': 'admin,member,reader', 'X-Project-Id': PROJECT,
           'X-User-Id': 'nova', 'X-Tenant-Id': PROJECT}
# Upstream's pipeline (etc/cyborg/api-paste.ini) without authtoken.
PASTE = """[pipeline:main]
pipeline = cors http_proxy_to_wsgi request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory

[filter:cors]
paste.filter_factory =  oslo_middleware.cors:filter_factory
oslo_config_project = cyborg

[filter:http_proxy_to_wsgi]
paste.filter_factory = %s
""" % 'oslo_middleware.http_proxy_to_wsgi:HTTPProxyToWSGI.factory'
# Accelerators per host of upstream's fake driver (FakeDriver's
# NUM_ACCELERATORS): one deployable per host.
DEPLOYABLES_PER_AGENT = 1


def venv_script(name: str, venv: str = VENV) -> str:
    path = os.path.join(venv, 'bin', name)
    if not os.access(path, os.X_OK):
        raise servers.ServerError(
            '%s not found: create the upstream virtualenv with '
            'tools/bench/upstream-venv.sh' % path)
    return path


def version(venv: str = VENV) -> str:
    """The installed openstack-cyborg version."""
    return subprocess.run(
        # -I: not the checkout's metadata when run from its directory.
        [os.path.join(venv, 'bin', 'python'), '-I', '-c',
         'from importlib import metadata; '
         'print(metadata.version("openstack-cyborg"))'],
        capture_output=True, text=True, check=True).stdout.strip()


class FakeNova(fake_nova_lib.FakeNova):
    """The fake Nova, also answering version discovery (``GET /`` and
    ``GET /v2.1``) as Nova does: upstream reaches Nova through an
    openstacksdk connection, which discovers the endpoint's version
    before each event post."""

    VERSION = {'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
               'min_version': '2.1', 'updated': '2013-07-23T11:33:21Z'}

    def _respond(self, environ, request, answer_503):
        path = environ['PATH_INFO'].rstrip('/')
        if (environ['REQUEST_METHOD'] == 'GET' and not answer_503
                and path in ('', fake_nova_lib.PREFIX)):
            link = [{'rel': 'self', 'href': self.url + '/'}]
            if path:
                return 200, {'version': dict(self.VERSION, links=link)}
            return 200, {'versions': [dict(self.VERSION, links=link)]}
        return super()._respond(environ, request, answer_503)


class UpstreamProcess(servers.CyborgProcess):
    """A console script of the upstream virtualenv."""

    def __init__(self, *args, venv: str = VENV, **kwargs):
        super().__init__(*args, **kwargs)
        self.venv = venv

    @property
    def argv(self) -> list[str]:
        argv = [venv_script(self.script, self.venv)]
        if self.config_file:
            argv += ['--config-file', self.config_file]
        return argv + self.args


class UpstreamDeployment:
    """Upstream's API, conductor and fake-driver agents; the same
    interface as ``nova_cycle.Deployment``."""

    name = 'upstream'
    headers = HEADERS

    def __init__(self, workdir: str, agents: int, api_workers: int,
                 api_threads: int, api_server: str, venv: str = VENV):
        self.workdir = os.path.join(workdir, 'upstream')
        os.makedirs(self.workdir, exist_ok=True)
        self.agents = agents
        self.deployables = agents * DEPLOYABLES_PER_AGENT
        self.api_workers = api_workers
        self.api_threads = api_threads
        self.api_server = api_server
        self.venv = venv
        self.processes: list[UpstreamProcess] = []
        self.api = None

    def start(self, db, rabbit, placement, nova) -> None:
        self.db_url = db.create_database('cyborg_upstream')
        paste = os.path.join(self.workdir, 'api-paste.ini')
        with open(paste, 'w') as f:
            f.write(PASTE)
        base = {'DEFAULT': {'transport_url': rabbit.create_vhost('upstream'),
                            'heartbeat_interval': 10},
                'database': {'connection': self.db_url,
                             'max_pool_size': 10},
                'placement': {'auth_type': 'admin_token',
                              'endpoint': placement.url, 'token': 'admin',
                              'endpoint_override': placement.url},
                'nova': {'auth_type': 'admin_token', 'endpoint': nova.url,
                         'token': 'admin', 'endpoint_override': nova.url},
                'api': {'api_paste_config': paste},
                'oslo_policy': {'enforce_scope': True,
                                'enforce_new_defaults': True},
                'agent': {'enabled_drivers': 'fake_driver'}}
        config = servers.write_config(
            os.path.join(self.workdir, 'cyborg.conf'), base)
        log = os.path.join(self.workdir, 'dbsync.log')
        servers.run_logged([venv_script('cyborg-dbsync', self.venv),
                            '--config-file', config, 'upgrade'], log,
                           'upstream cyborg-dbsync upgrade')
        self._spawn('cyborg-conductor', dict(base, DEFAULT=dict(
            base['DEFAULT'], host='upstream-conductor')))
        self.processes[-1].wait_log(
            'Created RPC server for service cyborg-conductor')
        client = placement.client()
        from cyborg.allinone import embedded_placement
        for index in range(self.agents):
            host = 'upstream-compute-%d' % index
            embedded_placement.ensure_compute_node(client, host)
            self._spawn('cyborg-agent', dict(
                base, DEFAULT=dict(base['DEFAULT'], host=host),
                agent=dict(base['agent'], resource_provider_name=host)),
                name='agent-%d' % index)
            # One agent at a time: upstream's conductor handles concurrent
            # first reports badly (two creating the same trait in
            # Placement: one fails, its device is deleted and comes back
            # only with the agent's next periodic report).
            self._wait_registered(host)
        self.api_port = servers.free_port()
        env = dict(os.environ, PYTHONWARNINGS='ignore')
        log = os.path.join(self.workdir, '%s.log' % self.api_server)
        self.api = servers.spawn(self._api_argv(config), log, env=env,
                                 cwd=self.workdir)
        self.url = 'http://127.0.0.1:%d/v2' % self.api_port
        servers.wait_for(lambda: urllib.request.urlopen(self.url, timeout=2),
                         60, 'upstream cyborg-api', self.api, log)

    def _wait_registered(self, host: str, timeout: float = 90) -> None:
        """Wait until ``host``'s deployables have resource providers."""
        engine = sqlalchemy.create_engine(self.db_url)
        query = sqlalchemy.text(
            'SELECT COUNT(*) FROM deployables JOIN devices ON devices.id = '
            'deployables.device_id WHERE devices.hostname = :host AND '
            'deployables.rp_uuid IS NOT NULL')
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                with engine.connect() as connection:
                    found = connection.execute(query, {'host': host}).scalar()
                if found >= DEPLOYABLES_PER_AGENT:
                    return
                if not self.processes[-1].running():
                    break
                time.sleep(0.5)
        finally:
            engine.dispose()
        raise servers.ServerError(
            'upstream agent on %s did not register its device:\n%s' % (
                host, servers.tail(self.processes[-1].log)))

    def _api_argv(self, config: str) -> list[str]:
        """Our benchmark's uWSGI command line on upstream's virtualenv
        (our uWSGI binary: the same Python), with upstream's config file
        as the application's arguments (it parses ``sys.argv``)."""
        if self.api_server != 'uwsgi':
            raise servers.ServerError(
                'upstream cyborg-api runs under uWSGI only (its WSGI '
                'application parses sys.argv): install uWSGI in .venv '
                '(tools/setup-venv.sh --bench)')
        argv = servers.wsgi_argv(
            self.api_server, 'cyborg.wsgi.api:application', self.api_port,
            self.api_workers, self.api_threads, chdir=self.workdir)
        argv[argv.index('--virtualenv') + 1] = self.venv
        return argv + ['--pyargv', '--config-file ' + config]

    def _spawn(self, script, config, name=None):
        process = UpstreamProcess(script, config, self.workdir, name=name,
                                  venv=self.venv)
        self.processes.append(process.start())

    def server_pids(self) -> list[int]:
        return [self.api.pid] + [p.process.pid for p in self.processes]

    def pids_by_role(self) -> dict[str, list[int]]:
        roles = {'api': [self.api.pid], 'conductor': [], 'agents': []}
        for process in self.processes:
            role = ('conductor' if process.script == 'cyborg-conductor'
                    else 'agents')
            roles[role].append(process.process.pid)
        return roles

    def logs(self) -> list[str]:
        """Every log file of the deployment."""
        return sorted(os.path.join(self.workdir, name)
                      for name in os.listdir(self.workdir)
                      if name.endswith('.log'))

    def stop(self) -> None:
        if self.api is not None:
            servers.kill_group(self.api)
        for process in self.processes:
            process.stop()
