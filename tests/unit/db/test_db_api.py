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

import datetime
import threading

import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.common import patches
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import models
from cyborg.db import services as services_db
from tests import factories

GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_A': 'required'}]


def _create(context, name, **values):
    return profiles_db.device_profile_create(
        context, dict(name=name, groups=GROUPS, **values)
    )


def test_create_and_read(database, admin_context):
    created = _create(admin_context, 'dp1', description='d')
    assert created['groups'] == GROUPS
    assert profiles_db.device_profile_get(admin_context, name='dp1') == created
    assert (
        profiles_db.device_profile_get(admin_context, uuid=created['uuid'])
        == created
    )


def test_list_keeps_id_order_and_filters(database, admin_context):
    for name in ('b', 'a', 'c'):
        _create(admin_context, name)
    assert [p['name'] for p in profiles_db.device_profile_list(
        admin_context)] == [
        'b',
        'a',
        'c',
    ]
    assert [
        p['name']
        for p in profiles_db.device_profile_list(admin_context,
                                                 ['c', 'b', 'zz'])
    ] == ['b', 'c']
    assert profiles_db.device_profile_list(admin_context, []) == []


def test_duplicates_conflict(database, admin_context):
    first = _create(admin_context, 'dp1')
    with pytest.raises(exception.DuplicateDeviceProfileName):
        _create(admin_context, 'dp1')
    with pytest.raises(exception.DuplicateDeviceProfileUUID):
        _create(admin_context, 'dp2', uuid=first['uuid'])
    assert len(profiles_db.device_profile_list(admin_context)) == 1


def test_missing_profile(database, admin_context):
    with pytest.raises(exception.DeviceProfileNotFound) as error:
        profiles_db.device_profile_get(admin_context, name='nope')
    assert str(error.value) == 'Device Profile not found with name=nope'


def test_delete_is_atomic(database, admin_context):
    _create(admin_context, 'a')
    _create(admin_context, 'b')
    with pytest.raises(exception.DeviceProfileNotFound):
        profiles_db.device_profile_delete(
            admin_context, [('name', 'a'), ('name', 'missing')]
        )
    assert len(profiles_db.device_profile_list(admin_context)) == 2
    profiles_db.device_profile_delete(admin_context,
                                      [('name', 'a'), ('name', 'b')])
    assert profiles_db.device_profile_list(admin_context) == []


def test_delete_refuses_profile_in_use(database, admin_context):
    profile = _create(admin_context, 'used')
    with database.begin() as connection:
        profile_id = connection.execute(
            sa.select(models.DeviceProfile.id)
        ).scalar()
        factories.create_test_arq(connection, uuid='a' * 36,
                                  state='Initial', project_id=None,
                                  device_profile_id=profile_id)
    with pytest.raises(exception.DeviceProfileInUse) as error:
        profiles_db.device_profile_delete(
            admin_context, [('uuid', profile['uuid'])]
        )
    assert error.value.code == 409
    assert len(profiles_db.device_profile_list(admin_context)) == 1


def test_service_heartbeat_upserts(database, admin_context):
    first = datetime.datetime(2026, 1, 1)
    later = datetime.datetime(2026, 1, 2)
    services_db.service_heartbeat(admin_context, 'h1', 'cyborg-agent', first)
    services_db.service_heartbeat(admin_context, 'h1', 'cyborg-agent', later)
    services_db.service_heartbeat(admin_context, 'h2', 'cyborg-agent', first)
    services = services_db.service_list(admin_context)
    assert [(s['host'], s['last_seen_up']) for s in services] == [
        ('h1', later),
        ('h2', first),
    ]


def test_engine_does_not_yield_at_every_checkin(database):
    """No eventlet here: oslo.db's sleep(0) per check-in is not wanted."""
    from oslo_db.sqlalchemy import engines
    assert not sa.event.contains(database, 'checkin', engines._thread_yield)
    assert not sa.event.contains(database.pool, 'checkin',
                                 engines._thread_yield)


def _counting_engine():
    """A SQLite engine counting the DBAPI rollbacks, with
    :func:`patches.skip_redundant_rollbacks`."""
    engine = sa.create_engine('sqlite://')
    rollbacks = []
    real = engine.dialect.do_rollback

    def counted(connection):
        rollbacks.append(1)
        real(connection)

    engine.dialect.do_rollback = counted
    assert patches.skip_redundant_rollbacks(engine)
    engine.connect().close()  # the first connect rolls back
    rollbacks.clear()
    return engine, rollbacks


def test_no_rollback_after_a_commit_or_rollback_with_nothing_since():
    engine, rollbacks = _counting_engine()
    with engine.connect() as connection:  # the pool's reset is skipped
        with connection.begin():
            connection.execute(sa.text('SELECT 1'))
    assert rollbacks == []
    with engine.connect() as connection:
        transaction = connection.begin()
        connection.execute(sa.text('SELECT 1'))
        transaction.rollback()
    assert rollbacks == [1]


def test_a_connection_that_ran_a_statement_is_still_rolled_back():
    engine, rollbacks = _counting_engine()
    connection = engine.connect()
    connection.begin()
    connection.execute(sa.text('SELECT 1'))
    connection.commit()
    connection.execute(sa.text('SELECT 1'))  # autobegins again
    connection.close()
    assert rollbacks == [1]
    with engine.connect() as connection:  # returned without an end
        pass
    assert rollbacks == [1, 1]
    with engine.connect() as connection:  # a failed statement
        with pytest.raises(sa.exc.OperationalError):
            connection.execute(sa.text('SELECT * FROM nowhere'))
    assert rollbacks == [1, 1, 1]



def test_the_sqlite_write_lock_is_released_when_sqlite_is_left_meanwhile():
    """A writer that took the lock on SQLite gives it back even when the
    database is configured anew (``enabled`` turned off) before it ends:
    otherwise every later writer waits for ever."""
    lock = db_api._SQLiteWriteLock()
    lock.enabled = True
    with lock.held():
        lock.enabled = False
    lock.enabled = True
    taken = []
    other = threading.Thread(target=lambda: taken.append(
        lock._lock.acquire(timeout=5)))
    other.start()
    other.join()
    assert taken == [True]


# Galera: row locks that hold across the cluster's nodes

def _add_agent(context, host):
    context.connection.execute(sa.insert(models.SERVICES).values(
        host=host, binary='cyborg-agent', created_at=_OLD, updated_at=_OLD))


_OLD = datetime.datetime(2020, 1, 1)


def _updated_at(engine, host):
    with engine.connect() as connection:
        return connection.execute(
            sa.select(models.SERVICES.c.updated_at)
            .where(models.SERVICES.c.host == host)).scalar()


def test_no_server_of_the_test_databases_is_a_galera_node(database):
    with database.connect() as connection:
        assert db_api.is_galera(connection) is False
        # MariaDB was asked, also on the connection oslo.db pooled
        # before the engine's hooks ran.
        assert (db_api._GALERA_INFO in connection.info) is (
            database.dialect.name == 'mysql')


@pytest.mark.parametrize('galera', [False, True])
def test_lock_rows_writes_the_rows_it_locks_on_galera_only(
        database, admin_context, galera):
    db_api.connection_writer(_add_agent)(admin_context, 'h1')
    db_api.connection_writer(_add_agent)(admin_context, 'h2')

    @db_api.connection_writer
    def lock(context):
        # What a connection to a Galera node notes when it is made.
        context.connection.info[db_api._GALERA_INFO] = galera
        try:
            db_api.lock_rows(context.connection, models.SERVICES,
                             models.SERVICES.c.host == 'h1')
        finally:
            context.connection.info.pop(db_api._GALERA_INFO)

    lock(admin_context)
    # Written (so certified against other nodes' writers) on Galera only;
    # never a row it does not lock.
    assert (_updated_at(database, 'h1') != _OLD) is galera
    assert _updated_at(database, 'h2') == _OLD


class _FakeCursor:
    def __init__(self, row):
        self.row = row
        self.statements = []

    def execute(self, statement):
        self.statements.append(statement)

    def fetchone(self):
        return self.row

    def close(self):
        pass


class _FakeDBAPIConnection:
    def __init__(self, row):
        self.cursor_ = _FakeCursor(row)

    def cursor(self):
        return self.cursor_


class _Record:
    def __init__(self):
        self.info = {}


@pytest.mark.parametrize('row, galera', [
    (('wsrep_on', 'ON'), True), (('wsrep_on', 'OFF'), False),
    # MySQL without wsrep has no such variable.
    (None, False)])
def test_a_new_connection_notes_whether_its_server_is_a_galera_node(
        row, galera):
    dbapi_connection, record = _FakeDBAPIConnection(row), _Record()
    db_api._note_galera(dbapi_connection, record)
    assert record.info[db_api._GALERA_INFO] is galera
    # A Galera node's reads wait for what the cluster committed before.
    assert dbapi_connection.cursor_.statements == [
        "SHOW VARIABLES LIKE 'wsrep_on'"] + (
        ['SET SESSION wsrep_sync_wait = @@wsrep_sync_wait | 1']
        if galera else [])


def test_a_connection_is_asked_once_whether_its_server_is_a_galera_node():
    dbapi_connection, record = (_FakeDBAPIConnection(('wsrep_on', 'ON')),
                                _Record())
    for _checkout in range(3):
        db_api._note_galera_once(dbapi_connection, record, None)
    assert record.info[db_api._GALERA_INFO] is True
    assert len(dbapi_connection.cursor_.statements) == 2


# The isolation level of MySQL/MariaDB connections ---------------------------

# Each database's level: MySQL/MariaDB at PostgreSQL's (db_api.MYSQL_
# ISOLATION), the others at their own default.
_ISOLATION = {'mysql': 'READ COMMITTED', 'mariadb': 'READ COMMITTED',
              'postgresql': 'READ COMMITTED', 'sqlite': 'SERIALIZABLE'}


def test_connections_read_committed_also_after_another_level(database):
    """Every connection, the one oslo.db made before the hook too, runs
    at READ COMMITTED on MySQL/MariaDB (PostgreSQL's default), and goes
    back to it after a transaction chose another level."""
    expected = _ISOLATION[database.dialect.name]
    with database.connect() as connection:
        assert connection.get_isolation_level() == expected
        first = connection.connection.dbapi_connection
        connection.execution_options(isolation_level='SERIALIZABLE')
        assert connection.get_isolation_level() == 'SERIALIZABLE'
    with database.connect() as connection:
        # The same connection, back from the pool (SQLite's file
        # databases are not pooled).
        assert (connection.connection.dbapi_connection is first
                or isinstance(database.pool, sa.pool.NullPool))
        assert connection.get_isolation_level() == expected


@pytest.mark.parametrize('database', ['mariadb'], indirect=True)
def test_a_locked_instance_does_not_hold_up_the_bind_of_another(database):
    """InnoDB's REPEATABLE READ would lock the gap around a locking read
    by instance (the lookup of an ARQ delete), so a bind writing another
    instance into that gap would wait until the delete committed (a
    flush to disk, on a durable server); at READ COMMITTED it does not
    wait."""
    for instance in ('instance-1', 'instance-9'):
        factories.create_test_arq(database, instance_uuid=instance)
    with database.connect() as deleting, deleting.begin():
        assert arq_db.lock_rows(deleting, None,
                                instance_uuid='instance-5') == []
        with database.connect() as binding, binding.begin():
            binding.execute(sa.text(
                'SET SESSION innodb_lock_wait_timeout = 1'))
            # Raises (lock wait timeout) if it waits.
            moved = binding.execute(
                sa.update(models.ExtendedAcceleratorRequest)
                .where(models.ExtendedAcceleratorRequest.instance_uuid
                       == 'instance-9')
                .values(instance_uuid='instance-6')).rowcount
    assert moved == 1
