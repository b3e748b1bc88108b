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

"""Whole-service outages under Nova's cycle, on PostgreSQL and MariaDB.

outage_scenarios.py's deployment (nova_flow.py's: two conductors, the
API, one agent) runs on a RabbitMQ node of the module's own, on the
session's database server (``db_server``: PostgreSQL, then MariaDB) and
on the session's Placement, the last two reached through a
:class:`cut_proxy.CutProxy` each, so that a test can take them away from
the deployment without stopping them for the rest of the session. While
:class:`nova_load.NovaLoad` runs Nova's cycle:

* the broker is stopped for :data:`OUTAGE` seconds, then started again;
* the database is unreachable (every connection reset, new ones
  refused) for :data:`OUTAGE` seconds;
* every connection of the deployment's database is killed at once on the
  server (``pg_terminate_backend``, MariaDB's ``KILL``).

Each test captures the database's state before and compares it after
(:func:`nova_load.database_state`): during the outage every write
answers 503 with ``Retry-After`` within ``[api] conductor_timeout`` plus
:data:`SLACK`, reads that need neither answer (during a broker outage,
every read); afterwards cycles complete again within :data:`RECOVERY`
seconds, no ARQ is stuck or left, no handle in use, every accepted
bind's event reached Nova exactly once.

:data:`OUTAGE` is shorter than the 60 s of the operator's scenario
(``tools/bench/outages.py`` runs those) but outlasts every timeout on
the path as this deployment sets them: ``[api] conductor_timeout``
(:data:`CONDUCTOR_TIMEOUT`), ``[conductor] agent_timeout`` (3 s),
``[DEFAULT] service_down_time``
(:data:`SERVICE_DOWN_TIME`: the agent and conductors are seen down
during it) and oslo.messaging's reconnect backoff (its first steps: 1,
3 and 5 s), and ``[nova] claim_timeout`` (:data:`CLAIM_TIMEOUT`): the
events a conductor sent just before a database outage, whose delivery
it could not record, outlive their lease, and still reach Nova once
(the other conductors leave them to it for a lease after the database
is back).

A creation whose answer is lost (the API answered 503, the conductor
committed after all) leaves an ARQ nobody knows of: the conductors
delete it as abandoned.

Placement down during a sync: a device added to the host while
Placement is unreachable leaves the host pending (its sync requested,
not done); once Placement is back the host converges by itself, with
one provider per device and none twice.
"""

import datetime
import json
import time

from oslo_utils import timeutils
import pytest
import requests
import sqlalchemy as sa

from tests.functional import nova_flow
from tests.functional import nova_load
from tests.functional import outage_scenarios as scenarios
from tests.functional import servers

CONDUCTOR_TIMEOUT = scenarios.CONDUCTOR_TIMEOUT
# What a 503 may take beyond [api] conductor_timeout: the API's one
# reconnection to RabbitMQ to send (rabbit_retry_interval plus
# kombu_reconnect_delay, 2 s), RabbitMQ and the API's answer on a busy
# test machine.
SLACK = 6
SERVICE_DOWN_TIME = 6
OUTAGE = 10
#: [nova] claim_timeout: shorter than OUTAGE.
CLAIM_TIMEOUT = 6
# Seconds after the end of an outage within which a cycle completes.
RECOVERY = 15


@pytest.fixture(scope='module')
def broker():
    with servers.RabbitMQServer() as server:
        yield server


@pytest.fixture(scope='module')
def flow(db_server, broker, placement, work_dir):
    kind = nova_flow.database_kind(db_server)
    # A host of its own per database: the session's Placement keeps the
    # providers of the other's.
    with scenarios.deployment(
            'outages-' + kind, db_server, broker, placement, work_dir,
            SERVICE_DOWN_TIME, host='outages-%s' % kind,
            claim_timeout=CLAIM_TIMEOUT) as deployment:
        yield deployment


@pytest.fixture
def profile(flow):
    return flow.create_profile([{'resources:FPGA': '1',
                                 'trait:' + flow.trait: 'required'}])


def _check(flow, outage):
    """What every outage must leave as it found it."""
    result = outage.result
    summary = outage.summary()
    print('%s: %s' % (flow.name, summary))
    assert result.unexpected() == [], result.unexpected()[:5]
    bad = result.bad_503s(CONDUCTOR_TIMEOUT + SLACK)
    assert bad == [], [(a.step, a.elapsed, a.retry_after) for a in bad][:5]
    assert result.stuck == [], summary
    assert outage.recovery < RECOVERY, summary
    # Only a creation whose answer was lost leaves an ARQ nobody knows.
    assert outage.orphans <= result.count(503, steps=('create',)), summary
    assert outage.after == outage.before, nova_load.leftovers(flow)
    assert outage.events_wrong == {}, summary
    # No 500 (oslo.messaging logs its reconnection errors with their
    # tracebacks).
    assert 'Unexpected error handling' not in flow.api.log_text(), (
        servers.tail(flow.api.log, 80))
    flow.check_alive()


def _agent_seen(flow):
    return flow.db_rows('SELECT last_seen_up FROM services WHERE host = '
                        ':h', h=flow.host)[0][0]


def test_broker_down(flow, profile):
    outage = scenarios.broker_down(flow, profile, OUTAGE)
    _check(flow, outage)
    # The agent's heartbeats reach a conductor again (over RabbitMQ).
    seen = _agent_seen(flow)
    nova_flow.wait_until(lambda: _agent_seen(flow) != seen, 30,
                         'a heartbeat of the agent after the outage')
    result = outage.result
    # Writes need a conductor: they answered 503 during the outage.
    assert result.count(503, steps=scenarios.WRITES, since=outage.down,
                        until=outage.up) > 0
    # Reads need none: every one was served.
    assert result.count(503, steps=nova_load.READS) == 0
    assert result.count(200, steps=nova_load.READS, since=outage.down,
                        until=outage.up) > 0


def test_database_down(flow, profile):
    outage = scenarios.database_down(flow, profile, OUTAGE)
    _check(flow, outage)
    assert outage.result.count(503, since=outage.down, until=outage.up) > 0


def test_every_connection_killed(flow, profile):
    outage = scenarios.connections_killed(flow, profile)
    _check(flow, outage)
    # The API's and both conductors' connections at least.
    assert outage.killed >= 3, outage.killed
    # A read whose connection was killed is read again on a new one.
    assert outage.result.count(503, steps=nova_load.READS) == 0


def _arqs(flow):
    return {row.uuid: row.state for row in flow.db_rows(
        'SELECT uuid, state FROM extended_accelerator_requests')}


def test_a_creation_whose_answer_is_lost_is_deleted_as_abandoned(
        flow, profile):
    """A conductor commits a creation after the API answered 503 (here
    it waited on a lock past ``[api] conductor_timeout``): nobody learns
    the ARQ's uuid, Nova never binds it, and the conductors delete it
    once it is ``[conductor] abandoned_arq_timeout`` old."""
    known = _arqs(flow)
    with flow.engine.connect() as connection, connection.begin():
        # The insert checks its profile's row (a foreign key): it waits.
        connection.execute(sa.text(
            'SELECT id FROM device_profiles WHERE name = :name FOR UPDATE'),
            {'name': profile})
        response = flow.request('POST', '/v2/accelerator_requests',
                                json={'device_profile_name': profile})
        assert response.status_code == 503, response.text
    orphans = nova_flow.wait_until(
        lambda: [uuid for uuid in _arqs(flow) if uuid not in known],
        30, 'the creation committed after its 503')
    assert [_arqs(flow)[uuid] for uuid in orphans] == ['Initial']
    # Created abandoned_arq_timeout ago, rather than waiting that long.
    with flow.engine.begin() as connection:
        connection.execute(
            sa.text('UPDATE extended_accelerator_requests SET created_at '
                    '= :at WHERE uuid = :uuid'),
            {'at': timeutils.utcnow() - datetime.timedelta(
                seconds=scenarios.ABANDONED_TIMEOUT + 1),
             'uuid': orphans[0]})
    nova_flow.wait_until(lambda: orphans[0] not in _arqs(flow), 30,
                         'the abandoned ARQ deleted by a conductor')
    logs = ''.join(c.log_text() for c in flow.conductors)
    assert ('Deleted 1 ARQs never bound within %ds of their creation'
            % scenarios.ABANDONED_TIMEOUT) in logs
    assert orphans[0] in logs
    assert _arqs(flow) == known


def _pending(flow):
    # The agent is the only service on its host.
    requested, done = flow.db_rows(
        'SELECT sync_requested, sync_done FROM services WHERE host = :h',
        h=flow.host)[0]
    return requested > done


def _providers(flow):
    """Names of the providers of the host's tree in Placement."""
    placement = flow.real_placement
    compute = requests.get(
        placement.url + '/resource_providers', params={'name': flow.host},
        headers=_PLACEMENT, timeout=10).json()['resource_providers']
    (root,) = compute
    tree = requests.get(
        placement.url + '/resource_providers',
        params={'in_tree': root['uuid']}, headers=_PLACEMENT,
        timeout=10).json()['resource_providers']
    return sorted(rp['name'] for rp in tree if rp['uuid'] != root['uuid'])


_PLACEMENT = {'X-Auth-Token': 'admin',
              'OpenStack-API-Version': nova_flow.PLACEMENT_VERSION}


def test_placement_down_during_sync(flow):
    before = _providers(flow)
    assert len(before) == len(set(before)) == 2, before
    path = '%s/%s-devices.json' % (flow.directory, flow.host)
    with open(path) as f:
        devices = json.load(f)
    flow.placement_proxy.down()
    try:
        devices.append(dict(devices[-1], address='0000:%02x:00.0'
                            % (0x40 + len(devices))))
        with open(path, 'w') as f:
            json.dump(devices, f)
        nova_flow.wait_until(
            lambda: flow.db_rows('SELECT count(*) FROM devices WHERE '
                                 'hostname = :h', h=flow.host)[0][0] == 3,
            30, 'the new device in the database')
        # The sync fails and is not given up: the host stays pending.
        assert _pending(flow)
        time.sleep(OUTAGE / 2)
        assert _pending(flow)
    finally:
        flow.placement_proxy.up()
    nova_flow.wait_until(lambda: not _pending(flow), RECOVERY + 15,
                         'the host in sync with Placement')
    after = _providers(flow)
    assert len(after) == len(set(after)) == 3, after
    assert set(before) < set(after)
    rps = flow.db_rows('SELECT rp_uuid FROM deployables d JOIN devices v '
                       'ON v.id = d.device_id WHERE v.hostname = :h',
                       h=flow.host)
    assert all(rp for (rp,) in rps) and len(rps) == 3, rps
    flow.check_alive()
