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

"""A real Placement service for functional tests.

:class:`PlacementServer` runs the openstack-placement WSGI application in
a separate process on a free loopback port, with a private config
directory, ``auth_strategy = noauth2`` and SQLite (or a given database
URL)::

    with PlacementServer() as placement:
        client = placement.client()
        client.create_provider(uuid, 'compute-1')

The ``placement`` fixture (session scope) gives every test the same
server; tests use unique provider names.

The token ``admin`` has the admin role only; :data:`SERVICE_TOKEN` stands
for cyborg's service user, with the roles keystone gives it (admin and
service: Placement's reshaper needs the latter).
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from cyborg.clients import placement as placement_client
from tests.functional import servers

# The token of cyborg's service user in test deployments (``[placement]
# token`` of a conductor), and the roles keystone would give it. noauth2
# gives roles only from an X-Roles header (admin to the token "admin"), so
# the test servers add these to requests with this token and no X-Roles.
SERVICE_TOKEN = 'cyborg-service'
SERVICE_ROLES = ('admin', 'service')

# Wraps the WSGI application ``app`` to do so.
SERVICE_ROLES_WRAPPER = '''
_placement_app = app


def app(environ, start_response):
    if (environ.get('HTTP_X_AUTH_TOKEN') == %(token)r
            and 'HTTP_X_ROLES' not in environ):
        environ['HTTP_X_ROLES'] = %(roles)r
    return _placement_app(environ, start_response)
''' % {'token': SERVICE_TOKEN, 'roles': ','.join(SERVICE_ROLES)}

# openstack-placement installs no placement-api console script: this
# serves placement.wsgi.init_application() (which reads
# $OS_PLACEMENT_CONFIG_DIR/placement.conf) with a threaded wsgiref server.
LAUNCHER = '''
import sys, threading
from placement import wsgi
from cyborg.api import wsgi_server
app = wsgi.init_application()
''' + SERVICE_ROLES_WRAPPER + '''
server = wsgi_server.WSGIServer(app, sys.argv[1], int(sys.argv[2]))
server.start()
print('Placement listening on port %d' % server.port, flush=True)
threading.Event().wait()
'''

# The same application as a module, for gunicorn or uWSGI.
APP_MODULE = '''
from placement import wsgi
app = wsgi.init_application()
''' + SERVICE_ROLES_WRAPPER


class PlacementServer(servers._Server):
    """openstack-placement on 127.0.0.1:<free port>, auth noauth2.

    ``database_url`` defaults to SQLite in the server's directory; the
    schema is created with ``placement-manage db sync`` before the API
    starts. When ``db_server``, the server holding ``database_url``, is
    a :class:`servers.PostgreSQLServer`, the schema is instead restored
    from a dump that Placement's own ``db sync`` built once per test run
    (:meth:`~servers.PostgreSQLServer.load_schema`). ``url`` is the
    endpoint (no trailing slash). With several ``workers`` it runs under
    ``wsgi_server`` (see :func:`servers.wsgi_argv`), else in one threaded
    process.
    """

    def __init__(self, base_dir: str | None = None,
                 database_url: str | None = None, start_timeout=60.0,
                 workers: int = 1, wsgi_server: str = 'gunicorn',
                 db_server=None):
        super().__init__(base_dir, prefix='cyborg-placement-')
        self.db_server = db_server
        self.workers = workers
        self.wsgi_server = wsgi_server
        self.port = servers.free_port()
        self.config_dir = os.path.join(self.base_dir, 'etc')
        self.config_file = os.path.join(self.config_dir, 'placement.conf')
        self.log = os.path.join(self.base_dir, 'placement.log')
        self.database_url = database_url or 'sqlite:///%s' % os.path.join(
            self.base_dir, 'placement.sqlite')
        self.start_timeout = start_timeout

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (servers.LOOPBACK, self.port)

    def client(self) -> placement_client.PlacementClient:
        """A new client of this server (admin, via noauth2)."""
        return placement_client.PlacementClient.for_endpoint(self.url)

    def service_client(self) -> placement_client.PlacementClient:
        """A new client of this server as cyborg's service user."""
        return placement_client.PlacementClient.for_endpoint(
            self.url, token=SERVICE_TOKEN)

    def _write_config(self) -> None:
        os.makedirs(self.config_dir, exist_ok=True)
        database = {'connection': self.database_url}
        if self.database_url.startswith('sqlite'):
            database['sqlite_synchronous'] = False
        servers.write_config(self.config_file, {
            'DEFAULT': {'debug': False},
            'api': {'auth_strategy': 'noauth2'},
            'placement_database': database,
        })

    def _db_sync(self, config_file: str) -> None:
        servers.run_logged([servers.venv_script('placement-manage'),
                            '--config-file', config_file, 'db', 'sync'],
                           self.log, 'placement-manage db sync',
                           cwd=self.base_dir)

    def _create_schema(self) -> None:
        """``placement-manage db sync``, or on PostgreSQL the restore of
        the schema it built once per test run."""
        if not isinstance(self.db_server, servers.PostgreSQLServer):
            self._db_sync(self.config_file)
            return

        def build(url: str) -> None:  # in the dump's own database
            self._db_sync(servers.write_config(
                os.path.join(self.config_dir, 'placement-schema-%s.conf'
                             % servers.database_name(url)),
                {'placement_database': {'connection': url}}))
        self.db_server.load_schema(servers.database_name(self.database_url),
                                   'placement', build)

    def _start(self) -> None:
        self._write_config()
        self._create_schema()
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   OS_PLACEMENT_CONFIG_DIR=self.config_dir)
        if self.workers > 1:
            # As deployed: several processes under a WSGI server.
            with open(os.path.join(self.base_dir, 'placement_app.py'),
                      'w') as f:
                f.write(APP_MODULE)
            argv = servers.wsgi_argv(self.wsgi_server, 'placement_app:app',
                                     self.port, self.workers,
                                     chdir=self.base_dir)
        else:
            argv = [sys.executable, '-c', LAUNCHER, servers.LOOPBACK,
                    str(self.port)]
        self.process = servers.spawn(argv, self.log, env=env,
                                     cwd=self.base_dir)
        client = placement_client.PlacementClient.for_endpoint(
            self.url, timeout=2)
        servers.wait_for(client.check_version, self.start_timeout,
                         'Placement on port %d' % self.port, self.process,
                         self.log)


_shared: dict = {'server': None, 'users': 0}
_shared_lock = threading.Lock()


@pytest.fixture(scope='session')
def placement():
    """A running :class:`PlacementServer`, shared by the whole session.

    The server is reference-counted, so that a module importing this
    fixture besides the conftest (two fixture definitions for pytest)
    still gets the same server; the last user stops it.
    """
    with _shared_lock:
        if _shared['server'] is None:
            _shared['server'] = PlacementServer().__enter__()
        _shared['users'] += 1
        server = _shared['server']
    try:
        yield server
    finally:
        with _shared_lock:
            _shared['users'] -= 1
            if _shared['users'] == 0:
                _shared['server'] = None
                server.cleanup()
