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
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from cyborg.clients import placement as placement_client
from tests.functional import servers

# openstack-placement installs no placement-api console script: this
# serves placement.wsgi.init_application() (which reads
# $OS_PLACEMENT_CONFIG_DIR/placement.conf) with a threaded wsgiref server.
LAUNCHER = '''
import sys, threading
from placement import wsgi
from cyborg.common import wsgi_server
app = wsgi.init_application()
server = wsgi_server.WSGIServer(app, sys.argv[1], int(sys.argv[2]))
server.start()
print('Placement listening on port %d' % server.port, flush=True)
threading.Event().wait()
'''


class PlacementServer(servers._Server):
    """openstack-placement on 127.0.0.1:<free port>, auth noauth2.

    ``database_url`` defaults to SQLite in the server's directory; the
    schema is created with ``placement-manage db sync`` before the API
    starts. ``url`` is the endpoint (no trailing slash).
    """

    def __init__(self, base_dir: str | None = None,
                 database_url: str | None = None, start_timeout=60.0,
                 workers: int = 1):
        super().__init__(base_dir, prefix='cyborg-placement-')
        self.workers = workers
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

    def _start(self) -> None:
        self._write_config()
        servers.run_logged([servers.venv_script('placement-manage'),
                            '--config-file', self.config_file, 'db', 'sync'],
                           self.log, 'placement-manage db sync',
                           cwd=self.base_dir)
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   OS_PLACEMENT_CONFIG_DIR=self.config_dir)
        if self.workers > 1:
            # As deployed: several processes under a WSGI server.
            argv = [servers.venv_script('gunicorn'), '--workers',
                    str(self.workers), '--bind',
                    '%s:%d' % (servers.LOOPBACK, self.port),
                    '--log-level', 'warning',
                    'placement.wsgi:init_application()']
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

    def __enter__(self):
        # Unlike the other helpers, also remove the directory when the
        # start fails (__exit__ is not called then).
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def log_text(self) -> str:
        with open(self.log, errors='replace') as f:
            return f.read()


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
