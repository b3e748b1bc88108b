"""Schema migrations on real databases.

* Migrating an empty database to head gives exactly the schema of
  ``cyborg.db.models`` (alembic autogenerate finds no difference, types
  and server defaults included) on SQLite, PostgreSQL and MariaDB.
* ``cyborg-dbsync upgrade`` / ``version`` as an operator runs them.
* Upgrading an up-to-date database changes nothing.
"""

from __future__ import annotations

import os
import uuid

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

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


def schema_diff(engine, metadata=models.Base.metadata) -> list:
    """What alembic autogenerate would change to make the DB ``metadata``.

    Column types and server defaults are compared too.
    """
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            'compare_type': True,
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


def test_dbsync_commands(config_file):
    head = migration.head()

    code, out, err = _run(config_file, 'version')
    assert (code, out) == (0, 'None (empty database)'), err

    code, out, err = _run(config_file, 'upgrade')
    assert (code, out) == (0, 'Database is at revision %s' % head), err

    code, out, err = _run(config_file, 'version')
    assert (code, out) == (0, head), err

    # Upgrading an up-to-date database succeeds and changes nothing.
    code, out, err = _run(config_file, 'upgrade')
    assert (code, out) == (0, 'Database is at revision %s' % head), err


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
