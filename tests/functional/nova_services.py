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

"""Real Nova services beside Cyborg, for functional tests.

:func:`real_nova` starts, on the session's PostgreSQL and RabbitMQ (see
conftest.py), a given Placement (test_real_nova.py runs one on PostgreSQL)
and a real Keystone (keystone.py):

* Nova from the installed ``nova`` package: its API database, cell0 and
  cell1 databases (``nova-manage api_db sync`` and ``db sync`` once per
  test run, each database restored from a dump of their result, see
  :meth:`servers.PostgreSQLServer.load_schema`; the rows of ``cell_v2
  map_cell0`` and ``cell_v2 create_cell`` written directly), nova-api
  (the WSGI application
  ``nova.wsgi.osapi_compute:application`` under the suite's WSGI server),
  nova-conductor, nova-scheduler and one nova-compute per
  :class:`ComputeSpec` with ``compute_driver =
  fake.FakeDriverWithoutFakeNodes`` (Nova's fake virt driver, with a node
  uuid kept in its state directory so that a restarted compute finds its
  node again), ``[api] auth_strategy = keystone``, service tokens, hosts
  discovered by the scheduler every two seconds, one scheduling request
  at a time (see the comment at nova-scheduler's start);
* Cyborg, a :class:`CyborgPart` with ``accelerator`` in the catalog at
  the deployment's Cyborg port: this tree's (:class:`OurCyborg`, the
  default: ``cyborg-dbsync upgrade``, cyborg-conductor, cyborg-api with
  ``auth_strategy = keystone``, ``[nova]`` through Keystone to the real
  nova-api, and one cyborg-agent per compute host with the same host
  name and the fake driver, so that its devices nest under that compute
  node's provider) or upstream's (upstream_cyborg.py); one part can be
  stopped and another started on the same hosts
  (:meth:`RealNova.stop_cyborg`, :meth:`RealNova.start_cyborg`), and
  compute hosts added and retired while the deployment runs;
* :class:`StandIns`: a small Glance (one image, and what Nova's shelve
  needs: create, update and delete of snapshot images) and an empty
  Neutron (no networks, no ports) in one threaded WSGI server of the test
  process, registered in the catalog as ``image`` and ``network``.

Everything listens on 127.0.0.1 and is stopped at the end; logs are in
the deployment's directory (``<name>.log`` per process).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from typing import Any
import uuid as uuid_lib

import requests
import sqlalchemy as sa

from cyborg.api import wsgi_server
from tests.functional import servers
from tests.functional.placement import SERVICE_TOKEN

START_TIMEOUT = 180
COMPUTE_API_VERSION = 'compute 2.90'
IMAGE_ID = '155d900f-4e14-4e4c-a73d-069cbf4541e6'
PLACEMENT_VERSION = 'placement 1.36'

# How often a test asks Nova's API whether a server got where it waits
# for: a GET of a server costs nova-api about 50 ms of CPU, and a build
# or a delete takes seconds, so the pauses between asks grow from the
# first to the last by half each time.
POLL_FIRST = 0.25
POLL_LAST = 2.0


def poll_nova(predicate: Callable[[], Any], timeout: float) -> Any:
    """``predicate()`` at growing pauses (:data:`POLL_FIRST` to
    :data:`POLL_LAST` seconds) until it answers something true, which is
    returned; None once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    pause = POLL_FIRST
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, POLL_LAST)


# nova-api's WSGI application, for gunicorn or uWSGI: Nova parses the
# process's command line as its own (oslo.config), which is the WSGI
# server's here.
NOVA_API_APP = '''
import sys
sys.argv = sys.argv[:1]
from nova.wsgi.osapi_compute import application  # noqa: E402,F401
'''


# Glance and Neutron stand-ins --------------------------------------------

IMAGE_SCHEMA = {
    'name': 'image',
    'properties': {
        'id': {'type': 'string'}, 'name': {'type': ['null', 'string']},
        'status': {'type': 'string'},
        'visibility': {'type': 'string'},
        'container_format': {'type': ['null', 'string']},
        'disk_format': {'type': ['null', 'string']},
        'min_ram': {'type': 'integer'}, 'min_disk': {'type': 'integer'},
        'size': {'type': ['null', 'integer']},
        'virtual_size': {'type': ['null', 'integer']},
        'protected': {'type': 'boolean'},
        'os_hidden': {'type': 'boolean'},
        'tags': {'type': 'array', 'items': {'type': 'string'}},
        'owner': {'type': ['null', 'string']},
        'checksum': {'type': ['null', 'string']},
        'created_at': {'type': 'string'}, 'updated_at': {'type': 'string'},
        'locations': {'type': 'array'},
        'file': {'type': 'string'}, 'self': {'type': 'string'},
        'schema': {'type': 'string'},
    },
    'additionalProperties': {'type': 'string'},
    'links': [{'rel': 'self', 'href': '{self}'},
              {'rel': 'enclosure', 'href': '{file}'},
              {'rel': 'describedby', 'href': '{schema}'}],
}


def _image(image_id: str, **fields) -> dict[str, Any]:
    image = {
        'id': image_id, 'name': 'stand-in', 'status': 'active',
        'visibility': 'public', 'container_format': 'bare',
        'disk_format': 'raw', 'min_ram': 0, 'min_disk': 0, 'size': 1024,
        'virtual_size': None, 'protected': False, 'os_hidden': False,
        'tags': [], 'owner': None, 'checksum': None,
        'created_at': '2026-01-01T00:00:00Z',
        'updated_at': '2026-01-01T00:00:00Z',
        'file': '/v2/images/%s/file' % image_id,
        'self': '/v2/images/%s' % image_id, 'schema': '/v2/schemas/image'}
    image.update(fields)
    return image


class StandIns:
    """Glance (under ``/image``) and Neutron (under ``/network``) on one
    threaded loopback server in this process. ``requests`` records
    ``(method, path)`` of every request."""

    def __init__(self):
        self.images: dict[str, dict[str, Any]] = {IMAGE_ID: _image(IMAGE_ID)}
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = wsgi_server.WSGIServer(self._app, servers.LOOPBACK, 0)

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (servers.LOOPBACK, self._server.port)

    def start(self) -> StandIns:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _app(self, environ, start_response):
        method = environ['REQUEST_METHOD']
        path = environ.get('PATH_INFO', '')
        length = int(environ.get('CONTENT_LENGTH') or 0)
        body = environ['wsgi.input'].read(length) if length else b''
        with self._lock:
            self.requests.append((method, path))
        if path.startswith('/image'):
            status, answer = self._glance(method, path[len('/image'):],
                                          body)
        elif path.startswith('/network'):
            status, answer = self._neutron(method, path[len('/network'):])
        else:
            status, answer = 404, {'error': 'not found'}
        data = b'' if answer is None else json.dumps(answer).encode()
        headers = [('Content-Length', str(len(data)))]
        if data:
            headers.append(('Content-Type', 'application/json'))
        start_response('%d %s' % (status, {
            200: 'OK', 201: 'Created', 204: 'No Content', 300:
            'Multiple Choices', 404: 'Not Found'}.get(status, 'Error')),
            headers)
        return [data]

    def _glance(self, method: str, path: str, body: bytes):
        base = self.url + '/image'
        if path in ('', '/', '/versions'):
            return 200, {'versions': [{
                'id': 'v2.16', 'status': 'CURRENT',
                'links': [{'rel': 'self', 'href': base + '/v2/'}]}]}
        if path.rstrip('/') == '/v2/schemas/image':
            return 200, IMAGE_SCHEMA
        if path.rstrip('/') == '/v2/images':
            if method == 'POST':
                fields = json.loads(body or b'{}')
                image_id = fields.pop('id', None) or str(uuid_lib.uuid4())
                image = _image(image_id, status='queued', size=None,
                               **fields)
                with self._lock:
                    self.images[image_id] = image
                return 201, image
            with self._lock:
                return 200, {'images': list(self.images.values())}
        match = re.match(r'^/v2/images/([^/]+)(/file)?/?$', path)
        if not match:
            return 404, {'error': 'not found'}
        image_id, file = match.groups()
        with self._lock:
            image = self.images.get(image_id)
            if image is None:
                return 404, {'error': 'image %s not found' % image_id}
            if file:
                if method == 'PUT':
                    image.update(status='active', size=1024)
                    return 204, None
                return 404, {'error': 'no data'}
            if method == 'DELETE':
                del self.images[image_id]
                return 204, None
            if method == 'PATCH':
                for op in json.loads(body or b'[]'):
                    key = op['path'].lstrip('/')
                    if op['op'] == 'remove':
                        image.pop(key, None)
                    else:
                        image[key] = op['value']
            return 200, image

    def _neutron(self, method: str, path: str):
        if path in ('', '/'):
            return 200, {'versions': [{
                'id': 'v2.0', 'status': 'CURRENT',
                'links': [{'rel': 'self',
                           'href': self.url + '/network/v2.0/'}]}]}
        match = re.match(r'^/v2\.0/([a-z_-]+?)(\.json)?/?$', path)
        if method == 'GET' and match:
            return 200, {match.group(1): []}
        return 404, {'NeutronError': {'type': 'NotFound',
                                      'message': 'not found', 'detail': ''}}


# Processes ------------------------------------------------------------------

class Process:
    """One service process (own process group, log in ``work_dir``),
    always stopped by :meth:`stop`."""

    def __init__(self, name: str, argv: Sequence[str], work_dir: str,
                 env: Mapping[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.work_dir = work_dir
        self.env = dict(os.environ, PYTHONUNBUFFERED='1', **(env or {}))
        self.log = os.path.join(work_dir, name + '.log')
        self.process: subprocess.Popen | None = None

    def start(self) -> Process:
        self.process = servers.spawn(self.argv, self.log, env=self.env,
                                     cwd=self.work_dir)
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None:
            servers.kill_group(self.process, timeout=timeout)

    def log_text(self) -> str:
        try:
            with open(self.log, errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def wait_log(self, text: str, timeout: float = START_TIMEOUT,
                 start: int = 0) -> None:
        servers.wait_for(lambda: text in self.log_text()[start:], timeout,
                         '%s to log %r' % (self.name, text), self.process,
                         self.log, interval=0.25)


@dataclasses.dataclass
class ComputeSpec:
    """One compute host: nova-compute and a cyborg-agent named ``host``.

    Our agent's fake driver reports ``devices`` (the devices file's
    entries) with ``fake_driver`` options. With ``host_root`` (a host
    tree, see tests/fixtures/hosts), the agent also runs its NVIDIA GPU
    driver on that tree, with the tree's fake vendor commands as the only
    ones on its PATH; ``gpus`` is how many passthrough GPUs it holds."""
    host: str
    devices: list[dict[str, Any]]
    fake_driver: dict[str, Any] = dataclasses.field(default_factory=dict)
    host_root: str | None = None
    gpus: int = 0

    @property
    def tools_dir(self) -> str | None:
        """The host tree's fake vendor commands (``usr/bin``)."""
        if self.host_root is None:
            return None
        return os.path.join(os.path.abspath(self.host_root), 'usr', 'bin')


class CyborgPart:
    """The Cyborg of a :class:`RealNova` deployment: its database, its
    control services (the API on the deployment's Cyborg port, in the
    catalog) and one agent per compute host. :class:`OurCyborg` runs this
    tree's; tests/functional/upstream_cyborg.py runs upstream's. A
    deployment runs one part at a time (:meth:`RealNova.start_cyborg`,
    :meth:`RealNova.stop_cyborg`)."""

    #: Whether agents may make their first report at the same time.
    concurrent_agents = True

    def __init__(self, label: str) -> None:
        # Prefix of the part's process names, logs, database and
        # transport names.
        self.label = label
        self.engine: sa.Engine | None = None
        self.database_url = ''

    def process_name(self, role: str) -> str:
        return '%s-%s' % (self.label, role)

    def configure(self, d: RealNova) -> None:
        """Create the database and the transport, write the control
        services' configuration (quick: runs before the migrations)."""
        raise NotImplementedError

    def migrate(self, d: RealNova) -> None:
        """Bring the database to the part's schema."""
        raise NotImplementedError

    def start_control(self, d: RealNova) -> None:
        """Start the conductor and the API (:meth:`RealNova.add`)."""
        raise NotImplementedError

    def wait_control(self, d: RealNova) -> None:
        """Until the conductor serves and the API answers."""
        raise NotImplementedError

    def start_agent(self, d: RealNova, spec: ComputeSpec) -> Process:
        """Start the agent of ``spec``'s host."""
        raise NotImplementedError

    def deployables(self, spec: ComputeSpec) -> int:
        """How many deployables with a provider ``spec``'s agent
        reports."""
        raise NotImplementedError

    def open(self, database_url: str) -> None:
        self.database_url = database_url
        self.engine = sa.create_engine(database_url,
                                       poolclass=sa.pool.NullPool)

    def db_rows(self, sql: str, **params) -> list[Any]:
        assert self.engine is not None, 'no database configured'
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def deployables_in_placement(self, hosts: Sequence[str]) -> int:
        """Deployables of ``hosts`` that have a resource provider (the
        same columns in upstream's schema and ours)."""
        rows = self.db_rows(
            'SELECT d.hostname FROM deployables dep JOIN devices d ON '
            'd.id = dep.device_id WHERE dep.rp_uuid IS NOT NULL')
        return sum(1 for (host,) in rows if host in hosts)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()


class OurCyborg(CyborgPart):
    """This tree's Cyborg: ``cyborg-dbsync upgrade``, cyborg-conductor,
    cyborg-api (``auth_strategy = keystone``, ``[nova]`` through
    Keystone to the real nova-api) and one cyborg-agent per compute host
    with the fake driver (and the NVIDIA GPU driver on a host tree), so
    that its devices nest under that compute node's provider.

    ``options`` are added to the control services' configuration;
    ``database_url`` is an existing database (default: a new one on the
    deployment's PostgreSQL); ``label`` tells the part's database and
    transport apart from another part's of the same deployment."""

    def __init__(self, options: Mapping[str, Mapping] | None = None,
                 database_url: str | None = None, label: str = 'cyborg'
                 ) -> None:
        super().__init__(label)
        self.options = options or {}
        self.given_url = database_url
        self.base: dict[str, dict[str, Any]] = {}
        self.conf = ''

    def configure(self, d: RealNova) -> None:
        self.open(self.given_url or d.database(self.label))
        transport = d.rabbitmq.create_vhost('%s-%s-%s' % (
            d.name, self.label, d.suffix))
        self.base = {
            'DEFAULT': {'transport_url': transport,
                        'state_path': d.directory, 'heartbeat_interval': 2,
                        'periodic_interval': 2, 'use_stderr': True},
            'database': {'connection': self.database_url},
            # As Cyborg's service user (admin and service roles;
            # placement.py).
            'placement': dict(d.placement_section, token=SERVICE_TOKEN),
        }
        config = json.loads(json.dumps(self.base))
        config['DEFAULT']['host'] = '%s-cyborg' % d.name
        config['api'] = {'auth_strategy': 'keystone',
                         'host_ip': servers.LOOPBACK, 'port': d.cyborg_port}
        config['keystone_authtoken'] = d.keystone.authtoken_options(
            d.cyborg_user, d.service_password)
        config['nova'] = dict(
            d.keystone.ksa_options(d.cyborg_user, d.service_password),
            timeout=10, retry_interval=0.2, retry_max_interval=2,
            poll_interval=0.5, claim_timeout=20)
        config['conductor'] = {'workers': 4, 'bind_timeout': 60,
                               'agent_timeout': 10}
        for section, options in self.options.items():
            config.setdefault(section, {}).update(options)
        self.conf = servers.write_config(
            os.path.join(d.directory, '%s.conf' % self.label), config)

    def migrate(self, d: RealNova) -> None:
        # A database of the deployment's PostgreSQL gets the run's dump;
        # one given (another server) is upgraded as an operator does.
        servers.upgrade_cyborg_database(
            self.conf, None if self.given_url else d.postgres)

    def start_control(self, d: RealNova) -> None:
        d.add(Process(self.process_name('conductor'), [
            servers.venv_script('cyborg-conductor'), '--config-file',
            self.conf], d.directory))
        if not d.cyborg_path:
            d.add(Process(self.process_name('api'), [
                servers.venv_script('cyborg-api'), '--config-file',
                self.conf], d.directory))
            return
        d.add(Process(self.process_name('api'), mounted_wsgi_argv(
            'cyborg.wsgi.api:application', d.cyborg_port, d.cyborg_path),
            d.directory, env={'CYBORG_CONFIG_FILES': self.conf}))

    def wait_control(self, d: RealNova) -> None:
        d.processes[self.process_name('conductor')].wait_log(
            'Started cyborg-conductor')
        api = d.processes[self.process_name('api')]
        servers.wait_for(lambda: requests.get(
            d.cyborg_url + '/', timeout=5).status_code == 200,
            START_TIMEOUT, 'cyborg-api', api.process, api.log,
            interval=0.25)

    def start_agent(self, d: RealNova, spec: ComputeSpec) -> Process:
        devices_file = os.path.join(d.directory,
                                    'devices-%s.json' % spec.host)
        with open(devices_file, 'w') as f:
            json.dump(spec.devices, f)
        config = json.loads(json.dumps(self.base))
        config['DEFAULT']['host'] = spec.host
        drivers = ['fake_driver']
        env = {}
        config['agent'] = {'resource_provider_name': spec.host,
                           'discovery_interval': 2}
        if spec.host_root:
            drivers.append('nvidia_gpu_driver')
            config['agent']['host_root'] = os.path.abspath(spec.host_root)
            env['PATH'] = spec.tools_dir
        config['agent']['enabled_drivers'] = ','.join(drivers)
        config['fake_driver'] = dict(spec.fake_driver,
                                     devices_file=devices_file)
        config_file = servers.write_config(
            os.path.join(d.directory, '%s-agent-%s.conf' % (self.label,
                                                            spec.host)),
            config)
        return d.add(Process(self.process_name('agent-' + spec.host), [
            servers.venv_script('cyborg-agent'), '--config-file',
            config_file], d.directory, env=env))

    def deployables(self, spec: ComputeSpec) -> int:
        return len(spec.devices) + spec.gpus


def mounted_wsgi_argv(app: str, port: int, path: str) -> list[str]:
    """uWSGI serving ``app`` at ``path`` of LOOPBACK:``port`` (the
    path in SCRIPT_NAME, as devstack's Apache passes it), logging each
    request."""
    argv = servers.wsgi_argv('uwsgi', app, port, 1, 4)
    argv[argv.index('--module'):argv.index('--module') + 2] = [
        '--mount', '%s=%s' % (path, app), '--manage-script-name']
    argv.remove('--disable-logging')
    return argv


class RealNova:
    """The running deployment; see the module docstring."""

    def __init__(self, name: str, directory: str, keystone, placement,
                 postgres, rabbitmq, cyborg_path: str = ''):
        self.name = name
        self.directory = directory
        self.keystone = keystone
        self.placement = placement
        self.postgres = postgres
        self.rabbitmq = rabbitmq
        self.suffix = uuid_lib.uuid4().hex[:8]
        self.processes: dict[str, Process] = {}
        self.computes: dict[str, ComputeSpec] = {}
        self.databases: list[str] = []
        self.stand_ins: StandIns | None = None
        self.startup_seconds: float | None = None
        self.timings: dict[str, float] = {}
        self.cyborg_part: CyborgPart | None = None
        self.nova_conf = ''
        self._session = None
        self.service_password = secrets.token_hex(10)
        # Service users of this deployment only (the Keystone may be
        # shared).
        self.nova_user = '%s-nova' % name
        self.cyborg_user = '%s-cyborg' % name
        self.cyborg_port = servers.free_port()
        # Where Cyborg's API is mounted: '' (served by cyborg-api) or a
        # path such as devstack's '/accelerator' (the API under uWSGI).
        self.cyborg_path = cyborg_path
        self.cyborg_url = 'http://%s:%d%s' % (servers.LOOPBACK,
                                              self.cyborg_port, cyborg_path)
        # The catalog names the versioned endpoint where the API is
        # mounted, as devstack registers it (<url>/accelerator/v2).
        self.cyborg_catalog_path = '/v2' if cyborg_path else ''
        self.placement_section = {
            'auth_type': 'admin_token', 'endpoint': placement.url,
            'token': 'admin', 'endpoint_override': placement.url}

    def database(self, kind: str) -> str:
        """A new database of this deployment on its PostgreSQL (dropped
        at the end); its URL."""
        db_name = '%s_%s_%s' % (self.name.replace('-', '_'), kind,
                                self.suffix)
        self.databases.append(db_name)
        return self.postgres.create_database(db_name)

    def load_schema(self, url: str, schema: str,
                    build: Callable[[str], None]) -> None:
        """Give this deployment's empty database at ``url`` the schema
        ``build`` makes (see :meth:`servers.PostgreSQLServer.load_schema`:
        built once per test run, then restored from a dump)."""
        self.postgres.load_schema(servers.database_name(url), schema, build)

    @property
    def cyborg_conf(self) -> str:
        """Our Cyborg's control services' configuration file."""
        assert isinstance(self.cyborg_part, OurCyborg)
        return self.cyborg_part.conf

    # Logs ------------------------------------------------------------------

    def logs(self, lines: int = 40) -> str:
        return '\n'.join('==== %s ====\n%s' % (name, servers.tail(p.log,
                                                                  lines))
                         for name, p in self.processes.items())

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            assert process.running(), '%s died:\n%s' % (
                name, servers.tail(process.log))

    def log_of(self, name: str) -> str:
        return self.processes[name].log_text()

    # Clients -----------------------------------------------------------------

    def session(self):
        """A keystoneauth session of Keystone's bootstrap admin (project
        ``admin``): the user whose servers the tests boot."""
        if self._session is None:
            # Not the Keystone fixture's admin session: its token (and
            # the catalog in it) may predate the services added here.
            from keystoneauth1 import loading
            from keystoneauth1 import session
            auth = loading.get_plugin_loader('password').load_from_options(
                auth_url=self.keystone.url, username='admin',
                password=self.keystone.admin_password, project_name='admin',
                user_domain_name='Default', project_domain_name='Default')
            self._session = session.Session(auth=auth)
        return self._session

    def compute(self, method: str, path: str, version: str =
                COMPUTE_API_VERSION, ok=(200, 201, 202, 204),
                **kwargs) -> Any:
        """A request to nova-api through the catalog; its JSON (or None).
        Fails unless the status is in ``ok``."""
        response = self.compute_response(method, path, version, **kwargs)
        assert response.status_code in ok, '%s %s: %s %s' % (
            method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def compute_response(self, method: str, path: str,
                         version: str = COMPUTE_API_VERSION, **kwargs):
        headers = dict(kwargs.pop('headers', {}))
        headers['OpenStack-API-Version'] = version
        return self.session().request(
            path, method, endpoint_filter={'service_type': 'compute',
                                           'interface': 'public'},
            headers=headers, raise_exc=False, **kwargs)

    def cyborg(self, method: str, path: str, ok=(200, 201, 202, 204),
               version: str = 'accelerator 2.5', **kwargs) -> Any:
        headers = dict(kwargs.pop('headers', {}))
        headers['OpenStack-API-Version'] = version
        if not self.cyborg_catalog_path:  # the catalog names the root
            path = '/v2' + path
        response = self.session().request(
            path, method,
            endpoint_filter={'service_type': 'accelerator',
                             'interface': 'public'},
            headers=headers, raise_exc=False, **kwargs)
        assert response.status_code in ok, '%s %s: %s %s' % (
            method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def placement_get(self, path: str) -> Any:
        response = requests.get(self.placement.url + path, timeout=10,
                                headers={'X-Auth-Token': 'admin',
                                         'OpenStack-API-Version':
                                         PLACEMENT_VERSION})
        assert response.status_code == 200, response.text
        return response.json()

    def db_rows(self, sql: str, **params) -> list[Any]:
        """Rows of ``sql`` on the running Cyborg's database."""
        assert self.cyborg_part is not None, 'no Cyborg running'
        return self.cyborg_part.db_rows(sql, **params)

    # Processes -------------------------------------------------------------

    def add(self, process: Process) -> Process:
        """Start ``process``; it is stopped with the deployment."""
        self.processes[process.name] = process
        return process.start()

    def start_compute(self, host: str) -> tuple[Process, int]:
        """(Re)start nova-compute of ``host``; the process and the length
        its log had before (the log is appended to)."""
        process = Process(
            'nova-compute-%s' % host,
            [servers.venv_script('nova-compute'), '--config-file',
             self.nova_conf, '--config-file',
             os.path.join(self.directory, 'compute-%s.conf' % host)],
            self.directory)
        start = len(process.log_text())
        self.add(process)
        return process, start

    def stop_process(self, name: str) -> None:
        self.processes[name].stop()

    # Compute hosts -----------------------------------------------------------

    def start_computes(self, computes: Sequence[ComputeSpec]) -> None:
        """Start nova-compute on each new host of ``computes``."""
        for spec in computes:
            state = os.path.join(self.directory,
                                 'compute-state-%s' % spec.host)
            os.makedirs(state)
            servers.write_config(
                os.path.join(self.directory, 'compute-%s.conf' % spec.host),
                {'DEFAULT': {'host': spec.host, 'state_path': state}})
            self.computes[spec.host] = spec
            self.start_compute(spec.host)

    def wait_computes(self, computes: Sequence[ComputeSpec]) -> None:
        """Until each host's compute node provider exists (then its
        Cyborg agent starts), the agents' devices are in Placement, and
        the computes are up and mapped to cell1 in nova-api."""
        started = time.monotonic()
        for spec in computes:
            compute = self.processes['nova-compute-%s' % spec.host]
            servers.wait_for(lambda host=spec.host: _compute_node_provider(
                self.placement, host), START_TIMEOUT,
                'the compute node provider of %s' % spec.host,
                compute.process, compute.log, interval=0.25)
        if self.cyborg_part is not None:
            self.start_agents(computes)
        self.timings['compute nodes'] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        hosts = {spec.host for spec in computes}

        def hypervisors_up():
            services = self.compute('GET', '/os-services?binary=nova-compute')[
                'services']
            up = {s['host'] for s in services if s['state'] == 'up'}
            with self._api_engine.connect() as conn:
                mapped = {row[0] for row in conn.execute(sa.text(
                    'SELECT host FROM host_mappings'))}
            return up >= hosts and mapped >= hosts
        servers.wait_for(hypervisors_up, START_TIMEOUT,
                         'the computes up in nova-api\n' + self.logs(20),
                         interval=0.5)
        self.timings['devices and hosts ready'] = round(
            time.monotonic() - started, 1)

    def retire_computes(self, hosts: Sequence[str]) -> None:
        """Disable the compute services of ``hosts``, so that nothing is
        scheduled there again, then stop their nova-compute and agent.
        Disabled while running: nova-api asks the compute to mark its
        provider disabled, and would wait a minute for a stopped one."""
        for host in hosts:
            for service in self.compute(
                    'GET', '/os-services?binary=nova-compute&host=%s'
                    % host)['services']:
                self.compute('PUT', '/os-services/%s' % service['id'],
                             json={'status': 'disabled',
                                   'disabled_reason': 'retired'})
            del self.computes[host]
        _stop_together([self.processes.pop(n) for n in list(self.processes)
                        if any(n == 'nova-compute-%s' % host
                               or n.endswith('-agent-%s' % host)
                               for host in hosts)])

    # Cyborg ------------------------------------------------------------------

    def start_cyborg(self, part: CyborgPart, configured: bool = False,
                     agents: bool = True) -> None:
        """Run ``part`` as this deployment's Cyborg: its database
        (unless ``configured``: :meth:`CyborgPart.configure` and
        :meth:`CyborgPart.migrate` already done), its control services,
        and (with ``agents``) an agent per compute host, whose compute
        node must exist; without, :meth:`wait_computes` starts them."""
        assert self.cyborg_part is None, 'a Cyborg is running'
        if not configured:
            part.configure(self)
            part.migrate(self)
        self.cyborg_part = part
        part.start_control(self)
        part.wait_control(self)
        if agents:
            self.start_agents(list(self.computes.values()))

    def start_agents(self, computes: Sequence[ComputeSpec]) -> None:
        """Start the running Cyborg's agent on each host of ``computes``;
        until their devices are in Placement."""
        part = self.cyborg_part
        assert part is not None

        def registered(specs):
            hosts = [spec.host for spec in specs]
            expected = sum(part.deployables(spec) for spec in specs)
            servers.wait_for(
                lambda: part.deployables_in_placement(hosts) >= expected,
                START_TIMEOUT, 'the devices of the agents of %s in '
                'Placement\n%s' % (hosts, self.logs(20)), interval=0.5)

        if part.concurrent_agents:
            for spec in computes:
                part.start_agent(self, spec)
            registered(computes)
        else:
            for spec in computes:
                part.start_agent(self, spec)
                registered([spec])

    def stop_cyborg(self) -> None:
        """Stop the running Cyborg's processes (its database stays)."""
        part, self.cyborg_part = self.cyborg_part, None
        if part is None:
            return
        prefix = part.label + '-'
        _stop_together([self.processes.pop(n) for n in list(self.processes)
                        if n.startswith(prefix)])
        part.close()

    def stop(self) -> None:
        errors = []
        try:
            _stop_together(list(self.processes.values()))
        except Exception as e:  # pragma: no cover - best effort
            errors.append(e)
        if self.stand_ins is not None:
            self.stand_ins.stop()
        if self.cyborg_part is not None:
            self.cyborg_part.close()
        if getattr(self, '_api_engine', None) is not None:
            self._api_engine.dispose()
        for database in self.databases:
            with contextlib.suppress(Exception):
                self.postgres.drop_database(database)
        if errors:
            raise errors[0]


def _stop_together(processes: Sequence[Process]) -> None:
    """Stop ``processes`` at the same time (each may take its graceful
    shutdown time)."""
    if not processes:
        return
    with concurrent.futures.ThreadPoolExecutor(len(processes)) as pool:
        for future in [pool.submit(p.stop) for p in processes]:
            future.result()


def _nova_manage(config_files: Sequence[str], log: str, *args: str) -> None:
    argv = [servers.venv_script('nova-manage')]
    for path in config_files:
        argv += ['--config-file', path]
    servers.run_logged(argv + list(args), log,
                       'nova-manage %s' % ' '.join(args), timeout=300)


def _nova_schema(directory: str, log: str, section: str,
                 *command: str) -> Callable[[str], None]:
    """What builds a Nova database schema: ``nova-manage COMMAND`` with
    ``[SECTION] connection`` the database's URL and nothing else."""
    def build(url: str) -> None:
        conf = servers.write_config(
            os.path.join(directory, 'nova-schema-%s.conf'
                         % servers.database_name(url)),
            {section: {'connection': url}})
        _nova_manage([conf], log, *command)
    return build


# Nova's cell0 (objects.CellMapping.CELL0_UUID).
CELL0_UUID = '00000000-0000-0000-0000-000000000000'


def _map_cells(api_engine, cell0_db: str, cell1_db: str,
               transport_url: str) -> None:
    """The cell mappings ``nova-manage cell_v2 map_cell0`` and
    ``cell_v2 create_cell --name cell1`` write (``CellMapping.create``
    of nova/cmd/manage.py), written directly: each command is about 5 s
    of CPU on a 2-core machine, mostly Nova's imports, for one row."""
    cells = sa.table('cell_mappings', sa.column('created_at'),
                     sa.column('uuid'), sa.column('name'),
                     sa.column('transport_url'),
                     sa.column('database_connection'),
                     sa.column('disabled'))
    now = datetime.datetime.utcnow()
    with api_engine.begin() as connection:
        connection.execute(sa.insert(cells), [
            # cell0 has no message queue: Nova's 'none:///' transport.
            dict(created_at=now, uuid=CELL0_UUID, name='cell0',
                 transport_url='none:///', database_connection=cell0_db,
                 disabled=False),
            dict(created_at=now, uuid=str(uuid_lib.uuid4()), name='cell1',
                 transport_url=transport_url, database_connection=cell1_db,
                 disabled=False)])


def _timed(timings: dict, name: str, function, *args):
    started = time.monotonic()
    try:
        return function(*args)
    finally:
        timings[name] = round(time.monotonic() - started, 1)


def _compute_node_provider(placement, host: str) -> str | None:
    response = requests.get(
        placement.url + '/resource_providers', params={'name': host},
        headers={'X-Auth-Token': 'admin',
                 'OpenStack-API-Version': PLACEMENT_VERSION}, timeout=10)
    response.raise_for_status()
    providers = response.json()['resource_providers']
    return providers[0]['uuid'] if providers else None


@contextlib.contextmanager
def real_nova(name: str, postgres, rabbitmq, placement, keystone,
              work_dir: str, computes: Sequence[ComputeSpec],
              cyborg_options: Mapping[str, Mapping] | None = None,
              nova_options: Mapping[str, Mapping] | None = None,
              cyborg: CyborgPart | None = None, with_cyborg: bool = True,
              cyborg_path: str = '') -> Iterator[RealNova]:
    """Start the deployment of the module docstring; stop it after.

    Its Cyborg is ``cyborg`` (default: :class:`OurCyborg` with
    ``cyborg_options``), or none at first without ``with_cyborg``
    (:meth:`RealNova.start_cyborg` starts one later); its API is in the
    catalog at ``cyborg_path`` (see :class:`RealNova`)."""
    started = time.monotonic()
    directory = os.path.join(work_dir, name)
    os.makedirs(directory)
    deployment = RealNova(name, directory, keystone, placement, postgres,
                          rabbitmq, cyborg_path)
    if with_cyborg and cyborg is None:
        cyborg = OurCyborg(cyborg_options)
    try:
        _start(deployment, computes, cyborg, nova_options or {})
        deployment.startup_seconds = round(time.monotonic() - started, 1)
        yield deployment
    finally:
        deployment.stop()


def _start(d: RealNova, computes: Sequence[ComputeSpec],
           cyborg: CyborgPart | None,
           nova_options: Mapping[str, Mapping]) -> None:
    directory = d.directory
    keystone = d.keystone
    timings = d.timings
    password = d.service_password
    nova_user, cyborg_user = d.nova_user, d.cyborg_user

    api_db, cell0_db, cell1_db = (d.database(k) for k in ('napi', 'ncell0',
                                                          'ncell1'))
    d._api_engine = sa.create_engine(api_db, poolclass=sa.pool.NullPool)
    nova_transport = d.rabbitmq.create_vhost('%s-nova-%s' % (d.name,
                                                             d.suffix))
    nova_port = servers.free_port()
    nova_url = 'http://%s:%d' % (servers.LOOPBACK, nova_port)

    d.stand_ins = StandIns().start()

    # Keystone: service users and the catalog.
    def identity():
        for user in (nova_user, cyborg_user):
            keystone.add_user(user, password, 'service',
                              ['admin', 'service'])
        keystone.add_service('compute', 'nova', nova_url + '/v2.1')
        keystone.add_service('accelerator', 'cyborg',
                             d.cyborg_url + d.cyborg_catalog_path)
        keystone.add_service('image', 'glance', d.stand_ins.url + '/image')
        keystone.add_service('network', 'neutron',
                             d.stand_ins.url + '/network')

    # Nova's configuration: one file for every service, plus one per
    # compute host with its host name and state directory.
    etc = os.path.join(directory, 'etc-nova')
    os.makedirs(etc)
    shutil.copy(os.path.join(sys.prefix, 'etc', 'nova', 'api-paste.ini'),
                etc)
    authtoken = keystone.authtoken_options(nova_user, password)
    authtoken['service_type'] = 'compute'
    nova_service_user = keystone.ksa_options(nova_user, password)
    nova_config: dict[str, dict[str, Any]] = {
        'DEFAULT': {
            'transport_url': nova_transport,
            'host': '%s-control' % d.name,
            'state_path': directory,
            'my_ip': servers.LOOPBACK,
            'use_stderr': True,
            'debug': False,
            'compute_driver': 'fake.FakeDriverWithoutFakeNodes',
            # Nothing in these tests needs the periodic tasks that call
            # other services; they only cost CPU on a small test host.
            'heal_instance_info_cache_interval': -1,
            'sync_power_state_interval': -1,
            'update_resources_interval': 60,
            'instance_delete_interval': -1,
            'arq_binding_timeout': 90,
            'shelved_offload_time': 0,
            'report_interval': 5,
            # Periodic tasks (the scheduler's host discovery) start at
            # once, not after up to a minute.
            'periodic_fuzzy_delay': 0,
            'service_down_time': 60,
        },
        'api_database': {'connection': api_db, 'max_pool_size': 2},
        'database': {'connection': cell1_db, 'max_pool_size': 2},
        'api': {'auth_strategy': 'keystone'},
        'keystone_authtoken': authtoken,
        'service_user': dict(nova_service_user,
                             send_service_user_token=True),
        'placement': d.placement_section,
        'cyborg': {'region_name': 'RegionOne'},
        'glance': {'region_name': 'RegionOne'},
        'neutron': dict(nova_service_user, default_floating_pool='none'),
        'scheduler': {'discover_hosts_in_cells_interval': 2, 'workers': 1},
        'conductor': {'workers': 1},
        'quota': {'driver': 'nova.quota.NoopQuotaDriver'},
        'vnc': {'enabled': False},
        'oslo_concurrency': {'lock_path': os.path.join(directory, 'locks')},
        'oslo_messaging_notifications': {'driver': 'noop'},
    }
    for section, options in nova_options.items():
        nova_config.setdefault(section, {}).update(options)
    d.nova_conf = servers.write_config(os.path.join(etc, 'nova.conf'),
                                       nova_config)
    manage_log = os.path.join(directory, 'nova-manage.log')

    def nova_api_db():
        d.load_schema(api_db, 'nova_api', _nova_schema(
            directory, manage_log, 'api_database', 'api_db', 'sync'))
        _map_cells(d._api_engine, cell0_db, cell1_db, nova_transport)

    def nova_cell_db(url):
        d.load_schema(url, 'nova_cell', _nova_schema(
            directory, manage_log, 'database', 'db', 'sync', '--local_cell'))


    if cyborg is not None:
        cyborg.configure(d)
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        futures = [
            pool.submit(_timed, timings, 'keystone users and catalog',
                        identity),
            pool.submit(_timed, timings, 'nova api db and cells',
                        nova_api_db),
            pool.submit(_timed, timings, 'nova cell1 db', nova_cell_db,
                        cell1_db),
            pool.submit(_timed, timings, 'nova cell0 db', nova_cell_db,
                        cell0_db)]
        if cyborg is not None:
            futures.append(pool.submit(_timed, timings, 'cyborg db',
                                       cyborg.migrate, d))
        for future in futures:
            future.result()

    started = time.monotonic()
    conf_args = ['--config-file', d.nova_conf]
    nova_env = {'OS_NOVA_CONFIG_DIR': etc}
    conductor = d.add(Process('nova-conductor', [
        servers.venv_script('nova-conductor')] + conf_args, directory))
    # One scheduling request at a time: Placement 16 lets concurrent
    # allocation writes overcommit a provider (its capacity check and
    # generation increment race; seen on PostgreSQL and MariaDB), so
    # parallel boots would get more servers than a device has
    # accelerators, and Cyborg's bind would refuse the extra ones.
    scheduler_conf = servers.write_config(
        os.path.join(directory, 'nova-scheduler.conf'),
        {'DEFAULT': {'executor_thread_pool_size': 1}})
    scheduler = d.add(Process('nova-scheduler', [
        servers.venv_script('nova-scheduler')] + conf_args
        + ['--config-file', scheduler_conf], directory))
    with open(os.path.join(etc, 'nova_api_app.py'), 'w') as f:
        f.write(NOVA_API_APP)
    nova_api = d.add(Process('nova-api', servers.wsgi_argv(
        'gunicorn', 'nova_api_app:application', nova_port, 1, threads=4,
        chdir=etc), directory, env=nova_env))
    if cyborg is not None:
        d.cyborg_part = cyborg
        cyborg.start_control(d)
    conductor.wait_log('Starting conductor node')
    d.start_computes(computes)
    scheduler.wait_log('Starting scheduler node')
    servers.wait_for(lambda: requests.get(nova_url + '/', timeout=5)
                     .status_code == 200, START_TIMEOUT, 'nova-api',
                     nova_api.process, nova_api.log, interval=0.25)
    if cyborg is not None:
        cyborg.wait_control(d)
    timings['control services'] = round(time.monotonic() - started, 1)
    # Agents once their compute node's provider exists; every device in
    # Placement, under its host's compute node.
    d.wait_computes(computes)
