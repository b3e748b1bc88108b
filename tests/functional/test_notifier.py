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

"""The Nova notifier end to end: the outbox on the session's PostgreSQL,
then on its MariaDB (every test runs on both), events posted over real
HTTP to a :class:`FakeNova`.

The notifiers run in this process (one thread each, sharing the DB API's
engine but not connections), so "two conductors" are two
:class:`Notifier` instances with different hosts claiming from the same
database concurrently.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid

from oslo_config import cfg
from oslo_utils import timeutils
import pytest

from cyborg import context as cyborg_context
from cyborg.clients import nova as nova_client
from cyborg.conductor import notifier as notifier_mod
from cyborg.conf import database as database_conf
from cyborg.conf import default as default_conf
from cyborg.conf import nova as nova_conf
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import nova_events
from tests.functional import servers as servers_lib
from tests.functional.fake_nova import fake_nova  # noqa: F401

TIMEOUT = 30


def make_conf(tmp_path, nova_url: str, **nova_options) -> cfg.ConfigOpts:
    """A private conf whose [nova] reaches ``nova_url`` (admin_token)."""
    config = tmp_path / ('cyborg-%s.conf' % uuid.uuid4().hex[:8])
    config.write_text(
        '[nova]\nauth_type = admin_token\nendpoint = %s\ntoken = admin\n'
        'endpoint_override = %s\n' % (nova_url, nova_url))
    conf = cfg.ConfigOpts()
    default_conf.register_opts(conf)
    database_conf.register_opts(conf)
    nova_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[str(config)])
    options = {'poll_interval': 0.1, 'retry_interval': 0.05,
               'retry_max_interval': 0.4, 'timeout': 5}
    options.update(nova_options)
    for name, value in options.items():
        conf.set_override(name, value, group='nova')
    return conf


@pytest.fixture
def database(db_server, tmp_path):
    """A fresh migrated database (PostgreSQL, then MariaDB) the DB API is
    configured for; its engine."""
    name = 'cyborg_notifier_%s' % uuid.uuid4().hex[:12]
    conf = cfg.ConfigOpts()
    default_conf.register_opts(conf)
    database_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('connection', db_server.create_database(name),
                      group='database')
    db_api.configure(conf)
    migration.upgrade()
    assert db_api.get_engine().dialect.name == (
        'mysql' if isinstance(db_server, servers_lib.MariaDBServer)
        else 'postgresql')
    yield db_api.get_engine()
    db_api.get_engine().dispose()
    db_server.drop_database(name)


@pytest.fixture
def context():
    return cyborg_context.get_admin_context()


@pytest.fixture
def notifiers():
    """Notifiers to stop after the test: append them."""
    started: list[notifier_mod.Notifier] = []
    yield started
    for notifier in started:
        notifier.stop()
    for notifier in started:
        notifier.wait(10)
        assert not notifier.running


def make_notifier(notifiers, host, conf):
    notifier = notifier_mod.Notifier(
        host, conf, lambda: nova_client.NovaClient.from_conf(conf))
    notifiers.append(notifier)
    return notifier


def enqueue(engine, n, servers=None, status='completed'):
    """``n`` events, committed in transactions of up to 50 (as binds do);
    their ARQ uuids."""
    arqs = [str(uuid.uuid4()) for _ in range(n)]
    servers = servers or [str(uuid.uuid4()) for _ in range(n)]
    now = timeutils.utcnow()
    for start in range(0, n, 50):
        with engine.begin() as connection:
            nova_events.enqueue_many(connection, [
                (arq, server, status) for arq, server in zip(
                    arqs[start:start + 50], servers[start:start + 50],
                    strict=True)], now)
    return arqs


def wait_until(predicate, timeout=TIMEOUT, what='condition'):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.02)


def assert_exactly_once(nova, arqs, settle=0.5):
    """Every ARQ's event accepted once, also after ``settle`` seconds."""
    nova.wait_for(len(arqs), TIMEOUT, accepted_only=True)
    time.sleep(settle)  # room for any duplicate to show up
    counts = nova.tag_counts()
    assert set(counts) == set(arqs)
    duplicates = {tag: n for tag, n in counts.items() if n != 1}
    assert not duplicates


def test_200_events_delivered_exactly_once(database, context, tmp_path,
                                           fake_nova, notifiers):  # noqa: F811
    conf = make_conf(tmp_path, fake_nova.url)
    arqs = enqueue(database, 200)
    notifier = make_notifier(notifiers, 'conductor-a', conf)
    notifier.start()
    assert_exactly_once(fake_nova, arqs)
    wait_until(lambda: nova_events.pending_count(context) == 0)
    # Batches of events_batch_size (100): one POST each.
    assert [len(r['events']) for r in fake_nova.requests] == [100, 100]
    assert {r['status'] for r in fake_nova.requests} == {200}
    headers = fake_nova.requests[0]['headers']
    assert headers['openstack-api-version'] == 'compute 2.82'
    assert headers['x-openstack-nova-api-version'] == '2.82'
    assert headers['x-auth-token'] == 'admin'
    rows = nova_events.event_list(context)
    assert all(r['sent_at'] and r['attempts'] == 1 and not r['last_error']
               for r in rows)
    assert notifier.sent == 200 and notifier.requests == 2


def test_wake_latency(database, context, tmp_path, fake_nova,  # noqa: F811
                      notifiers):
    """From a bind's commit to Nova receiving its event, after wake()."""
    conf = make_conf(tmp_path, fake_nova.url, poll_interval=30)
    notifier = make_notifier(notifiers, 'conductor-a', conf)
    notifier.start()
    time.sleep(0.3)  # past the first (empty) round: now asleep for 30s
    latencies = []
    for i in range(20):
        arq = enqueue(database, 1)[0]
        committed = time.monotonic()
        notifier.wake()
        event = fake_nova.wait_for(i + 1, 5)[-1]
        assert event['tag'] == arq
        latencies.append(event['arrived'] - committed)
    print('wake -> Nova latency: median %.1f ms, max %.1f ms'
          % (statistics.median(latencies) * 1000, max(latencies) * 1000))
    # Each event came with the wake, not with the next round 30 s away:
    # bounds far under it, so a busy machine does not fail the test (the
    # latency itself is the printed number, not a timed assertion).
    assert statistics.median(latencies) < 1, latencies
    assert max(latencies) < 5, latencies


@pytest.mark.parametrize('refuse', [False, True],
                         ids=['503', 'connection-refused'])
def test_nova_down_then_up(database, context, tmp_path,
                           fake_nova, notifiers, refuse):  # noqa: F811
    conf = make_conf(tmp_path, fake_nova.url, events_batch_size=20)
    fake_nova.down(refuse=refuse)
    notifier = make_notifier(notifiers, 'conductor-a', conf)
    notifier.start()
    arqs = []
    for _ in range(5):
        arqs += enqueue(database, 12)
        notifier.wake()
        time.sleep(0.05)
    # Every event failed more than once while Nova was down.
    wait_until(lambda: all(r['attempts'] >= 2 for r in
                           nova_events.event_list(context)),
               what='every event to be retried')
    assert fake_nova.events == []
    if refuse:
        assert fake_nova.requests == []
    else:
        assert {r['status'] for r in fake_nova.requests} == {503}
    rows = nova_events.event_list(context)
    assert all(r['sent_at'] is None and r['last_error'] for r in rows)
    fake_nova.up()
    assert_exactly_once(fake_nova, arqs)
    wait_until(lambda: nova_events.pending_count(context) == 0)
    assert notifier.sent == len(arqs)


def test_two_conductors_share_the_work(database, context, tmp_path,
                                       fake_nova, notifiers):  # noqa: F811
    conf = make_conf(tmp_path, fake_nova.url, events_batch_size=10)
    arqs = enqueue(database, 400)
    first = make_notifier(notifiers, 'conductor-a', conf)
    second = make_notifier(notifiers, 'conductor-b', conf)
    first.start()
    second.start()
    arqs += enqueue(database, 100)
    first.wake()
    second.wake()
    assert_exactly_once(fake_nova, arqs)
    wait_until(lambda: nova_events.pending_count(context) == 0)
    assert first.sent + second.sent == len(arqs)
    assert first.sent > 0 and second.sent > 0, (first.sent, second.sent)
    assert first.retried == second.retried == 0


def test_claims_skip_rows_locked_by_another_conductor(database, context):
    """A claim in progress does not block another; they never overlap."""
    enqueue(database, 10)
    now = timeutils.utcnow()
    other: dict = {}

    def claim_b():
        other['rows'] = nova_events.claim_due(
            cyborg_context.get_admin_context(), 'conductor-b', now, 30, 5)

    with db_api.main_context_manager.writer.using(context):
        mine = nova_events.claim_due(context, 'conductor-a', now, 30, 5)
        # Still uncommitted: our rows are locked, our lease invisible.
        thread = threading.Thread(target=claim_b)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), 'the second claim blocked'
    assert len(mine) == len(other['rows']) == 5
    assert not ({r['id'] for r in mine} & {r['id'] for r in other['rows']})
    assert nova_events.claim_due(context, 'conductor-c', now, 30, 5) == []


def test_missing_server_rejected_not_retried(database, context, tmp_path,
                                             fake_nova,  # noqa: F811
                                             notifiers):
    conf = make_conf(tmp_path, fake_nova.url)
    servers = [str(uuid.uuid4()) for _ in range(3)]
    fake_nova.set_missing(servers[1])
    arqs = enqueue(database, 3, servers=servers)
    notifier = make_notifier(notifiers, 'conductor-a', conf)
    notifier.start()
    fake_nova.wait_for(3, TIMEOUT)
    wait_until(lambda: nova_events.pending_count(context) == 0)
    # Many retry and poll intervals later: still that one request.
    time.sleep(1)
    notifier.wake()
    time.sleep(0.2)
    assert [r['status'] for r in fake_nova.requests] == [207]
    assert [(e['tag'], e['code']) for e in fake_nova.events] == [
        (arqs[0], 200), (arqs[1], 404), (arqs[2], 200)]
    by_arq = {r['arq_uuid']: r for r in nova_events.event_list(context)}
    assert by_arq[arqs[1]]['last_error'].startswith(
        nova_events.REJECTED_PREFIX)
    assert '404' in by_arq[arqs[1]]['last_error']
    assert by_arq[arqs[0]]['last_error'] is None
    assert all(r['sent_at'] and r['attempts'] == 1 for r in by_arq.values())
    assert (notifier.sent, notifier.rejected, notifier.retried) == (2, 1, 0)


def test_all_servers_missing_404_rejects(database, context, tmp_path,
                                         fake_nova,  # noqa: F811
                                         notifiers):
    conf = make_conf(tmp_path, fake_nova.url)
    servers = [str(uuid.uuid4()) for _ in range(2)]
    fake_nova.set_missing(*servers)
    enqueue(database, 2, servers=servers)
    notifier = make_notifier(notifiers, 'conductor-a', conf)
    notifier.start()
    wait_until(lambda: nova_events.pending_count(context) == 0)
    time.sleep(0.5)
    assert [r['status'] for r in fake_nova.requests] == [404]
    assert notifier.rejected == 2
    assert all(r['last_error'].startswith(nova_events.REJECTED_PREFIX)
               for r in nova_events.event_list(context))
