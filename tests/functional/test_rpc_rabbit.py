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

"""RPC over a real RabbitMQ with cyborg's patches of oslo.messaging.

:func:`cyborg.common.patches.relax_amqp_idle_polling` makes idle
consumers sleep longer between polls; a request or reply must still end
the wait the moment it arrives, after any idle gap.
:func:`cyborg.common.patches.shorten_obsolete_reply_queue_memory`: a
server that gave an answer up answers that caller again within seconds.
"""

import statistics
import threading
import time

from oslo_config import cfg
import oslo_messaging as messaging
from oslo_messaging._drivers import amqpdriver
import pytest

from cyborg import context as cyborg_context
from cyborg.common import patches
from cyborg.common import rpc


class Endpoint:
    def __init__(self):
        self.casts = []
        self.cast_seen = threading.Event()

    def echo(self, context, value):
        return {'value': value, 'project': context.project_id}

    def note(self, context, value):
        self.casts.append(value)
        self.cast_seen.set()


@pytest.fixture
def rabbit_rpc_parts(rabbitmq):
    """An RPC server and client on one cyborg transport: (client,
    endpoint, server, transport)."""
    # oslo.messaging registers some of its options on the global CONF
    # only (tracing, metrics), so a private ConfigOpts will not do.
    conf = cfg.CONF
    rpc.register_opts(conf)
    conf.set_override('transport_url', rabbitmq.url)
    transport = rpc.get_transport(conf)
    endpoint = Endpoint()
    server = rpc.get_server(transport, 'rpc-test', 'host-1', endpoint)
    server.start()
    client = rpc.get_client(transport, 'rpc-test').prepare(timeout=10)
    try:
        yield client, endpoint, server, transport
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
        conf.clear_override('transport_url')


@pytest.fixture
def rabbit_rpc(rabbit_rpc_parts):
    client, endpoint, _server, _transport = rabbit_rpc_parts
    return client, endpoint


def test_calls_after_idle_gaps_are_answered_at_once(rabbit_rpc):
    client, _endpoint = rabbit_rpc
    context = cyborg_context.RequestContext(project_id='p1')
    assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == (
        patches.IDLE_POLL_INTERVAL)
    client.call(context, 'echo', value=0)  # connections and queues set up
    round_trips = []
    # Gaps that land inside the first, second and third idle sleeps of
    # both the server's listener and the client's reply waiter.
    for gap in (0.1, 0.3, 0.7, 1.2, 0.1, 0.6):
        time.sleep(gap)
        started = time.monotonic()
        assert client.call(context, 'echo', value=gap) == {
            'value': gap, 'project': 'p1'}
        round_trips.append(time.monotonic() - started)
    # Waiting for a poll timeout would take at least IDLE_POLL_INTERVAL.
    assert statistics.median(round_trips) < patches.IDLE_POLL_INTERVAL / 2, (
        round_trips)


def test_casts_are_delivered(rabbit_rpc):
    client, endpoint = rabbit_rpc
    context = cyborg_context.RequestContext(project_id='p1')
    time.sleep(0.3)
    client.cast(context, 'note', value='x')
    assert endpoint.cast_seen.wait(10)
    assert endpoint.casts == ['x']


def test_answers_to_a_reply_queue_given_up_on_resume_after_seconds(
        rabbit_rpc_parts):
    """A server that gave an answer up (its reply queue missing for
    ``kombu_missing_consumer_retry_timeout``, as after a broker outage
    of a minute) drops its later answers to that queue unsent only for
    :data:`patches.OBSOLETE_REPLY_QUEUE_SECONDS`, not oslo.messaging's
    minute."""
    client, _endpoint, server, transport = rabbit_rpc_parts
    context = cyborg_context.RequestContext(project_id='p1')
    client.call(context, 'echo', value=0)  # the reply queue exists
    # What the server's listener does when it gives an answer up.
    given_up = time.monotonic()
    server.listener._poll_style_listener._obsolete_reply_queues.add(
        transport._driver._reply_q, 'given-up')
    with pytest.raises(messaging.MessagingTimeout):
        client.prepare(timeout=1).call(context, 'echo', value=1)
    time.sleep(max(0.0, given_up + patches.OBSOLETE_REPLY_QUEUE_SECONDS + 0.5
                   - time.monotonic()))
    assert client.prepare(timeout=5).call(context, 'echo', value=2) == {
        'value': 2, 'project': 'p1'}
