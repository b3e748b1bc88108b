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

"""Fixtures for unit tests: a private config and a database of each kind.

Every test that uses ``database`` (directly or through another fixture)
runs once on each of SQLite, PostgreSQL and MariaDB, with ids
``[sqlite]``, ``[postgresql]`` and ``[mariadb]``.
``CYBORG_TEST_DATABASES=sqlite`` (a comma-separated subset) runs fewer.

* SQLite: a copy of a file migrated once per session.
* PostgreSQL and MariaDB: a private server each
  (:mod:`tests.functional.servers`), started once per session the first
  time a test needs it and always stopped, with one database migrated
  once. Before every test it is emptied: every row deleted and the id
  counters restarted, so it looks freshly migrated (a DELETE of a few
  rows costs far less than a migration, a TRUNCATE or a copy of a
  template database).

A test that only makes sense on one database pins itself, saying why::

    @pytest.mark.parametrize('database', ['sqlite'], indirect=True)
"""

import os
import shutil

from oslo_config import cfg
import pytest
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.common import rpc
from cyborg.conf import opts as conf_opts
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models

ALL_DATABASES = ('sqlite', 'postgresql', 'mariadb')
DATABASES = tuple(
    name.strip() for name in os.environ.get(
        'CYBORG_TEST_DATABASES', ','.join(ALL_DATABASES)).split(',')
    if name.strip())
assert set(DATABASES) <= set(ALL_DATABASES), (
    'CYBORG_TEST_DATABASES: one or more of %s' % ', '.join(ALL_DATABASES))

# Children before parents, for deleting with foreign keys checked.
_TABLES = [table.name for table in
           reversed(models.Base.metadata.sorted_tables)]


@pytest.fixture
def conf():
    """The global CONF, parsed with no files, reset after the test."""
    conf = cyborg_conf.CONF
    conf_opts.set_lib_defaults()
    rpc.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    yield conf
    conf.reset()
    conf.clear_override('connection', group='database')


# Database servers, started once --------------------------------------------

@pytest.fixture(scope='session')
def postgresql_server():
    from tests.functional import servers
    with servers.PostgreSQLServer() as server:
        yield server


@pytest.fixture(scope='session')
def mariadb_server():
    from tests.functional import servers
    with servers.MariaDBServer() as server:
        yield server


def new_database(kind: str, request, name: str) -> str:
    """The URL of a new, empty database ``name`` of ``kind``
    (postgresql or mariadb) on the session's server (gone with it)."""
    return request.getfixturevalue(kind + '_server').create_database(name)


class _ServerDatabase:
    """One migrated database on a server, emptied before each test."""

    def __init__(self, url: str):
        self.url = url
        self.engine = sa.create_engine(url, pool_size=1)
        migration.upgrade(engine=self.engine)
        self.kind = self.engine.dialect.name
        self.dirty = False

    def reset(self) -> None:
        """Delete every row; ids start at 1 again. Connections a previous
        test left open (a thread it did not stop) are closed first, so
        none can hold a lock or see the next test's rows."""
        if not self.dirty:
            self.dirty = True
            return
        with self.engine.begin() as connection:
            if self.kind == 'postgresql':
                self._reset_postgresql(connection)
            else:
                self._reset_mysql(connection)

    @staticmethod
    def _reset_postgresql(connection) -> None:
        connection.execute(sa.text(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
            'WHERE datname = current_database() '
            'AND pid <> pg_backend_pid()'))
        connection.execute(sa.text("SET LOCAL lock_timeout = '10s'"))
        for table in _TABLES:
            connection.execute(sa.text('DELETE FROM %s' % table))
        connection.execute(sa.text('SELECT %s' % ', '.join(
            "setval(pg_get_serial_sequence('%s', 'id'), 1, false)" % table
            for table in _TABLES)))

    @staticmethod
    def _reset_mysql(connection) -> None:
        for (thread,) in connection.execute(sa.text(
                'SELECT id FROM information_schema.processlist '
                'WHERE db = DATABASE() AND id <> CONNECTION_ID()')):
            try:
                connection.execute(sa.text('KILL %d' % thread))
            except sa.exc.OperationalError:
                pass  # ended meanwhile
        connection.execute(sa.text('SET SESSION lock_wait_timeout = 10'))
        # Row by row, a deployable's parent could go before it.
        connection.execute(sa.text('SET SESSION foreign_key_checks = 0'))
        counters = [name for (name,) in connection.execute(sa.text(
            'SELECT table_name FROM information_schema.tables '
            'WHERE table_schema = DATABASE() AND auto_increment > 1'))]
        for table in _TABLES:
            connection.execute(sa.text('DELETE FROM %s' % table))
        connection.execute(sa.text('SET SESSION foreign_key_checks = 1'))
        # Each ALTER commits on its own; the rows are gone already.
        for table in counters:
            connection.execute(sa.text(
                'ALTER TABLE %s AUTO_INCREMENT = 1' % table))


@pytest.fixture(scope='session')
def _postgresql_database(request):
    return _ServerDatabase(new_database('postgresql', request, 'cyborg_unit'))


@pytest.fixture(scope='session')
def _mariadb_database(request):
    return _ServerDatabase(new_database('mariadb', request, 'cyborg_unit'))


@pytest.fixture(scope='session')
def _sqlite_template(tmp_path_factory):
    path = tmp_path_factory.mktemp('sqlite_template') / 'template.sqlite'
    engine = sa.create_engine('sqlite:///%s' % path)
    migration.upgrade(engine=engine)
    engine.dispose()
    return path


def database_url(kind: str, request, tmp_path) -> str:
    """A freshly migrated, empty database of ``kind`` for this test."""
    if kind == 'sqlite':
        path = tmp_path / 'db.sqlite'
        shutil.copyfile(request.getfixturevalue('_sqlite_template'), path)
        return 'sqlite:///%s' % path
    database = request.getfixturevalue('_%s_database' % kind)
    database.reset()
    return database.url


@pytest.fixture(params=DATABASES)
def database(request, conf, tmp_path):
    """A migrated, empty database of each kind, the DB API configured for
    it; the engine (``database.dialect.name`` tells which kind)."""
    conf.set_override('connection',
                      database_url(request.param, request, tmp_path),
                      group='database')
    db_api.configure(conf)
    yield db_api.get_engine()
    db_api.get_engine().dispose()


@pytest.fixture
def admin_context():
    return cyborg_context.get_admin_context()


def make_context(roles=('member', 'reader'), project_id='p1', **kwargs):
    return cyborg_context.RequestContext(
        roles=list(roles), project_id=project_id, user_id='u1', **kwargs
    )


@pytest.fixture
def fresh_conf():
    """A ConfigOpts separate from the global one."""
    conf = cfg.ConfigOpts()
    for module in (
        cyborg_conf.default,
        cyborg_conf.api,
        cyborg_conf.conductor,
        cyborg_conf.agent,
        cyborg_conf.database,
    ):
        module.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    yield conf
    # The option groups (and so the overrides set through them) are
    # module-level objects shared with every other ConfigOpts that
    # registers them: undo what the test set.
    conf.reset()
