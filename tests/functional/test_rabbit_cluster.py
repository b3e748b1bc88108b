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

"""One node of a three-node RabbitMQ cluster restarts under Nova's cycle.

A :class:`rabbit_cluster.RabbitMQCluster` on the loopback is shared by
the module; nova_flow.py's deployment (two conductors, the API, one
agent) runs on it twice, each on a virtual host of its own: once with
``[oslo_messaging_rabbit] rabbit_quorum_queue = true`` (the RPC topic
queues are quorum queues replicated on the three nodes) and once with
the classic-queue default. Every process is given the three nodes and
connects to one of them (oslo.messaging shuffles them). The test
restarts the node that holds the conductors' topic queue (its leader,
for a quorum queue) while :class:`nova_load.NovaLoad` runs Nova's
cycle. Afterwards:

* no answer other than the flow's own and at most
  :data:`MAX_503` 503s, each with ``Retry-After`` and within
  ``[api] conductor_timeout`` plus :data:`SLACK` (a call whose request
  or answer was on the restarted node is lost; the API answers 503);
* no ARQ stuck (every accepted bind resolved), none left (but those a
  creation answered 503 made: its answer was lost with the node; and on
  quorum queues at most one a client's creation under way at the
  restart made when it was delivered again), no
  handle in use, every accepted bind's event delivered to Nova exactly
  once;
* the agent's reports resume (a device added to its host after the
  restart is seen), both conductors and the agent consume their queues
  again, and cycles complete again.
"""

import json
import time

import pytest

from tests.functional import nova_flow
from tests.functional import nova_load
from tests.functional import outage_scenarios as scenarios
from tests.functional import rabbit_cluster
from tests.functional import servers

HOST = 'cluster-host'
CONDUCTOR_TIMEOUT = 4
# What a 503 may take beyond [api] conductor_timeout (see test_outages).
SLACK = 6
CLIENTS = 4
# A write in flight when the node goes down may answer 503: at most one
# per client and connection failover (two, if the API's first reconnect
# goes to the node still shutting down).
MAX_503 = 2 * CLIENTS
DRIVER = 'oslo_messaging_rabbit'
CONDUCTOR_QUEUE = 'cyborg-conductor'
# What oslo.messaging logs when a connection failed over.
RECONNECTED = 'Reconnected to AMQP server'


@pytest.fixture(scope='module')
def cluster():
    with rabbit_cluster.RabbitMQCluster() as started:
        yield started


@pytest.fixture(scope='module', params=['quorum', 'classic'])
def flow(request, cluster, postgres, placement, work_dir):
    quorum = request.param == 'quorum'
    sections = {DRIVER: {'rabbit_quorum_queue': str(quorum).lower()}}
    agents = [nova_flow.AgentSpec(HOST, devices=2, handles=8)]
    with nova_flow.deployment(
            'cluster-%s' % request.param, postgres, cluster, placement,
            work_dir, agents, conductor_workers=4, sections=sections,
            api_options={'conductor_timeout': CONDUCTOR_TIMEOUT}
    ) as deployment:
        deployment.vhost = deployment.conductor_configs[0]['DEFAULT'][
            'transport_url'].rsplit('/', 1)[1]
        deployment.quorum = quorum
        yield deployment


def _agent_devices(flow):
    return flow.db_rows('SELECT count(*) FROM devices WHERE hostname = :h',
                        h=HOST)[0][0]


def _add_device(flow):
    """One more device in the agent's devices file."""
    path = '%s/%s-devices.json' % (flow.directory, HOST)
    with open(path) as f:
        devices = json.load(f)
    devices.append(dict(devices[-1], address='0000:%02x:00.0'
                        % (0x40 + len(devices))))
    with open(path, 'w') as f:
        json.dump(devices, f)


def test_node_restart_under_nova_cycle(flow, cluster):
    profile = flow.create_profile([{'resources:FPGA': '1',
                                    'trait:' + flow.trait: 'required'}])
    devices = _agent_devices(flow)
    with nova_load.NovaLoad(flow, profile, HOST, clients=CLIENTS) as load:
        node = cluster.queue_node(flow.vhost, CONDUCTOR_QUEUE)
        load.wait_cycles(5)
        restart_started = time.monotonic()
        cluster.restart(node)
        restarted = time.monotonic()
        # Cycles complete again, and the agent reports again.
        load.wait_cycles(5, timeout=60)
        _add_device(flow)
        nova_flow.wait_until(lambda: _agent_devices(flow) == devices + 1,
                             30, 'the agent reporting its new device')
    result = load.finish()
    orphans = scenarios.delete_orphans(flow, result)
    summary = result.summary()
    summary['orphan_arqs'] = len(orphans)
    summary['restart_s'] = round(restarted - restart_started, 1)
    summary['reconnected'] = [p.name for p in flow.processes
                              if RECONNECTED in p.log_text()]
    print('node restart (%s queues): %s' % (
        'quorum' if flow.quorum else 'classic', summary))

    assert result.unexpected() == [], result.unexpected()[:5]
    assert result.bad_503s(CONDUCTOR_TIMEOUT + SLACK) == []
    assert result.count(503) <= MAX_503, summary
    # Reads need no conductor: RabbitMQ's restart does not touch them.
    assert result.count(503, steps=nova_load.READS) == 0, summary
    assert result.stuck == [], summary
    # Only a creation whose answer was lost leaves an ARQ nobody knows,
    # or, on quorum queues, one delivered again: a conductor's
    # acknowledgement lost with the node leaves the message to be
    # delivered at least once more, to the other conductor (at most the
    # one creation each client has under way). The abandoned-ARQ sweep
    # deletes such an ARQ as it deletes the others.
    redelivered = CLIENTS if flow.quorum else 0
    assert len(orphans) <= (result.count(503, steps=('create',))
                            + redelivered), summary
    nova_flow.wait_until(
        lambda: nova_load.database_state(flow)['unsent_events'] == 0, 30,
        'every event delivered')
    assert nova_load.events_once(flow, result) == {}
    state = nova_load.database_state(flow)
    assert (state['arqs'], state['handles_in_use']) == (0, 0), state

    # Every process consumes its queues again: the topic queues, of the
    # configured type, and each conductor's and the agent's own.
    kind = 'quorum' if flow.quorum else 'classic'
    wanted = [CONDUCTOR_QUEUE, 'cyborg-agent', 'cyborg-agent.' + HOST] + [
        '%s.%s-cond-%d' % (CONDUCTOR_QUEUE, flow.name, i) for i in range(2)]

    def unconsumed():
        queues = cluster.queues(flow.vhost)
        return [name for name in wanted
                if queues.get(name, {}).get('consumers', 0) < 1], queues

    # A quorum queue whose leader was on the restarted node gets a new
    # leader, which takes over its consumers; the count it lists can lag
    # behind (seen once: a conductor connected to another node, so never
    # disconnected, listed without its consumer well after the restart).
    nova_flow.wait_until(lambda: not unconsumed()[0], 60,
                         'every queue consumed again')
    missing, queues = unconsumed()
    assert missing == [], (missing, queues)
    assert queues[CONDUCTOR_QUEUE]['type'] == kind, queues
    assert queues['cyborg-agent']['type'] == kind, queues
    # No 500 (oslo.messaging logs its reconnection errors with their
    # tracebacks).
    assert 'Unexpected error handling' not in flow.api.log_text(), (
        servers.tail(flow.api.log, 80))
    flow.check_alive()
