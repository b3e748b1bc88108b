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

"""Upstream OpenStack Cyborg databases, made by upstream's own
migrations (``cyborg-dbsync upgrade`` of ``.venv-upstream``, see
``tools/bench/upstream-venv.sh``), for the import's tests and benchmark.

:func:`migrate` runs upstream's migrations on a new database once;
:func:`clone` copies it (schema and rows) to another database of the same
server, much faster than migrating again; :func:`insert` fills one;
:func:`dump` reads every row back, to show that the import left it as
it was.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any

import sqlalchemy as sa

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
VENV = os.path.join(ROOT, '.venv-upstream')
#: Upstream's tables, parents before children.
TABLES = ('device_profiles', 'devices', 'controlpath_ids', 'deployables',
          'attributes', 'attach_handles', 'extended_accelerator_requests',
          'quota_usages', 'reservations')


class UpstreamMissing(RuntimeError):
    pass


def dbsync() -> str:
    """Upstream's ``cyborg-dbsync``; :class:`UpstreamMissing` saying how
    to make it when the virtualenv is not there."""
    path = os.path.join(VENV, 'bin', 'cyborg-dbsync')
    if not os.access(path, os.X_OK):
        raise UpstreamMissing(
            '%s is missing: the upstream import tests need upstream '
            'OpenStack Cyborg in .venv-upstream; run '
            'tools/bench/upstream-venv.sh (tools/setup-venv.sh --test '
            'does)' % path)
    return path


# Upstream's migration 6c77bd6afea5 (devices.status) cannot run on
# PostgreSQL: its Enum has no name ("PostgreSQL Enum type requires a
# name"). On PostgreSQL the column is added as an upstream operator must
# do it, by hand, and the migration stamped done.
_BEFORE_STATUS = '4cc1d79978fc'
_STATUS = '6c77bd6afea5'
_PG_STATUS = (
    "CREATE TYPE device_status AS ENUM ('enabled', 'maintaining')",
    "ALTER TABLE devices ADD COLUMN status device_status NOT NULL "
    "DEFAULT 'enabled'",
    'ALTER TABLE devices ALTER COLUMN status DROP DEFAULT')
# Upstream widens its enums with alter_column(existing_type=...), which
# changes nothing on PostgreSQL: as migrated there, an ARQ cannot even
# enter BindStarted. A working upstream deployment on PostgreSQL has
# added the values by hand, as these statements do.
_PG_ENUM_VALUES = {
    'state': ('BindStarted', 'Unbound', 'Deleting'),
    'attach_type': ('TEST_PCI',),
    'device_type': ('AICHIP', 'QAT', 'NIC', 'SSD', 'MDEV', 'PCI', 'NVME'),
}


def _run_dbsync(config: str, work: str, *command: str) -> None:
    done = subprocess.run([dbsync(), '--config-file', config] + list(command),
                          capture_output=True, text=True, timeout=300,
                          cwd=work)
    if done.returncode:
        raise RuntimeError('upstream cyborg-dbsync %s failed (%d):\n%s'
                           % (' '.join(command), done.returncode,
                              (done.stdout + done.stderr)[-6000:]))


def migrate(url: str, revision: str | None = None) -> None:
    """Upstream's schema on the empty database at ``url``, by upstream's
    ``cyborg-dbsync upgrade`` to ``revision`` (default: head; on
    PostgreSQL with one step by hand, see :data:`_PG_STATUS`, so not
    before that step's revision)."""
    with tempfile.TemporaryDirectory(prefix='cyborg-upstream-') as work:
        config = os.path.join(work, 'cyborg.conf')
        with open(config, 'w') as f:
            f.write('[database]\nconnection = %s\n' % url)
        if sa.engine.make_url(url).get_backend_name() == 'postgresql':
            _run_dbsync(config, work, 'upgrade', '--revision',
                        _BEFORE_STATUS)
            engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
            with engine.begin() as connection:
                for statement in _PG_STATUS:
                    connection.execute(sa.text(statement))
            engine.dispose()
            _run_dbsync(config, work, 'stamp', '--revision', _STATUS)
        _run_dbsync(config, work, 'upgrade', *(
            ('--revision', revision) if revision else ()))
    if sa.engine.make_url(url).get_backend_name() == 'postgresql':
        _widen_pg_enums(url)


def _widen_pg_enums(url: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool,
                              isolation_level='AUTOCOMMIT')
    with engine.connect() as connection:
        for enum, values in _PG_ENUM_VALUES.items():
            for value in values:
                connection.execute(sa.text(
                    "ALTER TYPE %s ADD VALUE IF NOT EXISTS '%s'"
                    % (enum, value)))
    engine.dispose()


def clone(server, source: str, name: str) -> str:
    """A copy (schema, rows) of database ``source`` of ``server`` (a
    :mod:`tests.functional.servers` PostgreSQL or MariaDB) as ``name``;
    its URL. Nobody may be connected to ``source`` (PostgreSQL)."""
    url = server.url_for(name)
    if sa.engine.make_url(url).get_backend_name() == 'postgresql':
        server.execute('CREATE DATABASE "%s" TEMPLATE "%s"' % (name, source))
        return url
    server.create_database(name)
    engine = sa.create_engine(server.url_for(source),
                              poolclass=sa.pool.NullPool)
    with engine.begin() as connection:
        for table in sa.inspect(connection).get_table_names():
            connection.execute(sa.text('CREATE TABLE `%s`.`%s` LIKE `%s`'
                                       % (name, table, table)))
            connection.execute(sa.text(
                'INSERT INTO `%s`.`%s` SELECT * FROM `%s`'
                % (name, table, table)))
    return url


def tables(connection) -> dict[str, sa.Table]:
    metadata = sa.MetaData()
    metadata.reflect(bind=connection)
    return dict(metadata.tables)


def insert(url: str, rows: dict[str, list[dict[str, Any]]],
           chunk: int = 5000) -> None:
    """``rows`` (per upstream table) inserted, parents first."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as connection:
            reflected = tables(connection)
            for name in TABLES:
                values = rows.get(name) or []
                for start in range(0, len(values), chunk):
                    connection.execute(reflected[name].insert(),
                                       values[start:start + chunk])
            if engine.dialect.name == 'postgresql':
                # Explicit ids leave the sequences behind.
                for name in TABLES:
                    if rows.get(name):
                        connection.execute(sa.text(
                            "SELECT setval(pg_get_serial_sequence('%s', "
                            "'id'), (SELECT max(id) FROM %s))"
                            % (name, name)))
    finally:
        engine.dispose()


def dump(url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the database at ``url``, by table,
    sorted."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return {name: sorted(tuple(map(repr, row)) for row in
                                 connection.execute(sa.select(table)))
                    for name, table in tables(connection).items()}
    finally:
        engine.dispose()
