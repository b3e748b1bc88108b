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

"""A real Keystone for functional tests.

:class:`KeystoneServer` runs the ``keystone`` package from PyPI (its WSGI
application ``keystone.wsgi.api:application``) on a free loopback port,
with its database on a given SQLAlchemy URL (the suite's PostgreSQL),
fernet and credential keys and its config file in a temporary directory::

    with KeystoneServer(postgres.create_database('keystone'),
                        db_server=postgres) as keystone:
        keystone.add_user('cyborg', 'secret', 'service', ['admin',
                                                          'service'])
        keystone.add_service('accelerator', 'cyborg', api_url)
        config['keystone_authtoken'] = keystone.authtoken_options(
            'cyborg', 'secret')

Set-up is what a deployment does: ``keystone-manage db_sync``,
``fernet_setup``, ``credential_setup`` and ``bootstrap`` (user ``admin``
with the admin role on project ``admin`` and on the system, the roles
reader, member, manager, admin and service, region ``RegionOne`` and the
identity endpoints), then the application is served with the suite's WSGI
server (:func:`servers.wsgi_argv`). ``url`` is the auth URL without a
version (``http://127.0.0.1:PORT``). When ``db_server``, the server
holding the database, is a :class:`servers.PostgreSQLServer`, the schema
is restored from a dump that Keystone's own ``db_sync`` built once per
test run (:meth:`~servers.PostgreSQLServer.load_schema`) instead of
running ``db_sync`` for every server.

Passwords are hashed with bcrypt at its minimum cost (4 rounds) so that
tokens are cheap to issue, and the server is one process with ``threads``
threads and keystone's cache in memory (in production the cache is a
memcached that all the workers share: the same thing for keystone).
The whole start takes about 6 seconds (set-up commands run in parallel
where they can); ``startup_seconds`` says how long it took.
"""

from __future__ import annotations

from collections.abc import Callable
import grp
import os
import pwd
import secrets
import threading
import time

import requests

from tests.functional import servers

REGION = 'RegionOne'
DOMAIN = 'Default'
SERVICE_PROJECT = 'service'

# keystone.wsgi.api parses the process's command line as its own options
# (gunicorn's would be refused): served through this module instead.
APP_MODULE = '''
import sys
sys.argv = sys.argv[:1]
from keystone.wsgi.api import application  # noqa: E402,F401
'''


class KeystoneServer(servers._Server):
    """Keystone on 127.0.0.1:<free port> with its database on
    ``database_url``; see the module docstring."""

    def __init__(self, database_url: str, work_dir: str | None = None,
                 threads: int = 8,
                 wsgi_server: str | None = None, start_timeout=90.0,
                 db_server=None):
        super().__init__(work_dir, prefix='cyborg-keystone-')
        self.database_url = database_url
        self.db_server = db_server
        self.port = servers.free_port()
        self.threads = threads
        self.wsgi_server = wsgi_server or servers.default_wsgi_server()
        self.start_timeout = start_timeout
        self.admin_password = secrets.token_hex(12)
        self.config_dir = os.path.join(self.base_dir, 'etc')
        self.config_file = os.path.join(self.config_dir, 'keystone.conf')
        self.log = os.path.join(self.base_dir, 'keystone.log')
        self.startup_seconds: float | None = None
        self._admin_session = None
        self._system_session = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (servers.LOOPBACK, self.port)

    # Start / stop ---------------------------------------------------------

    def _write_config(self) -> None:
        os.makedirs(self.config_dir, exist_ok=True)
        servers.write_config(self.config_file, {
            'DEFAULT': {'debug': False, 'use_stderr': True},
            'database': {'connection': self.database_url,
                         'max_pool_size': 5},
            'token': {'provider': 'fernet', 'expiration': 7200},
            'fernet_tokens': {'key_repository': os.path.join(
                self.base_dir, 'fernet-keys')},
            'fernet_receipts': {'key_repository': os.path.join(
                self.base_dir, 'fernet-keys')},
            'credential': {'key_repository': os.path.join(
                self.base_dir, 'credential-keys')},
            'identity': {'password_hash_algorithm': 'bcrypt',
                         'password_hash_rounds': 4},
            # One process, so its in-memory cache is the only one and
            # keystone's invalidations keep it right, as they keep a
            # memcached shared by all the workers of a deployment.
            # Without it a token validation costs hundreds of queries.
            'cache': {'enabled': True, 'backend': 'dogpile.cache.memory'},
        })

    def _manage_argv(self, *args: str) -> list[str]:
        return [servers.venv_script('keystone-manage'), '--config-file',
                self.config_file] + list(args)

    def _manage(self, *args: str) -> None:
        servers.run_logged(self._manage_argv(*args), self.log,
                           'keystone-manage %s' % args[0],
                           cwd=self.base_dir, timeout=180)

    def _owner(self) -> list[str]:
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(os.getegid()).gr_name
        return ['--keystone-user', user, '--keystone-group', group]

    def _in_parallel(self, commands: dict[str, list[str]],
                     meanwhile: Callable[[], None] | None = None) -> None:
        """Run ``keystone-manage`` commands at the same time (and
        ``meanwhile()`` in this thread while they run); fail with the log
        of the first that fails (after all ended)."""
        logs = {name: os.path.join(self.base_dir, 'manage-%s.log' % name)
                for name in commands}
        running = {name: servers.spawn(argv, logs[name], cwd=self.base_dir)
                   for name, argv in commands.items()}
        try:
            if meanwhile is not None:
                meanwhile()
            for process in running.values():
                process.wait(180)
        finally:
            for process in running.values():
                servers.kill_group(process)
        for name, process in running.items():
            if process.returncode != 0:
                raise servers.ServerError(
                    'keystone-manage %s failed with exit code %s:\n%s'
                    % (name, process.returncode, servers.tail(logs[name])))

    def _load_schema(self) -> None:
        """The schema restored from the dump of a ``db_sync`` run once
        per test run (on PostgreSQL only)."""
        def build(url: str) -> None:  # in the dump's own database
            config = servers.write_config(
                os.path.join(self.config_dir, 'keystone-schema-%s.conf'
                             % servers.database_name(url)),
                {'database': {'connection': url}})
            servers.run_logged([servers.venv_script('keystone-manage'),
                                '--config-file', config, 'db_sync'],
                               self.log, 'keystone-manage db_sync',
                               cwd=self.base_dir, timeout=180)
        self.db_server.load_schema(servers.database_name(self.database_url),
                                   'keystone', build)

    def _start(self) -> None:
        # What does not depend on each other runs at the same time: the
        # schema and the key repositories, then the bootstrap and the
        # start of the WSGI server (which needs only the schema).
        started = time.monotonic()
        self._write_config()
        commands = {
            'fernet_setup': self._manage_argv('fernet_setup',
                                              *self._owner()),
            'credential_setup': self._manage_argv('credential_setup',
                                                  *self._owner())}
        if isinstance(self.db_server, servers.PostgreSQLServer):
            self._in_parallel(commands, meanwhile=self._load_schema)
        else:
            commands['db_sync'] = self._manage_argv('db_sync')
            self._in_parallel(commands)
        env = dict(os.environ, PYTHONUNBUFFERED='1',
                   OS_KEYSTONE_CONFIG_DIR=self.config_dir)
        with open(os.path.join(self.base_dir, 'keystone_app.py'), 'w') as f:
            f.write(APP_MODULE)
        argv = servers.wsgi_argv(self.wsgi_server,
                                 'keystone_app:application', self.port,
                                 1, self.threads,
                                 chdir=self.base_dir)
        self.process = servers.spawn(argv, self.log, env=env,
                                     cwd=self.base_dir)
        self._in_parallel({'bootstrap': self._manage_argv(
            'bootstrap', '--bootstrap-password', self.admin_password,
            '--bootstrap-admin-url', self.url,
            '--bootstrap-public-url', self.url,
            '--bootstrap-internal-url', self.url,
            '--bootstrap-region-id', REGION)})
        servers.wait_for(self._ready, self.start_timeout,
                         'Keystone on port %d' % self.port, self.process,
                         self.log, interval=0.2)
        self.add_project(SERVICE_PROJECT)
        self.startup_seconds = time.monotonic() - started

    def _ready(self) -> bool:
        response = requests.get(self.url + '/v3', timeout=2)
        return response.status_code == 200

    def _stop(self) -> None:
        self._admin_session = None
        self._system_session = None
        super()._stop()

    # Administration (as the bootstrap admin, over the API) ------------------

    def admin_session(self):
        """A keystoneauth session of the bootstrap admin (project
        ``admin``)."""
        with self._lock:
            if self._admin_session is None:
                from keystoneauth1 import loading
                from keystoneauth1 import session
                auth = loading.get_plugin_loader('password').load_from_options(
                    auth_url=self.url, username='admin',
                    password=self.admin_password, project_name='admin',
                    user_domain_name=DOMAIN, project_domain_name=DOMAIN)
                self._admin_session = session.Session(auth=auth)
            return self._admin_session

    def _request(self, method: str, path: str, ok=(200,), **kwargs):
        response = self.admin_session().request(
            self.url + '/v3' + path, method, raise_exc=False, **kwargs)
        if response.status_code not in ok:
            raise servers.ServerError('Keystone %s %s: %s %s' % (
                method, path, response.status_code, response.text))
        return response.json() if response.content else None

    def _find(self, collection: str, **filters) -> dict | None:
        items = self._request('GET', '/%s' % collection,
                              params=filters)[collection]
        return items[0] if items else None

    def _domain_id(self) -> str:
        return self._find('domains', name=DOMAIN)['id']

    def add_role(self, name: str) -> str:
        """Create role ``name`` unless it exists; its id."""
        role = self._find('roles', name=name)
        if role is None:
            role = self._request('POST', '/roles', ok=(201,),
                                 json={'role': {'name': name}})['role']
        return role['id']

    def add_project(self, name: str) -> str:
        """Create project ``name`` in the default domain unless it
        exists; its id."""
        project = self._find('projects', name=name,
                             domain_id=self._domain_id())
        if project is None:
            project = self._request('POST', '/projects', ok=(201,), json={
                'project': {'name': name, 'domain_id': self._domain_id(),
                            'enabled': True}})['project']
        return project['id']

    def add_user(self, name: str, password: str, project: str,
                 roles: list[str]) -> str:
        """User ``name`` (created, or its password changed if it is not
        ``password``) with ``roles`` on ``project``; project and roles
        are created if missing. Its id."""
        project_id = self.add_project(project)
        user = self._find('users', name=name, domain_id=self._domain_id())
        if user is None:
            user = self._request('POST', '/users', ok=(201,), json={
                'user': {'name': name, 'password': password,
                         'domain_id': self._domain_id(),
                         'default_project_id': project_id,
                         'enabled': True}})['user']
        elif not self._password_works(user['id'], password):
            self._request('PATCH', '/users/%s' % user['id'], json={
                'user': {'password': password, 'enabled': True}})
            # The change revokes the user's tokens issued up to this
            # second (keystone compares whole seconds): none issued next
            # may fall in it.
            time.sleep(1.1)
        for role in roles:
            role_id = self.add_role(role)
            self._request('PUT', '/projects/%s/users/%s/roles/%s'
                          % (project_id, user['id'], role_id),
                          ok=(204,))
        return user['id']

    def _password_works(self, user_id: str, password: str) -> bool:
        response = requests.post(self.url + '/v3/auth/tokens', json={
            'auth': {'identity': {'methods': ['password'], 'password': {
                'user': {'id': user_id, 'password': password}}}}},
            timeout=30)
        return response.status_code == 201

    def add_service(self, service_type: str, name: str, url: str) -> None:
        """Service ``name`` of ``service_type`` with public, internal and
        admin endpoints at ``url`` in RegionOne (replacing any)."""
        service = self._find('services', type=service_type)
        if service is None:
            service = self._request('POST', '/services', ok=(201,), json={
                'service': {'type': service_type, 'name': name,
                            'enabled': True}})['service']
        existing = self._request('GET', '/endpoints', params={
            'service_id': service['id']})['endpoints']
        for endpoint in existing:
            self._request('DELETE', '/endpoints/%s' % endpoint['id'],
                          ok=(204,))
        for interface in ('public', 'internal', 'admin'):
            self._request('POST', '/endpoints', ok=(201,), json={
                'endpoint': {'service_id': service['id'],
                             'interface': interface, 'url': url,
                             'region_id': REGION, 'enabled': True}})
        # The admin session's next token brings the new catalog.
        self.admin_session().auth.invalidate()

    # Unified limits (Keystone's policy wants a system-scoped token) -------

    def _system_request(self, method: str, path: str, ok=(200,), **kwargs):
        with self._lock:
            if self._system_session is None:
                from keystoneauth1 import loading
                from keystoneauth1 import session
                auth = loading.get_plugin_loader('password').load_from_options(
                    auth_url=self.url, username='admin',
                    password=self.admin_password, system_scope='all',
                    user_domain_name=DOMAIN)
                self._system_session = session.Session(auth=auth)
        response = self._system_session.request(
            self.url + '/v3' + path, method, raise_exc=False, **kwargs)
        if response.status_code not in ok:
            raise servers.ServerError('Keystone %s %s: %s %s' % (
                method, path, response.status_code, response.text))
        return response.json() if response.content else None

    def add_registered_limit(self, service_id: str, name: str,
                             default: int) -> str:
        """A registered (default) limit of ``service_id`` in RegionOne;
        its id."""
        return self._system_request('POST', '/registered_limits', ok=(201,),
                                    json={'registered_limits': [{
                                        'service_id': service_id,
                                        'region_id': REGION,
                                        'resource_name': name,
                                        'default_limit': default}]},
                                    )['registered_limits'][0]['id']

    def add_project_limit(self, service_id: str, project_id: str,
                          name: str, value: int) -> str:
        """A limit of ``project_id`` overriding the registered one; its
        id."""
        return self._system_request('POST', '/limits', ok=(201,), json={
            'limits': [{'service_id': service_id, 'project_id': project_id,
                        'region_id': REGION, 'resource_name': name,
                        'resource_limit': value}]})['limits'][0]['id']

    def change_project_limit(self, limit_id: str, value: int) -> None:
        self._system_request('PATCH', '/limits/%s' % limit_id, json={
            'limit': {'resource_limit': value}})

    def oslo_limit_options(self, **endpoint: str) -> dict[str, str]:
        """An ``[oslo_limit]`` section reading limits as the bootstrap
        admin (system scope) for the endpoint ``endpoint`` names
        (``endpoint_id=...``, or ``endpoint_service_type=...``)."""
        return dict(endpoint, auth_type='password', auth_url=self.url,
                    username='admin', password=self.admin_password,
                    system_scope='all', user_domain_name=DOMAIN)

    # Client configuration ---------------------------------------------------

    def ksa_options(self, username: str, password: str,
                    project: str = SERVICE_PROJECT) -> dict[str, str]:
        """keystoneauth ``password`` plugin options, as a config
        section (e.g. ``[placement]`` or ``[nova]`` of a service)."""
        return {'auth_type': 'password', 'auth_url': self.url,
                'username': username, 'password': password,
                'project_name': project, 'user_domain_name': DOMAIN,
                'project_domain_name': DOMAIN, 'region_name': REGION}

    def authtoken_options(self, username: str, password: str,
                          project: str = SERVICE_PROJECT) -> dict[str, str]:
        """A ``[keystone_authtoken]`` section for keystonemiddleware:
        validates tokens as user ``username`` and requires the service
        role in service tokens, as devstack configures services."""
        options = self.ksa_options(username, password, project)
        options.update({
            'www_authenticate_uri': self.url,
            'interface': 'public',
            'service_token_roles': 'service',
            'service_token_roles_required': True,
        })
        return options
