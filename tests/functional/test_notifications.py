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

"""Versioned notifications end to end: nova_flow.py's deployment (two
conductors, the API, one agent, real Placement) with ``[notifications]
driver = messagingv2`` on a virtual host of the session's RabbitMQ of
its own, heard by a real oslo.messaging notification listener.

The flow is Nova's: the agent's devices appear, ARQs are created, one is
bound (its handle prepared by a job), one fails to bind (its device
refuses every preparation), a device is disabled and enabled, the bound
ARQ is unbound and both are deleted. Each step's notifications arrive in
order, each valid against the schema of its event type, the schema that
doc/notification_samples/ is checked against. Then the notifications'
broker goes away under the conductors (they reach it through a
:class:`BrokerProxy`, which drops their connections and stops
listening): the same flow still works, not held up by retries.
"""

import socket
import threading
import time
import uuid

import jsonschema
from oslo_config import cfg
import oslo_messaging as messaging
import pytest

from cyborg.notifications import payloads
from tests.functional import nova_flow
from tests.functional import servers

HOST = 'notify-compute-1'
GOOD = '0000:40:00.0'
FAILING = '0000:41:00.0'
TIMEOUT = 30


class BrokerProxy:
    """A TCP relay on a loopback port to ``port``; :meth:`cut` drops
    every connection and stops listening, as a broker that died."""

    def __init__(self, port: int):
        self._target = port
        self._server = socket.create_server((servers.LOOPBACK, 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _address = self._server.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection((servers.LOOPBACK,
                                                 self._target))
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(source, sink),
                                 daemon=True).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


class Collector:
    """The listener's endpoint: every notification, as received."""

    def __init__(self):
        self.received: list[dict] = []
        self._lock = threading.Lock()

    def _note(self, priority, publisher_id, event_type, payload):
        with self._lock:
            self.received.append({'priority': priority,
                                  'publisher_id': publisher_id,
                                  'event_type': event_type,
                                  'payload': payload})

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._note('INFO', publisher_id, event_type, payload)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self._note('ERROR', publisher_id, event_type, payload)

    def take(self, count: int, what: str) -> list[dict]:
        """The first ``count`` notifications not taken yet, once they
        are in (and checked against their schema)."""
        nova_flow.wait_until(lambda: len(self.received) >= count, TIMEOUT,
                             '%d notification(s) of %s (got %s)' % (
                                 count, what, self._types()))
        time.sleep(0.3)  # anything more would show as extra
        with self._lock:
            taken, self.received[:] = (self.received[:count],
                                       self.received[count:])
        assert self.received == [], 'more than %d for %s: %s' % (
            count, what, [n['event_type'] for n in self.received])
        for notification in taken:
            _check(notification)
        return taken

    def _types(self):
        with self._lock:
            return [n['event_type'] for n in self.received]


def _check(notification: dict) -> None:
    event = payloads.EVENTS[notification['event_type']]
    assert notification['priority'] == event.priority.upper()
    assert notification['publisher_id'].startswith('cyborg-conductor:')
    jsonschema.Draft202012Validator(
        event.payload.schema(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(notification['payload'])


def _data(notification):
    return notification['payload']['cyborg_object.data']


def _summary(notifications):
    return [(n['event_type'], _data(n)['uuid'], _data(n)['state'])
            for n in notifications]


@pytest.fixture(scope='module')
def notifications_vhost(rabbitmq):
    """The notifications' virtual host: its URL, and the URL of the same
    through a :class:`BrokerProxy` (the conductors'), and the proxy."""
    name = 'notifications-%s' % uuid.uuid4().hex[:8]
    url = rabbitmq.create_vhost(name)
    proxy = BrokerProxy(rabbitmq.port)
    try:
        yield url, url.replace(':%d/' % rabbitmq.port,
                               ':%d/' % proxy.port), proxy
    finally:
        proxy.cut()


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir, notifications_vhost):
    _url, proxied, _proxy = notifications_vhost
    with nova_flow.deployment(
            'notify-flow', postgres, rabbitmq, placement, work_dir,
            [nova_flow.AgentSpec(
                HOST, devices=2, handles=2, handle_type='MDEV',
                fake_driver={'prepare_failures': FAILING})],
            conductor_sections=lambda transport: {'notifications': {
                'driver': 'messagingv2', 'transport_url': proxied}}
    ) as deployment:
        yield deployment


@pytest.fixture(scope='module')
def listener(flow, notifications_vhost):
    url, _proxied, _proxy = notifications_vhost
    conf = cfg.ConfigOpts()
    conf([], project='cyborg-notifications-test')
    transport = messaging.get_notification_transport(conf, url=url)
    collector = Collector()
    server = messaging.get_notification_listener(
        transport, [messaging.Target(topic='versioned_notifications')],
        [collector], executor='threading')
    server.start()
    try:
        yield collector
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


def _rp(flow, address):
    # The fake driver's deployables are named after their device.
    name = address.replace(':', '_').replace('.', '_')
    [device] = [d for d in flow.devices[HOST] if d.address.startswith(name)]
    return device.rp_uuid


def _one_arq(flow, profile):
    [arq] = flow.create_arqs(profile)
    return arq['uuid']


def _device_uuid(flow, address):
    [row] = flow.db_rows('SELECT uuid FROM devices WHERE address = :a',
                         a=address)
    return row[0]


def test_every_notification_of_the_nova_flow(flow, listener):
    # The agent's first report, sent before the listener started: the
    # publisher declared the queue, so nothing was lost.
    created = listener.take(2, 'the devices found')
    assert {n['event_type'] for n in created} == {'device.create'}
    assert {_data(n)['address'] for n in created} == {GOOD, FAILING}

    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    # One request after the other's notification: two requests may go to
    # two conductors, each sending in its own order.
    good = _one_arq(flow, profile)
    assert _summary(listener.take(1, 'a creation')) == [
        ('accelerator_request.create', good, 'Initial')]
    failing = _one_arq(flow, profile)
    assert _summary(listener.take(1, 'another creation')) == [
        ('accelerator_request.create', failing, 'Initial')]

    instance = str(uuid.uuid4())
    response = flow.bind({good: {'hostname': HOST, 'instance_uuid': instance,
                                 'device_rp_uuid': _rp(flow, GOOD)}})
    assert response.status_code == 202, response.text
    start, end = listener.take(2, 'the bind')
    assert _summary([start, end]) == [
        ('accelerator_request.bind.start', good, 'BindStarted'),
        ('accelerator_request.bind.end', good, 'Bound')]
    assert _data(end)['instance_uuid'] == instance
    assert _data(end)['attach_handle_type'] == 'MDEV'

    response = flow.bind({failing: {
        'hostname': HOST, 'instance_uuid': instance,
        'device_rp_uuid': _rp(flow, FAILING)}})
    assert response.status_code == 202, response.text
    # The error travels on the error queue: its order against the info
    # queue's start is the listener's.
    start, error = sorted(listener.take(2, 'the failing bind'),
                          key=lambda n: n['priority'] == 'ERROR')
    assert _summary([start, error]) == [
        ('accelerator_request.bind.start', failing, 'BindStarted'),
        ('accelerator_request.bind.error', failing, 'BindFailing')]
    assert 'simulated failure to prepare' in _data(error)['bind_error']

    device = _device_uuid(flow, GOOD)
    for action, status in (('disable', 'maintaining'),
                           ('enable', 'enabled')):
        response = flow.request('POST', '/v2/devices/%s/%s' % (device,
                                                               action))
        assert response.status_code == 204, response.text
        [changed] = listener.take(1, action)
        assert (changed['event_type'], _data(changed)['uuid'],
                _data(changed)['status']) == ('device.' + action, device,
                                              status)

    response = flow.request(
        'PATCH', '/v2/accelerator_requests', service=True,
        json={good: [{'op': 'remove', 'path': '/' + field}
                     for field in ('hostname', 'device_rp_uuid',
                                   'instance_uuid')]})
    assert response.status_code == 202, response.text
    [unbound] = listener.take(1, 'the unbind')
    assert _summary([unbound]) == [
        ('accelerator_request.unbind', good, 'Unbound')]
    assert _data(unbound)['instance_uuid'] == instance

    response = flow.request('DELETE', '/v2/accelerator_requests',
                            service=True,
                            params={'arqs': '%s,%s' % (good, failing)})
    assert response.status_code == 204, response.text
    assert sorted(_summary(listener.take(2, 'the deletion'))) == sorted([
        ('accelerator_request.delete', good, 'Deleting'),
        ('accelerator_request.delete', failing, 'Deleting')])


def test_a_broken_notification_transport_never_fails_the_flow(
        flow, listener, notifications_vhost):
    _url, _proxied, proxy = notifications_vhost
    # The notifications' broker goes away under the conductors: their
    # connections drop, reconnecting is refused.
    proxy.cut()
    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    started = time.monotonic()
    for _round in range(2):
        arq = _one_arq(flow, profile)
        response = flow.bind({arq: {
            'hostname': HOST, 'instance_uuid': str(uuid.uuid4()),
            'device_rp_uuid': _rp(flow, GOOD)}})
        assert response.status_code == 202, response.text
        assert flow.wait_resolved([arq])[arq]['state'] == 'Bound'
        response = flow.request('DELETE', '/v2/accelerator_requests',
                                service=True, params={'arqs': arq})
        assert response.status_code == 204, response.text
    # Not held up by retries: each notification is tried once.
    assert time.monotonic() - started < 20
    flow.check_alive()
