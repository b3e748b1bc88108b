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

"""What a database server did during a benchmark run, from its own
counters: commits, flushes to disk, statements, lock waits.

Counts do not depend on how busy the machine is (timings do), so they
compare two servers, or two builds, on a shared machine::

    before = db_counters.snapshot(server, 'cyborg')
    ... run N cycles ...
    db_counters.settle(server)
    spent = db_counters.per_cycle(before, db_counters.snapshot(
        server, 'cyborg'), N)
    print(db_counters.describe(spent))
"""

import time

# MariaDB's SHOW GLOBAL STATUS counters read (the whole server's: a
# benchmark's server serves one deployment at a time).
MARIADB_STATUS = (
    'Questions',              # statements sent by clients
    'Com_admin_commands',     # pings and other non-statement commands
    'Com_commit',             # COMMIT statements
    'Com_rollback',           # ROLLBACK statements
    'Handler_commit',         # storage engine commits (read-only too)
    # Flushes of the redo log (MariaDB before 10.8; later ones count
    # them with the data files' in Innodb_data_fsyncs).
    'Innodb_os_log_fsyncs',
    'Innodb_data_fsyncs',     # flushes of data files (and redo log)
    'Innodb_log_writes',      # writes of the redo log
    'Innodb_os_log_written',  # bytes written to the redo log
    'Innodb_row_lock_waits',  # row locks waited for
    'Innodb_row_lock_time',   # ms spent waiting for them
    'Innodb_deadlocks',       # transactions rolled back by a deadlock
)

# PostgreSQL: the database's transactions (pg_stat_database) and the
# server's WAL (pg_stat_wal, PostgreSQL 14 and later).
_PG_DATABASE = ('SELECT xact_commit, xact_rollback, deadlocks FROM '
                'pg_stat_database WHERE datname = %s')
_PG_WAL = ('SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync '
           'FROM pg_stat_wal')

# A PostgreSQL backend publishes its counts at most once a second, and
# an idle one up to ten seconds after its last transaction: a snapshot
# taken sooner misses the end of a run.
PG_STATS_DELAY = 11.0


def kind(server) -> str | None:
    """'mysql' for a MariaDB server fixture, 'postgresql' for a
    PostgreSQL one (by the URL it hands out), else None."""
    url = getattr(server, 'url', '') or ''
    if url.startswith('mysql'):
        return 'mysql'
    if url.startswith('postgresql'):
        return 'postgresql'
    return None


def snapshot(server, database: str) -> dict[str, int] | None:
    """The server's counters now (``database``'s, where the server
    counts per database); None for a server without counters here."""
    which = kind(server)
    if which == 'mysql':
        return _mariadb(server)
    if which == 'postgresql':
        return _postgresql(server, database)
    return None


def settle(server) -> None:
    """Wait until what was done so far shows in the counters."""
    if kind(server) == 'postgresql':
        time.sleep(PG_STATS_DELAY)


def _mariadb(server) -> dict[str, int]:
    connection = server._connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute('SHOW GLOBAL STATUS WHERE Variable_name IN (%s)'
                           % ', '.join(['%s'] * len(MARIADB_STATUS)),
                           MARIADB_STATUS)
            return {name: int(value) for name, value in cursor.fetchall()}
    finally:
        connection.close()


def _postgresql(server, database: str) -> dict[str, int]:
    connection = server._connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(_PG_DATABASE, (database,))
            row = cursor.fetchone() or (0, 0, 0)
            counts = dict(zip(('xact_commit', 'xact_rollback', 'deadlocks'),
                              row, strict=True))
            cursor.execute(_PG_WAL)
            counts.update(zip(('wal_records', 'wal_fpi', 'wal_bytes',
                               'wal_write', 'wal_sync'), cursor.fetchone(),
                              strict=True))
        return {name: int(value) for name, value in counts.items()}
    finally:
        connection.close()


def per_cycle(before: dict[str, int] | None, after: dict[str, int] | None,
              cycles: int) -> dict[str, float]:
    """Each counter's increase from ``before`` to ``after`` per cycle
    (empty without counters)."""
    if not before or not after:
        return {}
    return {name: (after[name] - before[name]) / max(cycles, 1)
            for name in before}


def describe(counts: dict[str, float]) -> str:
    """One line of what a cycle cost the server ('' without counts)."""
    if 'Questions' in counts:
        nan = float('nan')
        return ('%.1f statements (%.1f COMMIT, %.1f ROLLBACK), %.1f pings '
                'and other admin commands, %.1f engine commits, %.2f redo '
                'log writes (%.0f bytes), %.2f fsyncs (%.2f of the redo '
                'log), %.2f row lock waits (%.1f ms), %.3f deadlocks'
                % (counts['Questions'], counts['Com_commit'],
                   counts['Com_rollback'], counts['Com_admin_commands'],
                   counts['Handler_commit'],
                   counts.get('Innodb_log_writes', nan),
                   counts.get('Innodb_os_log_written', nan),
                   counts['Innodb_data_fsyncs'],
                   counts.get('Innodb_os_log_fsyncs', nan),
                   counts['Innodb_row_lock_waits'],
                   counts['Innodb_row_lock_time'],
                   counts.get('Innodb_deadlocks', nan)))
    if 'xact_commit' in counts:
        return ('%.1f transactions committed, %.1f rolled back, %.2f '
                'deadlocks, %.1f WAL records (%.0f bytes, %.2f full '
                'pages), %.2f WAL writes, %.2f WAL fsyncs' % (
                    counts['xact_commit'], counts['xact_rollback'],
                    counts['deadlocks'], counts['wal_records'],
                    counts['wal_bytes'], counts['wal_fpi'],
                    counts['wal_write'], counts['wal_sync']))
    return ''


def fsyncs(counts: dict[str, float]) -> float:
    """Flushes to disk per cycle (MariaDB: all of them, the redo log's
    among them; PostgreSQL: the WAL's); nan without counts."""
    for name in ('Innodb_data_fsyncs', 'wal_sync'):
        if name in counts:
            return counts[name]
    return float('nan')


def commits(counts: dict[str, float]) -> float:
    """Transactions committed per cycle, as the server counts them
    (MariaDB: storage engine commits, read-only ones too; PostgreSQL:
    committed transactions, read-only ones too); nan without counts."""
    for name in ('Handler_commit', 'xact_commit'):
        if name in counts:
            return counts[name]
    return float('nan')
