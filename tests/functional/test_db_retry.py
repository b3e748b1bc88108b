"""Conductor writes retry real lock conflicts, on PostgreSQL and MariaDB.

Two write transactions (cyborg.db.api's decorators, as the conductor's
writes use them) lock two rows in opposite orders: the database kills one
(deadlock), oslo.db raises DBDeadlock, and the loser runs again from its
first statement and succeeds. A lock wait timeout (MariaDB's 1205,
PostgreSQL's lock_timeout) and a PostgreSQL serialization failure are
retried the same way. The module runs once per database
(``db_server``).
"""

import threading
import uuid
from concurrent import futures

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import models
from tests.functional import nova_flow

SERVICES = models.Service.__table__


@pytest.fixture(scope='module')
def database(db_server):
    name = 'retry_%s_%s' % (nova_flow.database_kind(db_server),
                            uuid.uuid4().hex[:8])
    url = db_server.create_database(name)
    db_api.configure(_Conf(url))
    migration.upgrade()
    engine = db_api.get_engine()
    with engine.begin() as connection:
        connection.execute(sa.insert(SERVICES), [
            {'host': host, 'binary': 'cyborg-agent', 'sync_requested': 0,
             'sync_done': 0} for host in ('a', 'b')])
    yield engine
    engine.dispose()
    db_server.drop_database(name)


class _Conf:
    def __init__(self, url):
        self.database = {'connection': url}


def _bump(connection, host):
    connection.execute(sa.update(SERVICES).where(SERVICES.c.host == host)
                       .values(sync_requested=SERVICES.c.sync_requested + 1))


def _counts(engine):
    with engine.connect() as connection:
        return {row.host: row.sync_requested for row in connection.execute(
            sa.select(SERVICES.c.host, SERVICES.c.sync_requested))}


def test_deadlock_is_retried(database):
    before = _counts(database)
    barrier = threading.Barrier(2)
    tries = {'a': 0, 'b': 0}

    @db_api.connection_writer
    def cross(context, first, second):
        tries[first] += 1
        _bump(context.connection, first)
        if tries[first] == 1:
            # Both hold their first row before either asks for its
            # second: one of them deadlocks.
            barrier.wait(timeout=30)
        _bump(context.connection, second)
        return tries[first]

    with futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(
            lambda hosts: cross(cyborg_context.get_admin_context(), *hosts),
            [('a', 'b'), ('b', 'a')]))
    # One won at once; the deadlock's victim committed on its second try.
    assert sorted(results) == [1, 2]
    after = _counts(database)
    # Each committed once: the victim's first try left nothing.
    assert after == {host: count + 2 for host, count in before.items()}


def _lock_timeout_statement(connection):
    if connection.dialect.name == 'postgresql':
        return "SET LOCAL lock_timeout = '500ms'"
    return 'SET SESSION innodb_lock_wait_timeout = 1'


def test_lock_wait_timeout_is_retried(database):
    before = _counts(database)
    tries = []
    locked = threading.Event()
    release = threading.Event()

    def hold():
        with database.begin() as connection:
            _bump(connection, 'a')
            locked.set()
            release.wait(30)

    @db_api.writer
    def write(context):
        tries.append(1)
        connection = context.session.connection()
        connection.execute(sa.text(_lock_timeout_statement(connection)))
        if len(tries) == 2:
            release.set()
        _bump(connection, 'a')

    with futures.ThreadPoolExecutor(1) as pool:
        holder = pool.submit(hold)
        assert locked.wait(30)
        try:
            write(cyborg_context.get_admin_context())
        finally:
            release.set()
        holder.result()
    # The first try timed out waiting for the lock; the second got it.
    assert len(tries) >= 2
    assert _counts(database)['a'] == before['a'] + 2


def test_lock_wait_timeout_every_time_raises(database):
    tries = []
    locked = threading.Event()
    release = threading.Event()

    def hold():
        with database.begin() as connection:
            _bump(connection, 'b')
            locked.set()
            release.wait(60)

    @db_api.writer
    def write(context):
        tries.append(1)
        connection = context.session.connection()
        connection.execute(sa.text(_lock_timeout_statement(connection)))
        _bump(connection, 'b')

    with futures.ThreadPoolExecutor(1) as pool:
        holder = pool.submit(hold)
        assert locked.wait(30)
        try:
            # DBDeadlock on MariaDB (oslo.db translates 1205); SQLAlchemy's
            # OperationalError on PostgreSQL (oslo.db passes it through).
            with pytest.raises((db_exc.DBError, sa.exc.OperationalError)
                               ) as caught:
                write(cyborg_context.get_admin_context())
        finally:
            release.set()
        holder.result()
    assert db_api.is_transient(caught.value)
    assert len(tries) == db_api.MAX_RETRIES + 1


def test_serialization_failure_is_retried(database):
    if database.dialect.name != 'postgresql':
        pytest.skip('MariaDB raises no serialization failure in '
                    'REPEATABLE READ')
    before = _counts(database)
    tries = []
    snapshot_taken = threading.Event()
    other_committed = threading.Event()

    @db_api.writer
    def write(context):
        tries.append(1)
        connection = context.session.connection()
        connection.execute(sa.text(
            'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ'))
        connection.execute(sa.select(SERVICES.c.id)).all()
        if len(tries) == 1:
            snapshot_taken.set()
            assert other_committed.wait(30)
        # Updating a row changed since the snapshot: 40001.
        _bump(connection, 'a')

    def other():
        assert snapshot_taken.wait(30)
        with database.begin() as connection:
            _bump(connection, 'a')
        other_committed.set()

    with futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(other)
        write(cyborg_context.get_admin_context())
        done.result()
    assert len(tries) == 2
    assert _counts(database)['a'] == before['a'] + 2
