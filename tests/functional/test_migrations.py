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

"""Schema migrations on real databases.

* Migrating an empty database to head gives exactly the schema of
  ``cyborg.db.models`` (alembic autogenerate finds no difference, types
  and server defaults included) on SQLite, PostgreSQL and MariaDB.
* Date/time columns keep microseconds on every database (MariaDB's
  plain DATETIME would drop them; alembic alone does not see that).
* ``cyborg-dbsync upgrade`` / ``version`` as an operator runs them.
* Upgrading an up-to-date database changes nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.functional import servers

VERSION_TABLE = 'alembic_version'


@pytest.fixture(scope='module')
def mariadb():
    with servers.MariaDBServer() as server:
        yield server


def _unique(prefix: str) -> str:
    return '%s_%s' % (prefix, uuid.uuid4().hex[:8])


@pytest.fixture
def sqlite_url(tmp_path):
    return 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')


@pytest.fixture
def postgresql_url(postgres):
    name = _unique('migr')
    url = postgres.create_database(name)
    yield url
    postgres.drop_database(name)


@pytest.fixture
def mariadb_url(mariadb):
    name = _unique('migr')
    url = mariadb.create_database(name)
    yield url
    mariadb.drop_database(name)


@pytest.fixture(params=['sqlite', 'postgresql', 'mariadb'])
def db_url(request):
    """An empty database of each kind."""
    return request.getfixturevalue(request.param + '_url')


@pytest.fixture
def engine(db_url):
    engine = sa.create_engine(db_url)
    yield engine
    engine.dispose()


def _include_name(name, type_, _parent_names):
    return not (type_ == 'table' and name == VERSION_TABLE)


_BOOLEAN_LITERALS = {'false': '0', 'true': '1'}


def _default_text(default) -> str | None:
    """A server default as comparable text: no quotes, parentheses, case."""
    if default is None:
        return None
    text = str(getattr(default, 'arg', default))
    if hasattr(getattr(default, 'arg', None), 'compile'):
        text = str(default.arg.compile(
            compile_kwargs={'literal_binds': True}))
    text = text.strip().strip('()').strip("'\"").lower()
    return _BOOLEAN_LITERALS.get(text, text)


def _compare_server_default(_context, _inspected_column, _metadata_column,
                            inspected_default, metadata_default,
                            _rendered_metadata_default):
    """Equal boolean defaults are equal however the backend spells them.

    MySQL/MariaDB store ``sa.false()`` as ``'0'``, SQLite as ``'0'`` or
    ``false``; alembic would report those as changes. Anything else is
    left to alembic's own comparison (None).
    """
    if (inspected_default is not None and metadata_default is not None
            and _default_text(inspected_default)
            == _default_text(metadata_default)):
        return False
    return None


def _compare_type(context, _inspected_column, _metadata_column,
                  inspected_type, metadata_type):
    """Date/time types as the database spells them, precision included.

    Alembic ignores a precision that only one side states, so it would
    take MariaDB's DATETIME for the models' DATETIME(6). Other types are
    left to alembic (None).
    """
    if not isinstance(inspected_type, sa.DateTime):
        return None
    dialect = context.dialect
    return (inspected_type.compile(dialect=dialect)
            != metadata_type.compile(dialect=dialect))


def schema_diff(engine, metadata=models.Base.metadata) -> list:
    """What alembic autogenerate would change to make the DB ``metadata``.

    Column types (date/time precision too) and server defaults are
    compared too.
    """
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            'compare_type': _compare_type,
            'compare_server_default': _compare_server_default,
            'include_name': _include_name,
        })
        return compare_metadata(context, metadata)


def _snapshot(engine) -> dict:
    """Tables, columns, indexes, constraints and the revision, comparably."""
    inspector = sa.inspect(engine)
    snapshot = {}
    for table in sorted(inspector.get_table_names()):
        snapshot[table] = {
            'columns': [(c['name'], str(c['type']), c['nullable'],
                         c.get('default')) for c in
                        inspector.get_columns(table)],
            'indexes': sorted(str(sorted(i.items()))
                              for i in inspector.get_indexes(table)),
            'unique': sorted(str(sorted(u.items())) for u in
                             inspector.get_unique_constraints(table)),
            'fks': sorted(str(sorted(f.items())) for f in
                          inspector.get_foreign_keys(table)),
        }
    with engine.connect() as conn:
        snapshot[VERSION_TABLE + ' rows'] = conn.execute(
            sa.text('SELECT version_num FROM %s' % VERSION_TABLE)).all()
    return snapshot


def test_empty_database_has_no_revision(engine):
    assert migration.version(engine=engine) is None


def test_head_matches_models(engine):
    migration.upgrade(engine=engine)
    assert migration.version(engine=engine) == migration.head()
    tables = set(sa.inspect(engine).get_table_names())
    assert tables == set(models.Base.metadata.tables) | {VERSION_TABLE}
    diff = schema_diff(engine)
    assert diff == [], 'schema drift between migrations and models:\n%s' % (
        '\n'.join(repr(d) for d in diff))


def test_upgrade_twice_is_a_noop(engine):
    migration.upgrade(engine=engine)
    before = _snapshot(engine)
    migration.upgrade(engine=engine)
    assert _snapshot(engine) == before
    assert before[VERSION_TABLE + ' rows'] == [(migration.head(),)]


def test_drift_is_detected(engine):
    """The comparison is not vacuous: it sees types and server defaults."""
    migration.upgrade(engine=engine)
    altered = sa.MetaData()
    for table in models.Base.metadata.sorted_tables:
        table.to_metadata(altered)
    profiles = altered.tables['device_profiles']
    profiles.c.uuid.type = sa.String(64)
    devices = altered.tables['devices']
    devices.c.status.server_default = sa.schema.DefaultClause('disabled')
    sa.Table('extra_table', altered, sa.Column('id', sa.Integer,
                                               primary_key=True))
    kinds = {d[0] if isinstance(d, tuple) else d[0][0]
             for d in schema_diff(engine, altered)}
    assert {'add_table', 'modify_type', 'modify_default'} <= kinds


def test_datetime_precision_drift_is_detected(engine):
    """Before 0003, MariaDB's date/time columns are whole seconds: the
    comparison names each of them; SQLite and PostgreSQL had nothing to
    change."""
    migration.upgrade('0002_nova_event_repeat', engine=engine)
    changed = sorted((d[0][2], d[0][3]) for d in schema_diff(engine)
                     if isinstance(d, list) and d[0][0] == 'modify_type')
    # The columns of 0002 (later revisions add tables and columns with
    # precise date/times from the start).
    inspector = sa.inspect(engine)
    existing = {(table, column['name'])
                for table in inspector.get_table_names()
                for column in inspector.get_columns(table)}
    datetimes = sorted((table.name, column.name)
                       for table in models.Base.metadata.sorted_tables
                       for column in table.columns
                       if (table.name, column.name) in existing
                       and isinstance(column.type, sa.DateTime))
    assert len(datetimes) == 26
    if engine.dialect.name == 'mysql':
        assert changed == datetimes
    else:
        assert changed == []
    migration.upgrade(engine=engine)
    assert schema_diff(engine) == []


PRECISE = datetime.datetime(2026, 11, 25, 3, 40, 1, 123456)


def test_datetimes_keep_microseconds(engine):
    """A fraction of a second written to a date/time column reads back
    unchanged, on a column of the 0001 schema, of 0002 and a NOT NULL one,
    and compares as later than the whole second (leases and backoff)."""
    migration.upgrade(engine=engine)
    events = models.NovaEvent.__table__
    services = models.Service.__table__
    later = PRECISE + datetime.timedelta(microseconds=1)
    with engine.begin() as conn:
        conn.execute(sa.insert(events).values(
            arq_uuid='a', instance_uuid='i', status='completed',
            next_attempt_at=PRECISE, claimed_until=later,
            repeat_until=PRECISE, created_at=PRECISE))
        conn.execute(sa.insert(services).values(
            host='h', binary='cyborg-agent', last_seen_up=PRECISE,
            created_at=PRECISE))
    with engine.connect() as conn:
        assert conn.execute(sa.select(
            events.c.next_attempt_at, events.c.claimed_until,
            events.c.repeat_until, events.c.created_at)).one() == (
            PRECISE, later, PRECISE, PRECISE)
        assert conn.execute(sa.select(
            services.c.last_seen_up, services.c.created_at)).one() == (
            PRECISE, PRECISE)
        assert conn.execute(sa.select(sa.func.count()).where(
            events.c.claimed_until > PRECISE)).scalar() == 1
        assert conn.execute(sa.select(sa.func.count()).where(
            events.c.next_attempt_at
            > PRECISE.replace(microsecond=0))).scalar() == 1


def _insert_deployable(conn, device_id: int, cpid_id: int, name: str,
                       attach_type: str) -> int:
    """A deployable of the 0003 schema (no preparation) with one
    attach handle; its id."""
    deployables = sa.table('deployables', sa.column('id', sa.Integer),
                           sa.column('uuid'), sa.column('name'),
                           sa.column('num_accelerators'),
                           sa.column('device_id'))
    handles = sa.table('attach_handles', sa.column('uuid'),
                       sa.column('deployable_id'), sa.column('cpid_id'),
                       sa.column('in_use'),
                       sa.column('attach_type'), sa.column('attach_info'))
    conn.execute(sa.insert(deployables).values(
        uuid=str(uuid.uuid4()), name=name, num_accelerators=1,
        device_id=device_id))
    deployable_id = conn.execute(sa.select(deployables.c.id).where(
        deployables.c.name == name)).scalar()
    conn.execute(sa.insert(handles).values(
        uuid=str(uuid.uuid4()), deployable_id=deployable_id,
        cpid_id=cpid_id, in_use=False,
        attach_type=attach_type, attach_info='{}'))
    return deployable_id


def test_preparation_of_existing_deployables(engine):
    """0004 gives deployables with MDEV handles the ``mdev``
    preparation the conductor derived before, the others ``none``."""
    migration.upgrade('0003_datetime_precision', engine=engine)
    devices = sa.table('devices', sa.column('id', sa.Integer),
                       sa.column('uuid'), sa.column('type'),
                       sa.column('vendor'), sa.column('model'),
                       sa.column('hostname'), sa.column('address'))
    with engine.begin() as conn:
        conn.execute(sa.insert(devices).values(
            uuid=str(uuid.uuid4()), type='GPU', vendor='10de', model='m',
            hostname='h', address='0000:01:00.0'))
        device_id = conn.execute(sa.select(devices.c.id)).scalar()
        cpids = sa.table('controlpath_ids', sa.column('id', sa.Integer),
                         sa.column('uuid'), sa.column('device_id'),
                         sa.column('cpid_type'), sa.column('cpid_info'))
        conn.execute(sa.insert(cpids).values(
            uuid=str(uuid.uuid4()), device_id=device_id, cpid_type='PCI',
            cpid_info='{}'))
        cpid_id = conn.execute(sa.select(cpids.c.id)).scalar()
        mdev = _insert_deployable(conn, device_id, cpid_id, 'vgpu', 'MDEV')
        pci = _insert_deployable(conn, device_id, cpid_id, 'pgpu', 'PCI')
    migration.upgrade(engine=engine)
    deployables = models.Deployable.__table__
    with engine.connect() as conn:
        assert dict(conn.execute(sa.select(
            deployables.c.id, deployables.c.preparation)).all()) == {
            mdev: 'mdev', pci: 'none'}
    assert schema_diff(engine) == []


def test_existing_arqs_get_their_profiles_groups(engine):
    """0012 gives each existing ARQ its profile's group (by index), so
    that a later update of the profile leaves it what it was made of."""
    migration.upgrade('0011_quota_locks', engine=engine)
    profiles = sa.table('device_profiles', sa.column('id', sa.Integer),
                        sa.column('uuid'), sa.column('name'),
                        sa.column('profile_json'))
    arqs = sa.table('extended_accelerator_requests',
                    sa.column('id', sa.Integer), sa.column('uuid'),
                    sa.column('state'), sa.column('project_id'),
                    sa.column('device_profile_id'),
                    sa.column('device_profile_group_id'))
    groups = [{'resources:FPGA': '1'}, {'resources:PGPU': '2',
                                        'trait:CUSTOM_X': 'required'}]
    with engine.begin() as conn:
        conn.execute(sa.insert(profiles).values(
            uuid=str(uuid.uuid4()), name='two',
            profile_json=json.dumps({'groups': groups})))
        conn.execute(sa.insert(profiles).values(
            uuid=str(uuid.uuid4()), name='unused',
            profile_json=json.dumps({'groups': groups})))
        profile_id = conn.execute(sa.select(profiles.c.id).where(
            profiles.c.name == 'two')).scalar()
        for index in (0, 1, 1):
            conn.execute(sa.insert(arqs).values(
                uuid=str(uuid.uuid4()), state='Initial', project_id='p',
                device_profile_id=profile_id,
                device_profile_group_id=index))
    migration.upgrade(engine=engine)
    table = models.ExtendedAcceleratorRequest.__table__
    with engine.connect() as conn:
        found = conn.execute(sa.select(
            table.c.device_profile_group_id, table.c.group_json)
            .order_by(table.c.id)).all()
    assert [(index, json.loads(text)) for index, text in found] == [
        (0, groups[0]), (1, groups[1]), (1, groups[1])]
    assert schema_diff(engine) == []


# cyborg-dbsync as a command --------------------------------------------

@pytest.fixture(params=['sqlite', 'postgresql'])
def config_file(request, tmp_path):
    url = request.getfixturevalue(request.param + '_url')
    return servers.write_config(str(tmp_path / 'cyborg.conf'), {
        'DEFAULT': {'state_path': str(tmp_path)},
        'database': {'connection': url},
    })


def _run(config_file, *args):
    result = servers.run_script('cyborg-dbsync', *args,
                                config_file=config_file)
    # oslo.log writes the service log (errors included) to stdout.
    return (result.returncode, result.stdout.strip(),
            result.stdout + result.stderr)


def test_dbsync_commands(config_file, tmp_path):
    head = migration.head()
    # An empty database (SQLite: an empty file; a file that does not
    # exist is refused, see test_dbsync_version_names_a_missing_file).
    (tmp_path / 'cyborg.sqlite').touch()

    code, out, err = _run(config_file, 'version')
    assert (code, out) == (0, 'None (empty database)'), err

    code, out, err = _run(config_file, 'upgrade')
    assert (code, out) == (0, 'Database is at revision %s' % head), err

    code, out, err = _run(config_file, 'version')
    assert (code, out) == (0, head), err

    # Upgrading an up-to-date database succeeds and changes nothing.
    code, out, err = _run(config_file, 'upgrade')
    assert (code, out) == (0, 'Database is at revision %s' % head), err


def test_dbsync_version_names_a_missing_file(tmp_path):
    config = servers.write_config(str(tmp_path / 'c.conf'), {
        'database': {'connection': 'sqlite:///%s' % (tmp_path / 'x.db')}})
    code, out, output = _run(config, 'version')
    assert (code, out) == (2, '')
    assert 'cannot open the database %s: no such file' % (
        tmp_path / 'x.db') in output
    assert not os.path.exists(tmp_path / 'x.db')


def test_dbsync_upgraded_schema_matches_models(config_file):
    code, _out, err = _run(config_file, 'upgrade')
    assert code == 0, err
    import configparser
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config_file)
    engine = sa.create_engine(parser.get('database', 'connection'))
    try:
        assert schema_diff(engine) == []
    finally:
        engine.dispose()


def test_dbsync_without_a_command_fails(tmp_path):
    config = servers.write_config(str(tmp_path / 'c.conf'), {
        'database': {'connection': 'sqlite:///%s' % (tmp_path / 'x.db')}})
    code, _out, output = _run(config)
    assert code != 0
    assert 'usage' in output.lower()
    assert not os.path.exists(tmp_path / 'x.db')


def test_dbsync_bad_database_fails_cleanly(tmp_path, postgres):
    """A database that does not exist: non-zero exit naming the cause."""
    name = _unique('missing')
    config = servers.write_config(
        str(tmp_path / 'c.conf'),
        {'database': {'connection': postgres.url_for(name)}})
    code, _out, output = _run(config, 'upgrade')
    assert code != 0
    assert 'database "%s" does not exist' % name in output
