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

nova_flow.py's deployment (two conductors, the API, one agent) runs on a
RabbitMQ node of the module's own, on the session's database server
(``db_server``: PostgreSQL, then MariaDB) and on the session's Placement,
the last two reached through a :class:`cut_proxy.CutProxy` each, so that
a test can take them away from the deployment without stopping them for
the rest of the session. While :class:`nova_load.NovaLoad` runs Nova's
cycle:

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
``[DEFAULT] service_down_time`` (:data:`SERVICE_DOWN_TIME`: the agent
and conductors are seen down during it) and oslo.messaging's reconnect
backoff (capped at ``rabbit_interval_max`` = 2 s here).

Placement down during a sync: a device added to the host while
Placement is unreachable leaves the host pending (its sync requested,
not done); once Placement is back the host converges by itself, with
one provider per device and none twice.
"""

import json
import time

import pytest
import requests
import sqlalchemy as sa

from tests.functional import cut_proxy
from tests.functional import nova_flow
from tests.functional import nova_load
from tests.functional import servers

HOST = 'outages-host'
CONDUCTOR_TIMEOUT = 4
# What a 503 may take beyond [api] conductor_timeout.
SLACK = 4
SERVICE_DOWN_TIME = 6
OUTAGE = 10
# Seconds after the end of an outage within which a cycle completes.
RECOVERY = 15
CLIENTS = 4


class _Proxied:
    """``server`` (a database server or Placement) as seen through
    ``proxy``: its URLs name the proxy's port."""

    def __init__(self, server, proxy: cut_proxy.CutProxy):
        self._server = server
        self._proxy = proxy

    def _through_proxy(self, url: str) -> str:
        return url.replace(':%d' % self._server.port,
                           ':%d' % self._proxy.port, 1)

    @property
    def url(self) -> str:
        return self._through_proxy(self._server.url)

    def create_database(self, name: str) -> str:
        return self._through_proxy(self._server.create_database(name))

    def __getattr__(self, name):
        return getattr(self._server, name)


@pytest.fixture(scope='module')
def broker():
    with servers.RabbitMQServer() as server:
        yield server


@pytest.fixture(scope='module')
def flow(db_server, broker, placement, work_dir):
    kind = nova_flow.database_kind(db_server)
    agents = [nova_flow.AgentSpec(HOST, devices=2, handles=8)]
    sections = {'DEFAULT': {'service_down_time': SERVICE_DOWN_TIME},
                'oslo_messaging_rabbit': {'rabbit_retry_interval': 1,
                                          'rabbit_retry_backoff': 1,
                                          'rabbit_interval_max': 2}}
    with cut_proxy.CutProxy(db_server.port) as db_proxy, \
            cut_proxy.CutProxy(placement.port) as placement_proxy:
        with nova_flow.deployment(
                'outages-' + kind, _Proxied(db_server, db_proxy), broker,
                _Proxied(placement, placement_proxy), work_dir, agents,
                conductor_workers=4, sections=sections,
                api_options={'conductor_timeout': CONDUCTOR_TIMEOUT}
        ) as deployment:
            deployment.kind = kind
            deployment.db_server = db_server
            deployment.db_proxy = db_proxy
            deployment.placement_proxy = placement_proxy
            deployment.real_placement = placement
            deployment.broker = broker
            yield deployment


@pytest.fixture
def profile(flow):
    return flow.create_profile([{'resources:FPGA': '1',
                                 'trait:' + flow.trait: 'required'}])


def _settled_state(flow):
    """The database's state once every event is out."""
    nova_flow.wait_until(
        lambda: nova_load.database_state(flow)['unsent_events'] == 0, 30,
        'every event delivered')
    return nova_load.database_state(flow)


def _outage(flow, profile, take_down, bring_back, outage=OUTAGE):
    """Run the load, take something down for ``outage`` seconds, bring
    it back; the load's result, when the outage started and ended, and
    the seconds until the first cycle completed after it."""
    before = _settled_state(flow)
    with nova_load.NovaLoad(flow, profile, HOST, clients=CLIENTS) as load:
        load.wait_cycles(5)
        down = time.monotonic()
        take_down()
        time.sleep(outage)
        bring_back()
        up = time.monotonic()
        load.wait_cycles(5, timeout=RECOVERY + 30)
    result = load.finish()
    after_outage = [a.at + a.elapsed for a in result.answers
                    if a.step == 'delete' and a.status == 204
                    and a.at > up]
    recovery = min(after_outage) - up if after_outage else float('inf')
    _check(flow, result, before, recovery)
    return result, down, up, recovery


def _check(flow, result, before, recovery):
    summary = result.summary()
    summary['recovery_s'] = round(recovery, 1)
    print('%s: %s' % (flow.name, summary))
    assert result.unexpected() == [], result.unexpected()[:5]
    assert result.bad_503s(CONDUCTOR_TIMEOUT + SLACK) == [], [
        (a.step, a.elapsed, a.retry_after)
        for a in result.bad_503s(CONDUCTOR_TIMEOUT + SLACK)][:5]
    assert result.stuck == [], summary
    assert recovery < RECOVERY, summary
    assert _settled_state(flow) == before
    assert nova_load.events_once(flow, result) == {}
    assert 'Traceback' not in flow.api.log_text()
    flow.check_alive()


def test_broker_down(flow, profile):
    broker = flow.broker
    result, down, up, _recovery = _outage(flow, profile, broker.stop,
                                          broker.start)
    # Writes need a conductor: they answered 503 during the outage.
    writes = ('create', 'bind', 'delete')
    assert result.count(503, steps=writes, since=down, until=up) > 0
    # Reads need none: every one was served.
    assert result.count(503, steps=nova_load.READS) == 0
    assert result.count(200, steps=nova_load.READS, since=down,
                        until=up) > 0


def test_database_down(flow, profile):
    proxy = flow.db_proxy
    result, down, up, _recovery = _outage(flow, profile, proxy.down,
                                          proxy.up)
    assert result.count(503, since=down, until=up) > 0


def _kill_connections(flow):
    """Kill every connection of the deployment's database on its
    server (the test's own is not one of them); how many."""
    server = flow.db_server
    name = flow.db_url.rsplit('/', 1)[1].split('?', 1)[0]
    engine = sa.create_engine(server.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            if flow.kind == 'postgresql':
                return len(connection.execute(sa.text(
                    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                    'WHERE datname = :name AND pid <> pg_backend_pid()'),
                    {'name': name}).all())
            ids = [row[0] for row in connection.execute(sa.text(
                'SELECT id FROM information_schema.processlist WHERE '
                'db = :name AND id <> connection_id()'), {'name': name})]
            for thread in ids:
                connection.execute(sa.text('KILL %d' % thread))
            return len(ids)
    finally:
        engine.dispose()


def test_every_connection_killed(flow, profile):
    killed = []
    result, _down, _up, _recovery = _outage(
        flow, profile, lambda: killed.append(_kill_connections(flow)),
        lambda: None, outage=1)
    # The API, both conductors (and the test's own reads) had some.
    assert killed[0] >= 3, killed


def _pending(flow):
    requested, done = flow.db_rows(
        'SELECT sync_requested, sync_done FROM services WHERE host = :h '
        "AND binary = 'cyborg-agent'", h=HOST)[0]
    return requested > done


def _providers(flow):
    """Names of the providers of the host's tree in Placement."""
    client = flow.real_placement
    compute = requests.get(
        client.url + '/resource_providers', params={'name': HOST},
        headers=_PLACEMENT, timeout=10).json()['resource_providers']
    (root,) = compute
    tree = requests.get(
        client.url + '/resource_providers',
        params={'in_tree': root['uuid']}, headers=_PLACEMENT,
        timeout=10).json()['resource_providers']
    return sorted(rp['name'] for rp in tree if rp['uuid'] != root['uuid'])


_PLACEMENT = {'X-Auth-Token': 'admin',
              'OpenStack-API-Version': nova_flow.PLACEMENT_VERSION}


def test_placement_down_during_sync(flow):
    before = _providers(flow)
    assert len(before) == len(set(before)) == 2, before
    path = '%s/%s-devices.json' % (flow.directory, HOST)
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
                                 'hostname = :h', h=HOST)[0][0] == 3,
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
                       'ON v.id = d.device_id WHERE v.hostname = :h', h=HOST)
    assert all(rp for (rp,) in rps) and len(rps) == 3, rps
    flow.check_alive()
