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

"""Database errors never answer 500: conductor writes retry whole
transactions on deadlock, lock wait timeout and serialization failure;
what is left crosses RPC as a CyborgException (409 or 503); the API's own
read errors and a conductor that does not answer are 503s with
Retry-After."""

import json
import time
import types
from unittest import mock

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
import oslo_messaging as messaging
from oslo_messaging._drivers import common as rpc_common
from oslo_utils import timeutils
import pytest
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
import webob

from cyborg import context as cyborg_context
from cyborg.api import app as api_app
from cyborg.api import errors
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import errors as db_errors
from cyborg.db import models
from tests import factories

SERVICES = models.Service.__table__
PROFILE_BODY = [{'name': 'a', 'groups': [{'resources:FPGA': 1}]}]


@pytest.fixture(autouse=True)
def pauses(monkeypatch):
    """No pauses between retries (their lengths are recorded); the count
    of tries stays the real one."""
    slept = []
    monkeypatch.setattr(oslo_db_api, 'time',
                        types.SimpleNamespace(sleep=slept.append))
    return slept


def _deadlock():
    return db_exc.DBDeadlock(Exception('(1213, Deadlock found when trying '
                                       'to get lock; try restarting '
                                       'transaction)'))


def _service_count(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(
            sa.select(sa.func.count()).select_from(SERVICES)).scalar()


def _insert_service(context, host):
    context.connection.execute(sa.insert(SERVICES).values(
        host=host, binary='cyborg-agent', created_at=timeutils.utcnow()))


# Transient errors

class _Inner:
    def __init__(self, *args, pgcode=None):
        self.args = args
        self.pgcode = pgcode


@pytest.mark.parametrize('error, transient', [
    (_deadlock(), True),
    # oslo.db maps MySQL's 1205 to DBDeadlock; a bare DBError with the
    # driver's error is recognised too.
    (db_exc.DBError(_Inner(1205, 'Lock wait timeout exceeded; try '
                                 'restarting transaction')), True),
    (db_exc.DBError(sa_exc.OperationalError(
        'UPDATE x', {}, _Inner('could not serialize access due to '
                               'concurrent update', pgcode='40001'))), True),
    (db_exc.DBError(_Inner('canceling statement due to lock timeout',
                           pgcode='55P03')), True),
    # oslo.db passes PostgreSQL's OperationalErrors through untranslated.
    (sa_exc.OperationalError('UPDATE x', {}, _Inner(
        'could not serialize access', pgcode='40001')), True),
    (sa_exc.OperationalError('UPDATE x', {}, _Inner(
        'canceling statement due to lock timeout', pgcode='55P03')), True),
    (sa_exc.OperationalError('UPDATE x', {}, _Inner(
        'server closed the connection', pgcode=None)), False),
    (db_exc.DBError(_Inner(1064, 'You have an error in your SQL')), False),
    # A Galera node that is not synced (joining, or without quorum).
    (db_exc.DBError(sa_exc.OperationalError('SELECT 1', {}, _Inner(
        1047, 'WSREP has not yet prepared node for application use'))),
     True),
    (sa_exc.OperationalError('SELECT 1', {}, _Inner(
        1047, 'WSREP has not yet prepared node for application use')), True),
    (db_exc.DBDuplicateEntry(['name']), False),
    (db_exc.DBConnectionError(Exception('gone')), False),
    (ValueError('Deadlock found'), False),
])
def test_transient_errors(error, transient):
    assert db_api.is_transient(error) is transient


def test_deadlock_is_retried_then_succeeds(database):
    calls = []

    @db_api.connection_writer
    def write(context):
        calls.append(1)
        _insert_service(context, 'h%d' % len(calls))
        if len(calls) == 1:
            # The database rolled this transaction back: nothing of the
            # first try may stay.
            raise _deadlock()
        return 'done'

    assert write(cyborg_context.get_admin_context()) == 'done'
    assert len(calls) == 2
    with database.connect() as connection:
        hosts = connection.execute(sa.select(SERVICES.c.host)).scalars()
        assert list(hosts) == ['h2']


@pytest.mark.parametrize('decorator', [db_api.connection_writer,
                                       db_api.retrying_writer])
def test_deadlock_every_time_raises_after_the_retries(database, decorator,
                                                      pauses):
    calls = []

    @decorator
    def write(context):
        calls.append(1)
        raise _deadlock()

    with pytest.raises(db_exc.DBDeadlock):
        write(cyborg_context.get_admin_context())
    assert len(calls) == db_api.MAX_RETRIES + 1
    # Short, bounded pauses: a request never waits long for the retries.
    assert len(pauses) == db_api.MAX_RETRIES
    assert sum(pauses) <= db_api.MAX_RETRIES * db_api.MAX_RETRY_INTERVAL


def test_serialization_failure_and_lock_wait_are_retried(database):
    errors_ = [db_exc.DBError(_Inner('could not serialize access',
                                     pgcode='40001')),
               db_exc.DBError(_Inner(1205, 'Lock wait timeout exceeded'))]

    @db_api.connection_writer
    def write(context):
        if errors_:
            raise errors_.pop(0)
        return 'done'

    assert write(cyborg_context.get_admin_context()) == 'done'
    assert not errors_


def test_other_errors_are_not_retried(database):
    calls = []

    @db_api.connection_writer
    def write(context):
        calls.append(1)
        raise db_exc.DBDuplicateEntry(['name'])

    with pytest.raises(db_exc.DBDuplicateEntry):
        write(cyborg_context.get_admin_context())
    assert len(calls) == 1


def test_retrying_writer_also_retries_duplicates(database):
    calls = []

    @db_api.retrying_writer
    def write(context):
        calls.append(1)
        if len(calls) < 3:
            raise db_exc.DBDuplicateEntry(['name'])
        return 'done'

    assert write(cyborg_context.get_admin_context()) == 'done'
    assert len(calls) == 3


def test_only_the_outermost_transaction_is_retried(database):
    inner_calls, outer_calls = [], []

    @db_api.connection_writer
    def inner(context):
        inner_calls.append(1)
        _insert_service(context, 'inner%d' % len(inner_calls))
        if len(inner_calls) == 1:
            raise _deadlock()

    @db_api.connection_writer
    def outer(context):
        outer_calls.append(1)
        _insert_service(context, 'outer%d' % len(outer_calls))
        inner(context)

    outer(cyborg_context.get_admin_context())
    # The inner function joined the outer transaction: the deadlock
    # rolled back both, and both ran again once.
    assert (len(outer_calls), len(inner_calls)) == (2, 2)
    with database.connect() as connection:
        hosts = connection.execute(
            sa.select(SERVICES.c.host).order_by(SERVICES.c.host)).scalars()
        assert list(hosts) == ['inner2', 'outer2']


# Reads whose connection was lost


@pytest.fixture
def read_pauses(monkeypatch):
    """No pauses between the tries of a read (their lengths are
    recorded)."""
    slept = []
    monkeypatch.setattr(db_api, 'time',
                        types.SimpleNamespace(sleep=slept.append))
    return slept


def _lost():
    return db_exc.DBConnectionError(Exception(
        'server closed the connection unexpectedly'))


def test_a_read_whose_connection_was_lost_is_read_again(database,
                                                        read_pauses):
    calls = []

    @db_api.connection_reader
    def read(context):
        calls.append(1)
        value = context.connection.execute(sa.select(sa.literal(7)))
        if len(calls) == 1:
            raise _lost()
        return value.scalar()

    assert read(cyborg_context.get_admin_context()) == 7
    assert len(calls) == 2
    assert len(read_pauses) == 1


def test_a_lost_read_raises_after_the_retries(database, read_pauses):
    calls = []

    @db_api.connection_reader
    def read(context):
        calls.append(1)
        raise _lost()

    with pytest.raises(db_exc.DBConnectionError):
        read(cyborg_context.get_admin_context())
    assert len(calls) == db_api.READ_RETRIES + 1
    # Short pauses: a read of a database that is down answers soon.
    assert len(read_pauses) == db_api.READ_RETRIES
    assert sum(read_pauses) < 0.5


def test_other_read_errors_are_not_read_again(database, read_pauses):
    calls = []

    @db_api.connection_reader
    def read(context):
        calls.append(1)
        raise db_exc.DBError(Exception('SELECT nonsense'))

    with pytest.raises(db_exc.DBError):
        read(cyborg_context.get_admin_context())
    assert len(calls) == 1


def test_a_read_joined_to_a_write_is_not_read_again_on_its_own(
        database, read_pauses):
    """The write's transaction lost its connection: the write fails (it
    may have been committed or not; the caller is told), the joined
    read is not tried again inside it."""
    reads = []

    @db_api.connection_reader
    def read(context):
        reads.append(1)
        raise _lost()

    @db_api.connection_writer
    def write(context):
        read(context)

    with pytest.raises(db_exc.DBConnectionError):
        write(cyborg_context.get_admin_context())
    assert len(reads) == 1
    assert read_pauses == []


# The conductor's endpoints

def _crossed(error):
    """``error`` as the API's side of oslo.messaging re-raises it."""
    data = rpc_common.serialize_remote_exception(
        (type(error), error, None))
    return rpc_common.deserialize_remote_exception(data, rpc.ALLOWED_EXMODS)


@pytest.fixture
def manager():
    return conductor_manager.ConductorManager('c1')


@pytest.fixture
def profile(database):
    factories.create_test_device_profile(
        uuid='66666666-6666-4666-8666-666666666666', name='dp',
        groups=[{'resources:FPGA': '2'}])


def _arq_count(engine) -> int:
    table = models.ExtendedAcceleratorRequest.__table__
    with engine.connect() as connection:
        return connection.execute(
            sa.select(sa.func.count()).select_from(table)).scalar()


def _expected_exception(call):
    """What the RPC server hands the caller: the endpoint's exception,
    unwrapped from oslo.messaging's ExpectedException."""
    try:
        call()
    except messaging.ExpectedException as e:
        return e.exc_info[1]
    raise AssertionError('no exception')


def test_arq_create_deadlock_is_retried_then_succeeds(manager, database,
                                                      profile):
    # The profile's one group asks for two accelerators.
    with mock.patch.object(arq_db.dp_rules, 'accelerator_count',
                           side_effect=[_deadlock(), 2]):
        created = manager.arq_create(cyborg_context.get_admin_context(), 'dp')
    assert len(created) == 2
    assert _arq_count(database) == 2


def test_arq_create_deadlock_every_time_is_503(manager, database, profile):
    with mock.patch.object(arq_db.dp_rules, 'accelerator_count',
                           side_effect=_deadlock()) as m:
        error = _expected_exception(lambda: manager.arq_create(
            cyborg_context.get_admin_context(), 'dp'))
    assert m.call_count == db_api.MAX_RETRIES + 1
    assert isinstance(error, exception.ServiceUnavailable)
    assert error.code == 503
    assert 'database is unavailable' in error.message
    assert _arq_count(database) == 0
    crossed = _crossed(error)
    assert isinstance(crossed, exception.ServiceUnavailable)
    assert crossed.code == 503


@pytest.mark.parametrize('db_error, cls, code', [
    (db_exc.DBDuplicateEntry(['name']), exception.Conflict, 409),
    (db_exc.DBReferenceError('t', 'c', 'k', 'rt'), exception.Conflict, 409),
    (_deadlock(), exception.ServiceUnavailable, 503),
    (db_exc.DBConnectionError(Exception('connection refused')),
     exception.ServiceUnavailable, 503),
    (db_exc.DBError(sa_exc.OperationalError('SELECT', {}, Exception('x'))),
     exception.ServiceUnavailable, 503),
    (sa_exc.OperationalError('SELECT', {}, Exception('x')),
     exception.ServiceUnavailable, 503),
])
@pytest.mark.parametrize('method, args, target', [
    ('arq_create', ('dp',), 'cyborg.db.arqs.arq_create'),
    ('device_profile_create', ({'name': 'x', 'groups': []},),
     'cyborg.db.device_profiles.device_profile_create'),
    ('device_profile_delete', ([['name', 'x']],),
     'cyborg.db.device_profiles.device_profile_delete'),
    ('device_set_status', ('u', 'disabled'),
     'cyborg.db.hardware.device_set_status'),
    ('attribute_create', ({},), 'cyborg.db.hardware.attribute_create'),
    ('attribute_delete', ('u',), 'cyborg.db.hardware.attribute_delete'),
])
def test_database_errors_cross_rpc_as_answers(manager, db_error, cls, code,
                                              method, args, target):
    with mock.patch(target, side_effect=db_error):
        error = _expected_exception(lambda: getattr(manager, method)(
            cyborg_context.get_admin_context(), *args))
    assert type(error) is cls and error.code == code
    assert error.__cause__ is db_error
    crossed = _crossed(error)
    assert isinstance(crossed, cls) and crossed.code == code
    assert crossed.message == error.message


@pytest.mark.parametrize('method, args', [
    ('arq_bind', ({},)), ('arq_unbind', ([],)), ('arq_delete', (None, 'i')),
])
def test_binder_database_errors_are_answers(method, args):
    binder = mock.Mock()
    getattr(binder, method.split('_', 1)[1]).side_effect = _deadlock()
    manager = conductor_manager.ConductorManager('c1', binder=binder)
    error = _expected_exception(lambda: getattr(manager, method)(
        cyborg_context.get_admin_context(), *args))
    assert isinstance(error, exception.ServiceUnavailable)


def test_duplicate_message_names_the_columns(manager):
    with mock.patch('cyborg.db.device_profiles.device_profile_create',
                    side_effect=db_exc.DBDuplicateEntry(['name'])):
        error = _expected_exception(lambda: manager.device_profile_create(
            cyborg_context.get_admin_context(), {}))
    assert error.message == (
        'Conflict: the request conflicts with a concurrent change of the '
        'same rows (duplicate name); nothing was changed, retry')


# The API

def _app(conf, conductor):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=conductor):
        return api_app.setup_app(conf, transport=object())


def _request(app, method, path, body=None, **headers):
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response):
    return json.loads(response.json['error_message'])


@pytest.mark.parametrize('db_error', [
    db_exc.DBConnectionError(Exception('secret host db.example:3306')),
    db_exc.DBError(Exception('SELECT secret FROM table')),
    _deadlock(),
    sa_exc.OperationalError('SELECT secret', {}, Exception('x')),
])
def test_api_read_database_error_is_503(conf, database, db_error):
    app = _app(conf, mock.Mock())
    with mock.patch('cyborg.db.arqs.arq_list', side_effect=db_error):
        response = _request(app, 'GET', '/v2/accelerator_requests')
    assert response.status_int == 503
    assert response.headers['Retry-After'] == str(errors.RETRY_AFTER)
    assert response.content_type == 'application/json'
    fault = _fault(response)
    assert fault['faultcode'] == 'Server'
    assert fault['faultstring'] == errors.DB_UNAVAILABLE
    assert 'secret' not in response.text
    assert 'Traceback' not in response.text


@pytest.mark.parametrize('rpc_error, message', [
    (messaging.MessagingTimeout('Timed out waiting for a reply'),
     'No conductor answered within 30 s; retry later.'),
    (messaging.MessageDeliveryFailure('no route'),
     'The conductor could not be reached (MessageDeliveryFailure); nothing '
     'was changed, retry later.'),
    (exception.ServiceUnavailable(
        reason=db_errors.DB_UNAVAILABLE),
     'Service is unavailable: the database is unavailable, retry later'),
    (messaging.RemoteError('DBDeadlock', 'deadlock', 'Traceback...'),
     errors.DB_UNAVAILABLE),
])
@pytest.mark.parametrize('method, path, body, conductor_method', [
    ('POST', '/v2/device_profiles', PROFILE_BODY, 'device_profile_create'),
    ('DELETE', '/v2/accelerator_requests?instance='
               '22222222-2222-4222-8222-222222222222', None, 'arq_delete'),
])
def test_api_write_unavailable_is_503(conf, database, rpc_error, message,
                                      method, path, body, conductor_method):
    # An ARQ of the instance: its deletion is not done (a deletion by
    # instance of an instance without ARQs is done, whatever the
    # conductor answers).
    factories.create_test_arq(
        database, instance_uuid='22222222-2222-4222-8222-222222222222')
    conductor = mock.Mock()
    getattr(conductor, conductor_method).side_effect = rpc_error
    app = _app(conf, conductor)
    response = _request(app, method, path, body,
                        **{'X-Service-Roles': 'service'})
    assert response.status_int == 503
    assert response.headers['Retry-After'] == str(errors.RETRY_AFTER)
    assert _fault(response)['faultstring'] == message
    assert 'Traceback' not in response.text


def test_api_remote_duplicate_is_409(conf, database):
    conductor = mock.Mock()
    conductor.device_profile_create.side_effect = messaging.RemoteError(
        'DBDuplicateEntry', 'dup', 'Traceback...')
    response = _request(_app(conf, conductor), 'POST', '/v2/device_profiles',
                        PROFILE_BODY)
    assert response.status_int == 409
    assert 'Retry-After' not in response.headers


def test_api_other_remote_error_stays_500(conf, database):
    conductor = mock.Mock()
    conductor.device_profile_create.side_effect = messaging.RemoteError(
        'KeyError', 'x', 'Traceback...')
    response = _request(_app(conf, conductor), 'POST', '/v2/device_profiles',
                        PROFILE_BODY)
    assert response.status_int == 500
    assert 'Retry-After' not in response.headers
    assert 'Traceback' not in response.text


def test_timeout_message_uses_the_option(conf, database):
    conf.set_override('conductor_timeout', 7, group='api')
    conductor = mock.Mock()
    conductor.device_profile_create.side_effect = messaging.MessagingTimeout()
    response = _request(_app(conf, conductor), 'POST', '/v2/device_profiles',
                        PROFILE_BODY)
    assert response.status_int == 503
    assert 'within 7 s' in _fault(response)['faultstring']


def test_conductor_timeout_default(conf):
    assert conf.api.conductor_timeout == 30


def test_conductor_api_with_timeout():
    client = mock.Mock()
    with mock.patch.object(rpc, 'get_client', return_value=client):
        api = rpcapi.ConductorAPI(object())
        bounded = api.with_timeout(12)
    client.prepare.assert_called_once_with(timeout=12,
                                           retry=rpcapi.SEND_RETRIES)
    assert bounded.timeout == 12 and api.timeout is None
    bounded.arq_delete(None, instance_uuid='i')
    client.prepare.return_value.call.assert_called_once_with(
        None, 'arq_delete', uuids=None, instance_uuid='i')
    client.call.assert_not_called()


def test_api_calls_wait_the_configured_timeout(conf, database):
    """Over a real oslo.messaging transport with no conductor, a write
    answers 503 after [api] conductor_timeout, not rpc_response_timeout."""
    conf.set_override('conductor_timeout', 1, group='api')
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    conf.set_override('auth_strategy', 'noauth', group='api')
    try:
        app = api_app.setup_app(conf, transport=transport)
        start = time.monotonic()
        response = _request(app, 'POST', '/v2/device_profiles', PROFILE_BODY)
        elapsed = time.monotonic() - start
    finally:
        transport.cleanup()
    assert response.status_int == 503, response.text
    assert response.headers['Retry-After'] == str(errors.RETRY_AFTER)
    assert 'within 1 s' in _fault(response)['faultstring']
    assert 0.9 <= elapsed < 10
