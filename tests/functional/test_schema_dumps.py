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

"""The harness's schema dumps (servers.PostgreSQLServer.load_schema): a
schema is built once per test run and every database gets what it
built, rows included; Placement and Keystone on PostgreSQL start on a
restored schema, without running their own ``db sync``."""

import os
import uuid

import sqlalchemy as sa

from tests.functional import servers
from tests.functional.placement import PlacementServer


def _builder(calls: list[str]):
    def build(url: str) -> None:
        calls.append(url)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.execute(sa.text(
                'CREATE TABLE versions (version VARCHAR(32) PRIMARY KEY)'))
            conn.execute(sa.text(
                'CREATE TABLE things (id SERIAL PRIMARY KEY, name TEXT '
                'NOT NULL UNIQUE)'))
            conn.execute(sa.text("INSERT INTO versions VALUES ('v7')"))
        engine.dispose()
    return build


def _contents(server, name: str):
    engine = sa.create_engine(server.url_for(name),
                              poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            # The restored sequence and unique index work as built.
            conn.execute(sa.text("INSERT INTO things (name) VALUES ('a')"))
            return (sorted(sa.inspect(conn).get_table_names()),
                    conn.execute(sa.text(
                        'SELECT version FROM versions')).all(),
                    conn.execute(sa.text('SELECT id FROM things')).all())
    finally:
        engine.dispose()


def test_a_schema_is_built_once_and_restored_into_each_database(postgres):
    assert postgres.dump_dir is not None
    schema = 'harness_%s' % uuid.uuid4().hex[:8]
    calls: list[str] = []
    names = ['dump_target_%s_%d' % (schema, i) for i in range(2)]
    try:
        for name in names:
            postgres.create_database(name)
            postgres.load_schema(name, schema, _builder(calls))
        # Built once, in a database of its own, dropped after its dump.
        assert len(calls) == 1 and servers.database_name(calls[0]) not in names
        for name in names:
            assert _contents(postgres, name) == (
                ['things', 'versions'], [('v7',)], [(1,)])
    finally:
        for name in names:
            postgres.drop_database(name)


def test_without_a_dump_directory_each_database_is_built(postgres):
    server = servers.PostgreSQLServer.__new__(servers.PostgreSQLServer)
    server.__dict__.update(postgres.__dict__, dump_dir=None)
    calls: list[str] = []
    name = 'built_%s' % uuid.uuid4().hex[:8]
    try:
        server.create_database(name)
        server.load_schema(name, 'unused', _builder(calls))
        assert [servers.database_name(url) for url in calls] == [name]
        assert _contents(server, name)[0] == ['things', 'versions']
    finally:
        server.drop_database(name)


def test_placement_on_postgresql_starts_on_the_restored_schema(
        postgres, tmp_path):
    name = 'placement_restored_%s' % uuid.uuid4().hex[:8]
    server = PlacementServer(str(tmp_path), postgres.create_database(name),
                             db_server=postgres)
    synced: list[str] = []
    db_sync = server._db_sync
    server._db_sync = lambda conf: (synced.append(conf), db_sync(conf))
    try:
        with server:
            # Written to the restored tables (and their sequences).
            client = server.client()
            provider = str(uuid.uuid4())
            client.create_provider(provider, 'restored-%s' % provider)
            assert client.get_provider(provider)['uuid'] == provider
        # A db sync ran at most to build the run's dump, never on the
        # server's own database.
        assert server.config_file not in synced and len(synced) <= 1
        assert os.path.exists(os.path.join(postgres.dump_dir,
                                           'schema-placement.sql'))
    finally:
        postgres.drop_database(name)


def test_keystone_on_postgresql_starts_on_the_restored_schema(
        keystone, postgres):
    assert keystone.db_server is postgres
    # Its own db_sync would have left this log (see _in_parallel).
    assert not os.path.exists(os.path.join(keystone.base_dir,
                                           'manage-db_sync.log'))
    assert os.path.exists(os.path.join(postgres.dump_dir,
                                       'schema-keystone.sql'))
    assert keystone.add_project('restored-schema') == keystone.add_project(
        'restored-schema')
