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

"""A real Placement service running inside the cyborg all-in-one.

:func:`start` serves the openstack-placement WSGI application from a
thread of the current process, on SQLite in the all-in-one's state
directory, with ``auth_strategy = noauth2`` (no keystone: clients send
``X-Auth-Token: admin``, see
:meth:`cyborg.clients.placement.PlacementClient.for_endpoint`). Placement's
options live in a ConfigOpts of their own; cyborg's global CONF is not
touched.

Placement keeps process-wide state, which limits what one process can do:

* its database transaction factory
  (``placement.db_api.placement_context_manager``) is global and is
  configured only once per process (``db_api.configure`` is ``run_once``;
  a second call only logs a warning and keeps the first database);
* its policy enforcer (``placement.policy._ENFORCER``) is global and keeps
  the first ConfigOpts it was initialised with;
* the standard traits and resource classes are synced into the database
  once per process (``_TRAITS_SYNCED``, ``_RESOURCE_CLASSES_SYNCED``).

So a process can run Placement on one database only: :func:`start` may be
called again (after :meth:`EmbeddedPlacement.stop`, or for a second
listener) with the same ``state_dir``, but a different ``state_dir``
raises :class:`EmbeddedPlacementError` instead of silently serving the
first database.
"""

from __future__ import annotations

import os
import threading
import uuid as uuid_lib

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.api import wsgi_server
from cyborg.clients import placement as placement_client

LOG = logging.getLogger(__name__)

DATABASE_FILE = 'placement.sqlite'

_lock = threading.Lock()
_database_url: str | None = None  # the database this process's Placement uses


class EmbeddedPlacementError(RuntimeError):
    """The embedded Placement cannot be started."""


class EmbeddedPlacement:
    """A Placement served from a thread; ``url`` is its endpoint."""

    def __init__(self, conf: cfg.ConfigOpts, server: wsgi_server.WSGIServer,
                 host: str, state_dir: str, database_url: str):
        self.conf = conf
        self.host = host
        self.state_dir = state_dir
        self.database_url = database_url
        self._server: wsgi_server.WSGIServer | None = server

    @property
    def port(self) -> int:
        if self._server is None:
            raise EmbeddedPlacementError('embedded Placement is stopped')
        return self._server.port

    @property
    def url(self) -> str:
        host = '[%s]' % self.host if ':' in self.host else self.host
        return 'http://%s:%d' % (host, self.port)

    def client(self) -> placement_client.PlacementClient:
        """A client of this Placement (admin through noauth2)."""
        return placement_client.PlacementClient.for_endpoint(self.url)

    def stop(self) -> None:
        """Stop serving (idempotent). The database stays configured."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()
            LOG.info('Embedded Placement stopped.')

    def __enter__(self) -> EmbeddedPlacement:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _make_conf(database_url: str) -> cfg.ConfigOpts:
    from placement import conf as placement_conf

    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf.set_override('auth_strategy', 'noauth2', group='api')
    conf.set_override('connection', database_url,
                      group='placement_database')
    # loadapp() upgrades the schema to head when this is set.
    conf.set_override('sync_on_startup', True, group='placement_database')
    # No command line and no config files: /etc/placement is not read.
    conf([], project='placement', default_config_files=[],
         default_config_dirs=[])
    return conf


def _load_app(state_dir: str, database_url: str):
    """Placement's WSGI application on ``database_url`` (its schema
    upgraded to head), and its ConfigOpts."""
    global _database_url
    from placement import db_api
    from placement import deploy

    with _lock:
        if _database_url is not None and _database_url != database_url:
            raise EmbeddedPlacementError(
                'Placement already runs in this process on %s; it keeps '
                'its database configuration in global state and cannot '
                'serve %s as well' % (_database_url, database_url))
        if _database_url is None and db_api.configure.called:
            raise EmbeddedPlacementError(
                "Placement's database was already configured in this "
                'process by something else; it cannot be reconfigured')
        os.makedirs(state_dir, exist_ok=True)
        conf = _make_conf(database_url)
        if _database_url is None:
            db_api.configure(conf)
            _database_url = database_url
        return deploy.loadapp(conf), conf


def start(state_dir: str, host: str = '127.0.0.1',
          port: int = 0) -> EmbeddedPlacement:
    """Start Placement on ``host``:``port`` (0: any free port).

    Its SQLite database is ``<state_dir>/placement.sqlite``, created or
    upgraded to the current schema before serving. Raises
    :class:`cyborg.api.wsgi_server.CannotListen` if the address
    cannot be bound (before the database is touched), and
    :class:`EmbeddedPlacementError` if this process already runs
    Placement on another database (see the module documentation).
    """
    database_url = 'sqlite:///%s' % os.path.abspath(
        os.path.join(state_dir, DATABASE_FILE))
    server = wsgi_server.WSGIServer(None, host, port)
    try:
        app, conf = _load_app(state_dir, database_url)
    except BaseException:
        server.stop()
        raise
    server.set_app(app)
    server.start()
    placement = EmbeddedPlacement(conf, server, host, state_dir,
                                  database_url)
    LOG.info('Embedded Placement serving %s on %s', database_url,
             placement.url)
    return placement


def ensure_compute_node(client: placement_client.PlacementClient,
                        name: str) -> str:
    """The uuid of root provider ``name``, created if there is none.

    Stands in for nova-compute, which creates the compute node's root
    provider that cyborg hangs device providers under. Idempotent, also
    when two callers race.
    """
    for _attempt in range(2):
        provider = client.find_provider_by_name(name)
        if provider is not None:
            if provider.get('parent_provider_uuid'):
                raise placement_client.ProviderConflict(
                    'resource provider %r (%s) exists but is not a root '
                    'provider' % (name, provider['uuid']))
            return provider['uuid']
        try:
            return client.create_provider(str(uuid_lib.uuid4()),
                                          name)['uuid']
        except placement_client.ProviderConflict:
            continue  # created concurrently: find it
    raise placement_client.ProviderConflict(
        'cannot create or find resource provider %r' % name)
