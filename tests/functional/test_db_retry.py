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

"""Conductor writes retry real lock conflicts, on PostgreSQL and MariaDB.

Two write transactions (cyborg.db.api's decorators, as the conductor's
writes use them) lock two rows in opposite orders: the database kills one
(deadlock), oslo.db raises DBDeadlock, and the loser runs again from its
first statement and succeeds. A lock wait timeout (MariaDB's 1205,
PostgreSQL's lock_timeout) and a PostgreSQL serialization failure are
retried the same way. The module runs once per database
(``db_server``).
"""

import collections
from concurrent import futures
import json
import threading
import uuid

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
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

    @db_api.connection_writer
    def write(context):
        tries.append(1)
        connection = context.connection
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

    @db_api.connection_writer
    def write(context):
        tries.append(1)
        connection = context.connection
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
    """PostgreSQL's REPEATABLE READ refuses to update a row changed since
    the snapshot (40001): the whole transaction is run again. MariaDB's
    updates the latest committed row instead: one try, both counted."""
    before = _counts(database)
    tries = []
    snapshot_taken = threading.Event()
    other_committed = threading.Event()

    @db_api.connection_writer
    def write(context):
        tries.append(1)
        connection = context.connection
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
    retried = database.dialect.name == 'postgresql'
    assert len(tries) == (2 if retried else 1)
    assert _counts(database)['a'] == before['a'] + 2


RP = '11111111-1111-4111-8111-%012d'
HANDLES_PER_RP = 4
RPS = 3


@pytest.fixture(scope='module')
def hardware(database):
    """A device profile asking for one FPGA and :data:`RPS` FPGA
    deployables of :data:`HANDLES_PER_RP` PCI handles each on host
    ``h``."""
    with database.begin() as connection:
        connection.execute(sa.insert(models.DeviceProfile).values(
            uuid=str(uuid.uuid4()), name='one',
            profile_json=json.dumps({'groups': [{'resources:FPGA': '1'}]})))
        for number in range(RPS):
            device_id = connection.execute(sa.insert(models.Device).values(
                uuid=str(uuid.uuid4()), type='FPGA', vendor='0x8086',
                model='m', hostname='h',
                address='0000:%02x:00.0' % number)).inserted_primary_key[0]
            deployable_id = connection.execute(
                sa.insert(models.Deployable).values(
                    uuid=str(uuid.uuid4()), name='d', num_accelerators=1,
                    device_id=device_id, rp_uuid=RP % number)
            ).inserted_primary_key[0]
            # Its provider's resource class, as a report records it.
            connection.execute(sa.insert(models.Attribute).values(
                uuid=str(uuid.uuid4()), deployable_id=deployable_id,
                key='rc', value='FPGA'))
            cpid_id = connection.execute(
                sa.insert(models.ControlpathID).values(
                    uuid=str(uuid.uuid4()), device_id=device_id,
                    cpid_type='PCI', cpid_info='{}')).inserted_primary_key[0]
            connection.execute(sa.insert(models.AttachHandle), [
                {'uuid': str(uuid.uuid4()), 'deployable_id': deployable_id,
                 'cpid_id': cpid_id, 'in_use': False, 'attach_type': 'PCI',
                 'attach_info': json.dumps({'domain': '0000',
                                            'bus': '%02x' % number,
                                            'device': 0, 'function': f})}
                for f in range(HANDLES_PER_RP)])
    return database


def test_concurrent_arq_cycles_never_raise_database_errors(hardware):
    """Threads create, bind, unbind and delete (by uuid and by instance)
    ARQs on the same providers, as concurrent Nova builds and deletes
    do; the only errors are the 4xx answers the flow can give (no free
    handle, a state that changed meanwhile), never a database error."""
    context = cyborg_context.get_admin_context()
    answers = collections.Counter()

    def cycle(number):
        instance = str(uuid.uuid4())
        rp = RP % (number % RPS)
        for step in range(6):
            try:
                arqs = arq_db.arq_create(context, 'one', None)
                uuids = [arq['uuid'] for arq in arqs]
                binding_db.bind(context, {
                    u: {'hostname': 'h', 'device_rp_uuid': rp,
                        'instance_uuid': instance} for u in uuids},
                    None, 'c%d' % number)
                unbound = step % 3 == 0
                if unbound:
                    # Unbound ARQs have no instance any more.
                    arq_db.arq_unbind(context, uuids, None)
                if step % 2 or unbound:
                    arq_db.arq_delete(context, uuids, None, None)
                else:
                    arq_db.arq_delete(context, None, instance, None)
                answers['ok'] += 1
            except exception.CyborgException as e:
                answers[type(e).__name__] += 1
                arq_db.arq_delete(context, None, instance, None)
                arq_db.arq_delete(context, uuids, None, None)

    with futures.ThreadPoolExecutor(8) as pool:
        for result in [pool.submit(cycle, n) for n in range(8)]:
            result.result()
    assert answers['ok'] > 0, answers
    assert set(answers) <= {'ok', 'NoFreeAttachHandles'}, answers
    with hardware.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(
            models.ExtendedAcceleratorRequest.__table__)).scalar() == 0
        assert connection.execute(sa.select(sa.func.count()).select_from(
            models.AttachHandle.__table__).where(
                models.AttachHandle.__table__.c.in_use)).scalar() == 0
