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

import threading
from unittest import mock

from kombu import exceptions as kombu_exceptions
import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import service as conductor_service


class Endpoint:
    def __init__(self):
        self.seen = []
        self.cast_done = threading.Event()

    def echo(self, context, value):
        value['touched'] = True
        self.seen.append((context.project_id, value))
        return value

    def fail(self, context):
        raise exception.DeviceProfileNotFound(key='name', value='x')

    def note(self, context, value):
        self.seen.append(value)
        self.cast_done.set()

    def _private(self, context):
        return 'secret'


@pytest.fixture
def transport():
    transport = rpc.LocalTransport(max_workers=2)
    yield transport
    transport.cleanup()


@pytest.fixture
def endpoint(transport):
    endpoint = Endpoint()
    server = rpc.get_server(transport, 'topic', 'host1', endpoint)
    server.start()
    yield endpoint
    server.stop()


def _ctx():
    return cyborg_context.RequestContext(project_id='p1', roles=['member'])


def test_call_copies_arguments_and_result(transport, endpoint):
    client = rpc.get_client(transport, 'topic')
    sent = {'a': [1, 2]}
    result = client.call(_ctx(), 'echo', value=sent)
    assert result == {'a': [1, 2], 'touched': True}
    assert sent == {'a': [1, 2]}
    assert endpoint.seen[0][0] == 'p1'


def test_call_raises_endpoint_exceptions(transport, endpoint):
    client = rpc.get_client(transport, 'topic')
    with pytest.raises(exception.DeviceProfileNotFound):
        client.call(_ctx(), 'fail')


def test_private_and_missing_methods_are_refused(transport, endpoint):
    client = rpc.get_client(transport, 'topic')
    for method in ('_private', 'missing'):
        with pytest.raises(messaging.NoSuchMethod):
            client.call(_ctx(), method)


def test_cast_runs_in_the_background(transport, endpoint):
    rpc.get_client(transport, 'topic').cast(_ctx(), 'note', value=3)
    assert endpoint.cast_done.wait(5)
    assert endpoint.seen == [3]


def test_prepare_targets_a_server(transport, endpoint):
    client = rpc.get_client(transport, 'topic').prepare(server='host1')
    assert client.call(_ctx(), 'echo', value={})['touched']
    with pytest.raises(messaging.MessagingTimeout):
        client.prepare(server='host2').call(_ctx(), 'echo', value={})


def test_stopped_server_is_unreachable(transport):
    server = rpc.get_server(transport, 'topic', 'h', Endpoint())
    server.start()
    server.stop()
    with pytest.raises(messaging.MessagingTimeout):
        rpc.get_client(transport, 'topic').call(_ctx(), 'echo', value={})


def test_transport_choice(conf):
    conf.set_override('transport_url', 'inproc://')
    transport = rpc.get_transport(conf)
    assert isinstance(transport, rpc.LocalTransport)
    transport.cleanup()


@pytest.mark.parametrize('error', [
    kombu_exceptions.OperationalError('[Errno 111] Connection refused'),
    ConnectionRefusedError(111, 'Connection refused')])
def test_an_unreachable_broker_is_a_delivery_failure(error):
    """A client prepared with retry raises what kombu raised when it
    cannot open a connection; the API must see a MessagingException
    (503), not an unexpected error (500)."""
    client = mock.Mock()
    client.call.side_effect = error
    client.cast.side_effect = error
    measured = rpc.MeasuredClient(client, 'topic')
    with pytest.raises(messaging.MessageDeliveryFailure,
                       match='Cannot send m: the broker cannot be reached'):
        measured.call(_ctx(), 'm')
    with pytest.raises(messaging.MessageDeliveryFailure):
        measured.cast(_ctx(), 'm')


def test_rabbit_reconnects_every_few_seconds_by_default(conf):
    conf.set_override('transport_url', 'rabbit://guest:guest@127.0.0.1:1/')
    transport = rpc.get_transport(conf)
    try:
        assert (conf.oslo_messaging_rabbit.rabbit_interval_max
                == rpc.RABBIT_INTERVAL_MAX == 5)
    finally:
        transport.cleanup()
        conf.set_default('rabbit_interval_max', 30,
                         group='oslo_messaging_rabbit')


def test_context_survives_serialization():
    serializer = rpc.RequestContextSerializer()
    context = cyborg_context.RequestContext(
        project_id='p', user_id='u', roles=['admin'], service_roles=['service']
    )
    copy = serializer.deserialize_context(
        serializer.serialize_context(context)
    )
    assert (
        copy.project_id,
        copy.roles,
        copy.service_roles,
        copy.is_admin,
    ) == ('p', ['admin'], ['service'], True)


@pytest.mark.parametrize('values', [
    {},
    {'project_id': 'p', 'user_id': 'u', 'roles': ['member']},
    {'project_id': 'p', 'roles': ['admin'], 'service_roles': ['service'],
     'service_user_id': 'nova', 'service_project_id': 'services'},
    {'roles': ['reader'], 'is_admin': True, 'read_only': True,
     'show_deleted': True, 'is_admin_project': False, 'auth_token': 't',
     'global_request_id': 'req-g', 'system_scope': 'all',
     'domain_id': 'd', 'user_domain_id': 'ud', 'project_domain_id': 'pd',
     'resource_uuid': 'r', 'service_roles': []},
])
def test_context_on_the_wire_leaves_out_only_what_comes_back(values):
    context = cyborg_context.RequestContext(**values)
    serializer = rpc.RequestContextSerializer()
    wire = serializer.serialize_context(context)
    copy = serializer.deserialize_context(wire)
    assert copy.to_dict() == context.to_dict()
    left_out = set(context.to_dict()) - set(wire)
    assert {'project', 'user_identity'} <= left_out
    assert wire['request_id'] == context.request_id


def test_context_on_the_wire_drops_defaults():
    context = cyborg_context.RequestContext(project_id='p', roles=['admin'])
    wire = rpc.RequestContextSerializer().serialize_context(context)
    assert set(wire) == {'user', 'project_id', 'is_admin', 'request_id',
                         'roles'}


class ExpectingEndpoint:
    @messaging.expected_exceptions(exception.CyborgException)
    def refuse(self, context):
        raise exception.DuplicateDeviceProfileName(name='x')


def test_expected_exceptions_reach_the_caller_unwrapped(transport):
    server = rpc.get_server(transport, 'expect', 'h', ExpectingEndpoint())
    server.start()
    try:
        with pytest.raises(exception.DuplicateDeviceProfileName):
            rpc.get_client(transport, 'expect').call(_ctx(), 'refuse')
    finally:
        server.stop()


def test_agent_calls_wait_agent_timeout_seconds(conf):
    """Handle preparation calls to an agent give up after the conductor's
    ``[conductor] agent_timeout``, not the general RPC timeout."""
    client = mock.Mock()
    # An agent older than API 1.3 (the call without the preparation).
    client.can_send_version.return_value = False
    with mock.patch.object(rpc, 'get_client', return_value=client):
        handles = conductor_service.AgentHandles(object(), 7)
    handle = mock.Mock(host='h1', driver='fake_driver', attach_type='MDEV',
                       attach_info={'asked_type': 't'}, uuid='u1',
                       preparation='mdev')
    handles.release(cyborg_context.get_admin_context(), handle)
    client.prepare.assert_called_once_with(server='h1', timeout=7)
    client.prepare.return_value.call.assert_called_once_with(
        mock.ANY, 'release_attach_handle', driver='fake_driver',
        attach_type='MDEV', attach_info={'asked_type': 't'},
        handle_uuid='u1')
    assert conf.conductor.agent_timeout == 30
