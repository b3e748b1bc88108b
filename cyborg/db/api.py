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

"""Database access: the transaction context, its decorators and the
engine's configuration.

The queries live in one module per table group (:mod:`cyborg.db.arqs`,
:mod:`cyborg.db.binding`, :mod:`cyborg.db.nova_events`,
:mod:`cyborg.db.hardware`, :mod:`cyborg.db.inventory`,
:mod:`cyborg.db.providers`, :mod:`cyborg.db.services`,
:mod:`cyborg.db.device_profiles`...). Every
public function there takes a RequestContext and runs in one enginefacade
transaction (or joins the caller's). Reads return plain dicts or rows so
callers never hold ORM state across a transaction boundary.
"""

from collections.abc import Iterator
import contextlib
import functools
import threading
import time

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_log import log as logging
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import patches

LOG = logging.getLogger(__name__)

# Every query here runs in the transaction of a RequestContext: its
# transaction attributes come with the database layer, not with the
# context module (see RequestContext).
enginefacade.transaction_context_provider(cyborg_context.RequestContext)
# Bind jobs share their context between worker threads.
patches.share_transaction_scopes(cyborg_context.RequestContext)

main_context_manager = enginefacade.transaction_context()


class _SQLiteWriteLock:
    """Serialises write transactions of this process on SQLite.

    SQLite cannot upgrade two concurrent deferred transactions from
    reading to writing (the second fails at once with "database is
    locked"), and oslo.db begins them deferred. The all-in-one and unit
    tests run several writers in threads, so on SQLite writes take turns;
    other databases need no lock.
    """

    def __init__(self):
        self.enabled = False
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def held(self):
        """Hold the lock (on SQLite) for the ``with`` body."""
        # Decided once per entry: were ``enabled`` read again on the way
        # out (the database is configured anew, as tests do), a writer
        # could leave holding the lock for good.
        if not self.enabled:
            yield
            return
        with self._lock:
            yield


_sqlite_write_lock = _SQLiteWriteLock()


def _serialised_on_sqlite(transactional, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # Taken outside the transaction (before BEGIN): a writer waits
        # here rather than failing inside SQLite.
        with _sqlite_write_lock.held():
            return transactional(*args, **kwargs)
    return wrapper


# Retrying whole transactions. A transaction that lost a lock race
# (deadlock, lock wait timeout, serialization failure) is rolled back by
# the database and can only succeed if it starts again from its first
# statement, so the retry wraps the outermost transaction: a write
# function called inside another's transaction joins it and is not
# retried on its own (the outer one is).

#: Tries after the first before a transient error reaches the caller.
MAX_RETRIES = 5
#: First pause between tries (seconds); doubled, with jitter, each time.
RETRY_INTERVAL = 0.05
#: Longest pause between tries (seconds).
MAX_RETRY_INTERVAL = 1.0

# SQLSTATEs of PostgreSQL errors that roll a transaction back because of
# concurrency: serialization_failure, deadlock_detected,
# lock_not_available (lock_timeout).
_PG_TRANSIENT = ('40001', '40P01', '55P03')
# MySQL/MariaDB: lock wait timeout, deadlock (on Galera also a
# transaction that failed certification against a concurrent one
# committed through another node, or was aborted by one), and Galera's
# "WSREP has not yet prepared node for application use" (the node is
# joining or lost its quorum for a moment; see Galera below).
_MYSQL_TRANSIENT = (1205, 1213, 1047)
_TRANSIENT_TEXT = ('could not serialize access', 'Lock wait timeout exceeded',
                   'Deadlock found', 'deadlock detected',
                   'WSREP has not yet prepared node')


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` rolled its transaction back only because of a
    concurrent one, so that running the transaction again can succeed:
    a deadlock (oslo.db's DBDeadlock: MySQL 1213 and 1205, PostgreSQL
    40P01), a lock wait timeout, a PostgreSQL serialization failure
    (SQLAlchemy's OperationalError: oslo.db passes those through)."""
    if isinstance(error, db_exc.DBDeadlock):
        return True
    if isinstance(error, sa.exc.DBAPIError):
        # oslo.db raises an OperationalError it does not translate (a
        # PostgreSQL lock timeout or serialization failure) as it is.
        original = error.orig
    elif isinstance(error, db_exc.DBError):
        original = getattr(error, 'inner_exception', None)
        original = getattr(original, 'orig', None) or original
    else:
        return False
    code = (getattr(original, 'pgcode', None)
            or getattr(getattr(original, 'diag', None), 'sqlstate', None))
    if code in _PG_TRANSIENT:
        return True
    args = getattr(original, 'args', None) or ()
    if args and args[0] in _MYSQL_TRANSIENT:
        return True
    text = str(error)
    return any(fragment in text for fragment in _TRANSIENT_TEXT)


# Galera ---------------------------------------------------------------------
#
# On a Galera cluster with several writers, a row lock (SELECT ... FOR
# UPDATE, SKIP LOCKED) holds on the node that takes it only: a
# transaction through another node neither waits for it nor skips the
# row. Conflicts between nodes are found at COMMIT instead, by
# certification, and only between transactions that write the same rows
# (a failed certification is a deadlock, 1213, which the writers retry
# like any other). So every lock that serialises writers must also write
# the row it locks: :func:`lock_rows` does, on Galera only.

#: Key of a pooled connection's ``info``: whether its server is a node of
#: a Galera cluster (``wsrep_on``).
_GALERA_INFO = 'cyborg_galera'
#: ``wsrep_sync_wait``'s bit for SELECT (and SHOW, BEGIN) statements.
_SYNC_WAIT_READS = 1


def _note_galera(dbapi_connection, connection_record) -> None:
    """Record in a new MySQL/MariaDB connection's ``info`` whether its
    server replicates with Galera (one statement per connection, before
    the pool first hands it out)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cursor.fetchone()
        galera = bool(row and str(row[1]).upper() == 'ON')
        if galera:
            # Causal reads: a read waits until this node has applied
            # what the cluster committed before it began, so a request
            # sees a write that another service committed through another
            # node before it (an ARQ Nova just created or bound).
            cursor.execute('SET SESSION wsrep_sync_wait = '
                           '@@wsrep_sync_wait | %d' % _SYNC_WAIT_READS)
            # The connection is at READ COMMITTED already (see
            # set_mysql_isolation): no gap locks, which on Galera would
            # make every replicated write into the gap abort the local
            # transaction (a brute force abort, retried).
    finally:
        cursor.close()
    connection_record.info[_GALERA_INFO] = galera


def _note_galera_once(dbapi_connection, connection_record,
                      _proxy) -> None:
    if _GALERA_INFO not in connection_record.info:
        _note_galera(dbapi_connection, connection_record)


def watch_galera(engine: sa.engine.Engine) -> None:
    """Make ``engine`` note, per connection, whether its MySQL/MariaDB
    server is a Galera node (see :func:`is_galera`)."""
    if engine.dialect.name in ('mysql', 'mariadb'):
        # At check-out, not at connect: oslo.db's engine has made (and
        # pooled) its first connection before this hook runs.
        sa.event.listen(engine, 'checkout', _note_galera_once)


def is_galera(connection: sa.engine.Connection) -> bool:
    """Whether ``connection``'s server is a node of a Galera cluster."""
    return bool(connection.info.get(_GALERA_INFO))


def lock_rows(connection: sa.engine.Connection, table: sa.Table,
              *where) -> None:
    """Make the row lock a transaction takes on the rows of ``table``
    matching ``where`` hold across a Galera cluster: on Galera, the rows
    are written (their ``updated_at`` set), so that a concurrent
    transaction through another node that locks them too fails
    certification and starts again; elsewhere nothing (the caller's
    ``FOR UPDATE`` is enough). Call it before the locking read; its
    UPDATE takes the same local lock."""
    if not is_galera(connection):
        return
    # A new microsecond timestamp: an UPDATE that changes nothing is not
    # replicated, and so not certified.
    connection.execute(sa.update(table).where(*where)
                       .values(updated_at=timeutils.utcnow()))


def _in_transaction(args, kwargs) -> bool:
    """Whether the call joins a transaction already open on its
    context (in this thread)."""
    context = kwargs.get('context', args[0] if args else None)
    scopes = getattr(context, '_enginefacade_context', None)
    return getattr(scopes, 'current', None) is not None


def _retried(fn, duplicates: bool = False, max_retries: int | None = None,
             interval: float | None = None,
             max_interval: float | None = None):
    """``fn`` (a transaction function) run again, after a short
    jittered pause, when its outermost transaction failed with a
    transient error (see :func:`is_transient`), raised
    :class:`RetryRequest` or, with ``duplicates``, hit a unique
    constraint; at most :data:`MAX_RETRIES` times, then the last error
    is raised."""
    if duplicates:
        def checker(e):
            return is_transient(e) or isinstance(e, db_exc.DBDuplicateEntry)
    else:
        checker = is_transient
    retrying = oslo_db_api.wrap_db_retry(
        max_retries=MAX_RETRIES if max_retries is None else max_retries,
        retry_interval=RETRY_INTERVAL if interval is None else interval,
        max_retry_interval=(MAX_RETRY_INTERVAL if max_interval is None
                            else max_interval),
        inc_retry_interval=True,
        retry_on_deadlock=True, jitter=True,
        exception_checker=checker)(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _in_transaction(args, kwargs):
            # Joined: a retry here would replay half a transaction the
            # database has rolled back; the outermost call retries.
            return fn(*args, **kwargs)
        return retrying(*args, **kwargs)
    return wrapper


#: Tries after the first of a read whose connection was lost.
READ_RETRIES = 2


def connection_reader(fn):
    """``main_context_manager.reader.connection`` (``context.connection``,
    SQLAlchemy Core), run again on a new connection, after a short
    pause, when its connection was lost mid-transaction (the server
    killed it, restarted, or a proxy in front of it did): at most
    :data:`READ_RETRIES` times.

    A read changes nothing, so trying it again is always safe; oslo.db
    already replaces a connection that died while idle in the pool (it
    checks each before handing it out), and this covers one that dies
    in use. A read joined to an outer transaction is not tried again on
    its own (the outer one decides). Every read transaction of cyborg
    uses it.
    """
    reader = main_context_manager.reader.connection(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _in_transaction(args, kwargs):
            return reader(*args, **kwargs)
        for attempt in range(READ_RETRIES):
            try:
                return reader(*args, **kwargs)
            except db_exc.DBConnectionError as e:
                # Not logged above debug: a database that is down fails the
                # last try too, and its caller says so once.
                LOG.debug('%s lost its database connection (%s); reading '
                          'again', fn.__qualname__, e)
                time.sleep(RETRY_INTERVAL * 2 ** attempt)
        return reader(*args, **kwargs)
    return wrapper


def connection_writer(fn):
    """``main_context_manager.writer.connection`` (``context.connection``:
    SQLAlchemy Core, without the ORM session's cost), serialised on
    SQLite, run again on a transient error (deadlock, lock wait timeout,
    serialization failure).

    Every write transaction of cyborg uses it (or :func:`retrying_writer`,
    the same with another retry policy): statements are Core statements
    on the transaction's connection, and functions that take a
    ``connection`` run inside the caller's transaction.
    """
    return _retried(_serialised_on_sqlite(
        main_context_manager.writer.connection(fn), fn))


class RetryRequest(db_exc.RetryRequest):
    """Raised inside a :func:`retrying_writer` transaction that lost a
    race it can only win by starting again.

    ``final`` is what the caller gets if the last try loses too (a 409
    the client can act on, say); a RuntimeError by default.
    """

    def __init__(self, reason: str, final: Exception | None = None):
        super().__init__(final if final is not None
                         else RuntimeError(reason))


def retrying_writer(fn):
    """:func:`connection_writer`, also run again when its transaction hit
    a unique constraint or raised :class:`RetryRequest`, with shorter
    pauses (a lost handle race is over in milliseconds)."""
    return _retried(_serialised_on_sqlite(
        main_context_manager.writer.connection(fn), fn), duplicates=True,
        interval=0.02, max_interval=0.2)


def by_primary_key(statement):
    """``statement``, an UPDATE of rows chosen by ``id``, made to find
    them through the primary key on MySQL/MariaDB. On a small table
    InnoDB's optimizer prefers a scan of the whole table, and an UPDATE
    locks every row it scans (until the transaction ends under
    REPEATABLE READ, while it scans under READ COMMITTED, see
    :data:`MYSQL_ISOLATION`): a lease or a claim would then lock every
    row of the table, and a concurrent ``SKIP LOCKED`` reader would skip
    them all."""
    for dialect in ('mysql', 'mariadb'):
        statement = statement.with_hint('FORCE INDEX (PRIMARY)',
                                        dialect_name=dialect)
    return statement


#: The isolation level of every MySQL/MariaDB connection: PostgreSQL's
#: default, which cyborg's transactions are written for. InnoDB's own
#: default, REPEATABLE READ, adds gap locks to every locking read and
#: UPDATE through an index (an ARQ looked up by instance, a handle
#: claimed): a concurrent insert or update into the gap waits until the
#: locking transaction commits, which on a durable server includes its
#: flush to disk. MariaDB 11.6 and later also fail a locking read of a
#: row changed since the transaction's snapshot (innodb_snapshot_isolation).
MYSQL_ISOLATION = 'READ COMMITTED'
_MYSQL_DIALECTS = ('mysql', 'mariadb')


def set_mysql_isolation(engine: sa.engine.Engine) -> None:
    """Run every connection of ``engine``, if MySQL/MariaDB, at
    :data:`MYSQL_ISOLATION` (whatever the server's default), also after
    a statement chose another level for one transaction."""
    if engine.dialect.name not in _MYSQL_DIALECTS:
        return
    dialect = engine.dialect

    @sa.event.listens_for(engine, 'connect')
    def _isolate(dbapi_connection, connection_record):
        dialect.set_isolation_level(dbapi_connection, MYSQL_ISOLATION)

    # What a connection returns to after
    # ``execution_options(isolation_level=...)``.
    dialect.default_isolation_level = MYSQL_ISOLATION
    # oslo.db made (and pooled) a connection before this hook ran.
    engine.dispose()


def configure(conf) -> None:
    """(Re)configure the engine from ``conf.database``.

    Replaces any engine configured before, so tests and the all-in-one can
    point one process at a new database.
    """
    options = dict(conf.database.items())
    # Only SQLite cannot run two writers at once (see _SQLiteWriteLock).
    _sqlite_write_lock.enabled = str(options.get('connection') or ''
                                     ).startswith('sqlite')
    manager = enginefacade.transaction_context()
    # thread_checkin: oslo.db's sleep(0) at every connection check-in lets
    # eventlet green threads run; with native threads it only hands the
    # GIL away once per transaction.
    manager.configure(sqlite_fk=True, thread_checkin=False, **options)
    manager.append_on_engine_create(patches.skip_redundant_rollbacks)
    manager.append_on_engine_create(set_mysql_isolation)
    manager.append_on_engine_create(watch_galera)
    main_context_manager.patch_factory(manager)


def get_engine() -> sa.engine.Engine:
    return main_context_manager.writer.get_engine()


@contextlib.contextmanager
def single_read() -> Iterator[sa.engine.Connection]:
    """A pooled connection for one read statement, outside any
    enginefacade transaction context (never call it inside one: it would
    not see that transaction's writes).

    For the hottest read only, an agent's unchanged report (thousands per
    minute on a large cloud): enginefacade's transaction scope around a
    single statement costs a third of the statement's own client CPU. The
    statement runs in the DBAPI's implicit transaction, which the pool's
    rollback ends on return, as it ends enginefacade's readers; errors are
    translated by oslo.db's filters on the engine all the same.
    """
    with get_engine().connect() as connection:
        yield connection
