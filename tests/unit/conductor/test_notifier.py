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

"""Unit tests of the Nova event outbox (cyborg.db.nova_events, on each
database) and of its notifier (cyborg.conductor.notifier, with a fake
client)."""

from __future__ import annotations

import contextlib
import datetime
import random
import threading
import time
import uuid

from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_utils import timeutils
import pytest

from cyborg.clients import nova as nova_client
from cyborg.conductor import notifier as notifier_mod
from cyborg.conf import nova as nova_conf
from cyborg.db import api as db_api
from cyborg.db import nova_events

T0 = datetime.datetime(2024, 1, 1, 12, 0, 0)


def seconds(n: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=n)


@db_api.connection_writer
def _enqueue(context, items, now, status):
    nova_events.enqueue_many(context.connection, [
        (arq, server, status) for arq, server in items], now)


def enqueue(context, n=1, now=T0, status='completed', arq=None):
    """``n`` events in one transaction; their ARQ uuids."""
    arqs = [arq or str(uuid.uuid4()) for _ in range(n)]
    _enqueue(context, [(a, str(uuid.uuid4())) for a in arqs], now, status)
    return arqs


def rows(context):
    return nova_events.event_list(context)


def poll(predicate, timeout=5.0):
    """Wait until ``predicate()`` is true (the notifier settles a batch
    just after the client returned)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.005)


def settled(context, attempts=1):
    poll(lambda: all(r['attempts'] >= attempts for r in rows(context)))


# The outbox ------------------------------------------------------------------


def test_enqueue_joins_the_callers_transaction(database, admin_context):
    with pytest.raises(RuntimeError):
        with database.begin() as connection:
            nova_events.enqueue_many(
                connection, [('arq-1', 'vm-1', 'completed')], T0)
            raise RuntimeError('bind failed')
    assert rows(admin_context) == []
    with database.begin() as connection:
        nova_events.enqueue_many(connection, [('arq-1', 'vm-1', 'failed')], T0)
    (row,) = rows(admin_context)
    assert row['arq_uuid'] == 'arq-1'
    assert row['instance_uuid'] == 'vm-1'
    assert row['status'] == 'failed'
    assert row['attempts'] == 0
    assert row['next_attempt_at'] == T0
    assert row['sent_at'] is None and row['claimed_by'] is None


def test_enqueue_checks_status(database):
    with database.begin() as connection, pytest.raises(ValueError):
        nova_events.enqueue_many(connection, [('arq-1', 'vm-1', 'bound')], T0)


def test_claim_due_leases_oldest_first(database, admin_context):
    enqueue(admin_context, 3, now=T0)
    enqueue(admin_context, 2, now=T0 - seconds(5))
    enqueue(admin_context, 1, now=T0 + seconds(5))  # not due yet
    claimed = nova_events.claim_due(admin_context, 'c1', T0, 30, limit=4)
    assert len(claimed) == 4
    assert [r['next_attempt_at'] for r in claimed] == [
        T0 - seconds(5)] * 2 + [T0] * 2
    assert {r['claimed_by'] for r in claimed} == {'c1'}
    assert {r['claimed_until'] for r in claimed} == {T0 + seconds(30)}
    # The rest, not the leased ones, for another claimer.
    other = nova_events.claim_due(admin_context, 'c2', T0, 30, limit=10)
    assert len(other) == 1
    assert not {r['id'] for r in other} & {r['id'] for r in claimed}
    assert nova_events.claim_due(admin_context, 'c3', T0, 30, 10) == []
    # Leases expire; the future event becomes due.
    later = nova_events.claim_due(admin_context, 'c3', T0 + seconds(31),
                                  30, limit=10)
    assert len(later) == 6
    assert nova_events.pending_count(admin_context) == 6


def test_claim_due_without_take_over_leaves_others_run_out_leases(
        database, admin_context):
    """Not taking over: an event whose lease by another conductor ran
    out stays that conductor's; its own run-out leases, and events
    nobody leased, are claimed as usual."""
    enqueue(admin_context, 2)
    (theirs,) = nova_events.claim_due(admin_context, 'c1', T0, 30, 1)
    (mine,) = nova_events.claim_due(admin_context, 'c2', T0, 30, 1)
    enqueue(admin_context, 1, now=T0 + seconds(31))
    later = T0 + seconds(31)
    claimed = nova_events.claim_due(admin_context, 'c2', later, 30, 10,
                                    take_over=False)
    assert mine['id'] in {r['id'] for r in claimed}
    assert theirs['id'] not in {r['id'] for r in claimed}
    assert len(claimed) == 2
    # Taking over, it is claimed.
    (taken,) = nova_events.claim_due(admin_context, 'c2', later, 30, 10)
    assert taken['id'] == theirs['id']


def test_lease_guard_skips_rows_claimed_meanwhile(database, admin_context):
    # What a concurrent claimer between our SELECT and our UPDATE looks
    # like (on SQLite, which has no SKIP LOCKED): one of the selected rows
    # is leased already.
    enqueue(admin_context, 2)
    first, second = (r['id'] for r in rows(admin_context))
    (taken,) = nova_events.claim_due(admin_context, 'other', T0, 30, 1)
    assert taken['id'] == first
    with db_api.main_context_manager.writer.using(admin_context) as session:
        leased = nova_events._lease(session, [first, second], 'me', T0,
                                    T0 + seconds(30),
                                    nova_events._claimable(T0))
    assert [r['id'] for r in leased] == [second]
    assert leased[0]['claimed_by'] == 'me'
    owners = {r['id']: r['claimed_by'] for r in rows(admin_context)}
    assert owners == {first: 'other', second: 'me'}


def test_mark_sent(database, admin_context):
    enqueue(admin_context, 2)
    claimed = nova_events.claim_due(admin_context, 'c1', T0, 30, 10)
    ids = [r['id'] for r in claimed]
    assert nova_events.mark_sent(admin_context, ids, T0 + seconds(1)) == 2
    for row in rows(admin_context):
        assert row['sent_at'] == T0 + seconds(1)
        assert row['attempts'] == 1
        assert row['claimed_by'] is None and row['claimed_until'] is None
        assert row['last_error'] is None
    assert nova_events.pending_count(admin_context) == 0
    assert nova_events.claim_due(admin_context, 'c1', T0 + seconds(99), 30,
                                 10) == []
    # Finished rows are never changed again.
    assert nova_events.mark_retry(admin_context, ids, T0, 'x', T0) == 0
    assert nova_events.mark_sent(admin_context, [], T0) == 0


def test_mark_retry(database, admin_context):
    enqueue(admin_context, 1)
    (row,) = nova_events.claim_due(admin_context, 'c1', T0, 30, 10)
    assert nova_events.mark_retry(admin_context, [row['id']], T0,
                                  'HTTP 503', T0 + seconds(2)) == 1
    (row,) = rows(admin_context)
    assert row['attempts'] == 1
    assert row['claimed_by'] is None and row['claimed_until'] is None
    assert row['next_attempt_at'] == T0 + seconds(2)
    assert row['last_error'] == 'HTTP 503'
    assert row['sent_at'] is None
    assert nova_events.claim_due(admin_context, 'c1', T0 + seconds(1), 30,
                                 10) == []
    (again,) = nova_events.claim_due(admin_context, 'c1', T0 + seconds(2),
                                     30, 10)
    assert again['attempts'] == 1
    nova_events.mark_sent(admin_context, [again['id']], T0 + seconds(3))
    (row,) = rows(admin_context)
    assert row['attempts'] == 2 and row['last_error'] is None


def test_mark_rejected_is_final(database, admin_context):
    enqueue(admin_context, 1)
    (row,) = nova_events.claim_due(admin_context, 'c1', T0, 30, 10)
    nova_events.mark_rejected(admin_context, [row['id']], T0, 'code 404')
    (row,) = rows(admin_context)
    assert row['sent_at'] == T0
    assert row['last_error'] == nova_events.REJECTED_PREFIX + 'code 404'
    assert nova_events.pending_count(admin_context) == 0
    assert nova_events.claim_due(admin_context, 'c1', T0 + seconds(999),
                                 30, 10) == []


def test_release_keeps_attempts(database, admin_context):
    enqueue(admin_context, 1)
    (row,) = nova_events.claim_due(admin_context, 'c1', T0, 30, 10)
    nova_events.release(admin_context, [row['id']], T0)
    (again,) = nova_events.claim_due(admin_context, 'c2', T0, 30, 10)
    assert again['attempts'] == 0 and again['claimed_by'] == 'c2'


# The notifier ----------------------------------------------------------------


class FakeClient:
    """Records batches; answers per tag from ``outcomes`` (default sent)."""

    def __init__(self):
        self.calls: list[tuple[float, list[dict]]] = []
        self.outcomes: dict[str, str] = {}
        self.default = nova_client.SENT
        self.error: Exception | None = None
        self.arrived = threading.Condition()

    def send_events(self, events):
        with self.arrived:
            self.calls.append((time.monotonic(), list(events)))
            self.arrived.notify_all()
        if self.error is not None:
            raise self.error
        return {e['tag']: nova_client.EventResult(
            self.outcomes.get(e['tag'], self.default), 'fake detail')
            for e in events}

    def tags(self):
        return [e['tag'] for _t, events in self.calls for e in events]

    def wait_calls(self, n, timeout=5.0):
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.calls) >= n,
                                         timeout), self.calls
            return list(self.calls)


@pytest.fixture
def nova_opts():
    conf = cfg.ConfigOpts()
    nova_conf.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override('poll_interval', 30, group='nova')
    conf.set_override('retry_interval', 0.2, group='nova')
    conf.set_override('retry_max_interval', 0.3, group='nova')
    return conf


@pytest.fixture
def client():
    return FakeClient()


@pytest.fixture
def notifier(database, nova_opts, client):
    instance = notifier_mod.Notifier('conductor-1', nova_opts,
                                     lambda: client)
    yield instance
    instance.stop()
    instance.wait(10)
    assert not instance.running


def test_backoff_doubles_with_jitter_and_cap():
    rng = random.Random(1)
    for attempts, full in ((1, 1), (2, 2), (3, 4), (6, 32), (7, 60),
                           (500, 60)):
        for _ in range(20):
            delay = notifier_mod.backoff(attempts, 1, 60, rng)
            assert full * 0.8 <= delay <= full


def test_run_once_one_post_per_batch(database, admin_context, nova_opts,
                                     client):
    nova_opts.set_override('events_batch_size', 10, group='nova')
    arqs = enqueue(admin_context, 25, now=timeutils.utcnow())
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client)
    assert [instance.run_once() for _ in range(4)] == [10, 10, 5, 0]
    assert [len(events) for _t, events in client.calls] == [10, 10, 5]
    assert client.tags() == arqs
    event = client.calls[0][1][0]
    assert event == {'name': 'accelerator-request-bound', 'tag': arqs[0],
                     'server_uuid': rows(admin_context)[0]['instance_uuid'],
                     'status': 'completed'}
    assert nova_events.pending_count(admin_context) == 0


def test_run_once_sends_one_event_per_arq_in_order(database, admin_context,
                                                   nova_opts, client):
    now = timeutils.utcnow()
    enqueue(admin_context, 1, now=now, status='failed', arq='arq-1')
    enqueue(admin_context, 1, now=now, status='completed', arq='arq-1')
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client)
    assert instance.run_once() == 2
    assert instance.run_once() == 1
    assert [events[0]['status'] for _t, events in client.calls] == [
        'failed', 'completed']
    assert nova_events.pending_count(admin_context) == 0


def test_wake_delivers_promptly(notifier, client, admin_context):
    notifier.start()
    time.sleep(0.2)  # the first (empty) round is over; now it sleeps 30s
    latencies = []
    for _ in range(5):
        arq = enqueue(admin_context, 1, now=timeutils.utcnow())[0]
        woken = time.monotonic()
        notifier.wake()
        arrived, events = client.wait_calls(len(client.calls) + 1)[-1]
        assert events[0]['tag'] == arq
        latencies.append(arrived - woken)
    # Woken, not the next round: that is 30 s away. A bound far under it
    # shows the wake without timing the machine (a busy one takes 0.1 s).
    assert max(latencies) < 5, latencies


@db_api.connection_writer
def _enqueue_leased(context, n, owner, now, lease_seconds):
    return nova_events.enqueue_many(
        context.connection, [(str(uuid.uuid4()), str(uuid.uuid4()),
                              'completed') for _ in range(n)],
        now, owner, now + seconds(lease_seconds))


def test_enqueue_many_leases_to_the_owner(database, admin_context):
    written = _enqueue_leased(admin_context, 3, 'c1', T0, 30)
    assert [r['id'] for r in written] == [r['id'] for r in rows(
        admin_context)]
    assert {(r['claimed_by'], r['claimed_until'], r['attempts'])
            for r in rows(admin_context)} == {('c1', T0 + seconds(30), 0)}
    # Leased: nobody else claims them before the lease ends.
    assert nova_events.claim_due(admin_context, 'c2', T0, 30, 10) == []
    assert len(nova_events.claim_due(admin_context, 'c2', T0 + seconds(31),
                                     30, 10)) == 3


def test_delivered_rows_go_out_without_a_claim(database, admin_context,
                                               nova_opts, client,
                                               monkeypatch):
    now = timeutils.utcnow()
    mine = _enqueue_leased(admin_context, 2, 'c1', now, 30)
    expired = _enqueue_leased(admin_context, 1, 'c1', now - seconds(60), 30)
    others = _enqueue_leased(admin_context, 1, 'c2', now, 30)
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client)
    claims = []
    real_claim = nova_events.claim_due
    monkeypatch.setattr(
        nova_events, 'claim_due',
        lambda *a, **k: claims.append(a) or real_claim(*a, **k))
    instance.deliver(mine + expired + others)
    assert instance.run_once() == 2
    assert claims == []
    assert client.tags() == [r['arq_uuid'] for r in mine]
    # The expired lease is anyone's (ours included) through claim_due;
    # the other conductor's row is left to it.
    assert instance.run_once() == 1
    assert len(claims) == 1
    assert client.tags()[-1] == expired[0]['arq_uuid']
    assert nova_events.pending_count(admin_context) == 1
    assert others[0]['arq_uuid'] not in client.tags()


def test_deliver_wakes_the_thread(notifier, client, admin_context):
    notifier.start()
    time.sleep(0.2)  # the first (empty) round is over; now it sleeps 30s
    rows_ = _enqueue_leased(admin_context, 1, 'conductor-1',
                            timeutils.utcnow(), 30)
    delivered = time.monotonic()
    notifier.deliver(rows_)
    arrived, events = client.wait_calls(1)[-1]
    assert events[0]['tag'] == rows_[0]['arq_uuid']
    assert arrived - delivered < 5  # woken: the next round is 30 s away
    settled(admin_context)
    assert nova_events.pending_count(admin_context) == 0


def test_events_within_the_send_interval_go_in_one_request(
        nova_opts, notifier, client, admin_context):
    # The longest interval allowed, so the bounds are far apart.
    nova_opts.set_override('send_interval', 1.0, group='nova')
    notifier.start()
    time.sleep(0.2)  # the first (empty) round sent nothing
    delivered = time.monotonic()
    first = _deliver_one(notifier, admin_context)['arq_uuid']
    first_sent, events = client.wait_calls(1)[0]
    # Nothing was sent within the interval: the event goes at once.
    assert [e['tag'] for e in events] == [first]
    assert first_sent - delivered < 0.6
    gathered = [_deliver_one(notifier, admin_context)['arq_uuid']
                for _ in range(3)]
    sent, events = client.wait_calls(2)[1]
    # The next three waited for the interval's end and went together.
    assert sorted(e['tag'] for e in events) == sorted(gathered)
    assert sent - first_sent >= 0.95
    time.sleep(1.1)
    delivered = time.monotonic()
    last = _deliver_one(notifier, admin_context)['arq_uuid']
    sent, events = client.wait_calls(3)[2]
    assert [e['tag'] for e in events] == [last]
    assert sent - delivered < 0.6


def test_a_full_batch_does_not_wait_for_the_send_interval(
        nova_opts, notifier, client, admin_context):
    nova_opts.set_override('send_interval', 1.0, group='nova')
    nova_opts.set_override('events_batch_size', 2, group='nova')
    notifier.start()
    time.sleep(0.2)
    _deliver_one(notifier, admin_context)
    first_sent = client.wait_calls(1)[0][0]
    rows_ = _enqueue_leased(admin_context, 2, 'conductor-1',
                            timeutils.utcnow(), 30)
    notifier.deliver(rows_)
    sent, events = client.wait_calls(2)[1]
    assert len(events) == 2
    assert sent - first_sent < 0.8  # not the 1 s interval


def test_start_sends_what_is_due(database, admin_context, notifier, client):
    arqs = enqueue(admin_context, 3, now=timeutils.utcnow())
    notifier.start()
    client.wait_calls(1)
    assert client.tags() == arqs


def test_full_batches_loop_without_waiting(database, admin_context,
                                           nova_opts, notifier, client):
    nova_opts.set_override('events_batch_size', 100, group='nova')
    arqs = enqueue(admin_context, 250, now=timeutils.utcnow())
    started = time.monotonic()
    notifier.start()
    calls = client.wait_calls(3)
    assert calls[-1][0] - started < 5  # not 2 poll intervals (60s)
    assert [len(events) for _t, events in calls] == [100, 100, 50]
    assert client.tags() == arqs


def test_retry_backs_off_then_sends(database, admin_context, nova_opts,
                                    notifier, client):
    # Long enough that the checks before the wake below cannot outlast
    # it on a loaded machine (they are a few database reads).
    nova_opts.set_override('retry_interval', 2, group='nova')
    nova_opts.set_override('retry_max_interval', 4, group='nova')
    arq = enqueue(admin_context, 1, now=timeutils.utcnow())[0]
    client.default = nova_client.RETRY
    notifier.start()
    client.wait_calls(1)
    settled(admin_context)
    (row,) = rows(admin_context)
    assert row['attempts'] == 1 and row['last_error'] == 'fake detail'
    delay = (row['next_attempt_at'] - row['updated_at']).total_seconds()
    assert 1.6 <= delay <= 2 + 1e-6  # retry_interval less jitter
    notifier.wake()  # not due yet: nothing is sent
    time.sleep(0.05)
    assert len(client.calls) == 1
    client.default = nova_client.SENT
    # Due again after the backoff; a wake (or the poll) picks it up.
    time.sleep(max(0.0, (row['next_attempt_at']
                         - timeutils.utcnow()).total_seconds()) + 0.05)
    notifier.wake()
    calls = client.wait_calls(2)
    assert calls[1][1][0]['tag'] == arq
    settled(admin_context, 2)
    (row,) = rows(admin_context)
    assert row['sent_at'] is not None and row['attempts'] == 2


def test_second_retry_waits_twice_as_long(database, admin_context,
                                          nova_opts, client):
    nova_opts.set_override('retry_interval', 1, group='nova')
    nova_opts.set_override('retry_max_interval', 60, group='nova')
    clock = [T0]
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client,
                                     clock=lambda: clock[0])
    client.default = nova_client.RETRY
    enqueue(admin_context, 1, now=T0)
    expected = [1, 2, 4, 8]
    for full in expected:
        assert instance.run_once() == 1
        (row,) = rows(admin_context)
        delay = (row['next_attempt_at'] - clock[0]).total_seconds()
        assert full * 0.8 <= delay <= full
        clock[0] = row['next_attempt_at'] - seconds(0.01)
        assert instance.run_once() == 0  # not due yet
        clock[0] = row['next_attempt_at']
    assert rows(admin_context)[0]['attempts'] == len(expected)


@db_api.connection_writer
def _enqueue_repeated(context, arq, now, until):
    nova_events.enqueue_many(context.connection,
                             [(arq, str(uuid.uuid4()), 'failed')], now,
                             repeat_until=until)


@pytest.mark.parametrize('answer', [nova_client.SENT, nova_client.REJECTED,
                                    nova_client.RETRY])
def test_a_failure_is_repeated_whatever_nova_answers(
        database, admin_context, nova_opts, client, answer):
    """Nova drops an event no compute waits for (200) and refuses one for
    an instance without a host (422): the failure of a bind is sent again
    until its repeat_until, backing off up to repeat_max_interval."""
    nova_opts.set_override('retry_interval', 1, group='nova')
    nova_opts.set_override('retry_max_interval', 60, group='nova')
    nova_opts.set_override('repeat_max_interval', 5, group='nova')
    clock = [T0]
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client,
                                     clock=lambda: clock[0])
    client.default = answer
    _enqueue_repeated(admin_context, 'arq-1', T0, T0 + seconds(20))
    for full in (1, 2, 4, 5, 5):
        assert instance.run_once() == 1
        (row,) = rows(admin_context)
        assert row['sent_at'] is None
        assert row['last_error'].startswith('repeated until Nova acts')
        delay = (row['next_attempt_at'] - clock[0]).total_seconds()
        assert full * 0.8 <= delay <= full
        clock[0] = row['next_attempt_at']
    assert instance.repeated == 5
    # Past repeat_until Nova's answer counts again.
    clock[0] = T0 + seconds(21)
    assert instance.run_once() == 1
    (row,) = rows(admin_context)
    assert (row['sent_at'] is None) == (answer == nova_client.RETRY)
    assert row['attempts'] == 6


def test_an_instance_without_a_host_gets_its_event_later(
        database, admin_context, nova_opts, client):
    """422 (no host yet) is retried, backing off up to
    repeat_max_interval, until Nova takes it or unhosted_retry_timeout
    after the event was queued; then it is dropped."""
    nova_opts.set_override('retry_interval', 1, group='nova')
    nova_opts.set_override('repeat_max_interval', 2, group='nova')
    nova_opts.set_override('unhosted_retry_timeout', 10, group='nova')
    clock = [T0]
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client,
                                     clock=lambda: clock[0])
    taken, dropped = enqueue(admin_context, 2, now=T0)
    client.default = nova_client.UNHOSTED
    for full in (1, 2, 2):
        assert instance.run_once() == 2
        for row in rows(admin_context):
            assert row['sent_at'] is None
            delay = (row['next_attempt_at'] - clock[0]).total_seconds()
            assert full * 0.8 <= delay <= full
        clock[0] += seconds(full)
    client.outcomes[taken] = nova_client.SENT  # the instance has a host
    clock[0] = T0 + seconds(11)  # past unhosted_retry_timeout
    assert instance.run_once() == 2
    by_arq = {r['arq_uuid']: r for r in rows(admin_context)}
    assert by_arq[taken]['last_error'] is None
    assert by_arq[taken]['sent_at'] is not None
    assert by_arq[dropped]['last_error'].startswith(
        nova_events.REJECTED_PREFIX)


def test_cancelled_repeats_are_not_sent_again(database, admin_context,
                                              nova_opts, client):
    clock = [T0]
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client,
                                     clock=lambda: clock[0])
    _enqueue_repeated(admin_context, 'arq-1', T0, T0 + seconds(300))
    enqueue(admin_context, 1, now=T0, status='completed', arq='arq-2')
    assert instance.run_once() == 2
    with database.begin() as connection:
        nova_events.cancel_repeats(connection, ['arq-1', 'arq-2'])
    # The delivered event of arq-2 is history; arq-1's repeat is gone.
    assert [r['arq_uuid'] for r in rows(admin_context)] == ['arq-2']
    clock[0] = T0 + seconds(60)
    assert instance.run_once() == 0


def test_rejected_events_are_never_retried(database, admin_context,
                                           notifier, client):
    arqs = enqueue(admin_context, 3, now=timeutils.utcnow())
    client.outcomes[arqs[1]] = nova_client.REJECTED
    notifier.start()
    client.wait_calls(1)
    settled(admin_context)
    time.sleep(0.5)  # longer than any retry_interval here
    notifier.wake()
    time.sleep(0.1)
    assert len(client.calls) == 1
    by_arq = {r['arq_uuid']: r for r in rows(admin_context)}
    assert by_arq[arqs[1]]['last_error'] == (
        nova_events.REJECTED_PREFIX + 'fake detail')
    assert all(r['sent_at'] is not None for r in by_arq.values())
    assert by_arq[arqs[0]]['last_error'] is None
    assert notifier.rejected == 1 and notifier.sent == 2


def test_failing_client_never_kills_the_thread(database, admin_context,
                                               nova_opts, client, caplog):
    built = []

    def factory():
        built.append(1)
        if len(built) == 1:
            raise RuntimeError('no Nova configured yet')
        return client

    nova_opts.set_override('poll_interval', 0.05, group='nova')
    instance = notifier_mod.Notifier('c1', nova_opts, factory)
    arq = enqueue(admin_context, 1, now=timeutils.utcnow())[0]
    client.error = RuntimeError('boom')
    instance.start()
    try:
        client.wait_calls(1)
        settled(admin_context)
        # The factory failed, then send_events raised: a retry, with the
        # client built anew.
        (row,) = rows(admin_context)
        assert row['sent_at'] is None and row['attempts'] == 1
        assert 'boom' in row['last_error']
        client.error = None
        calls = client.wait_calls(2)
        assert calls[1][1][0]['tag'] == arq
        assert instance.running
        assert len(built) >= 3
        assert 'Cannot build the Nova client' in caplog.text
        assert 'no Nova configured yet' in caplog.text
        poll(lambda: nova_events.pending_count(admin_context) == 0)
    finally:
        instance.stop()
        instance.wait(10)


def test_no_lease_is_taken_over_for_a_lease_after_a_failure(
        database, admin_context, nova_opts, client, monkeypatch):
    """While the database fails, the notifier tries again at least every
    third of ``[nova] claim_timeout``; once it works again, the notifier
    leaves the events whose lease by another conductor ran out to that
    conductor for ``claim_timeout`` (it records what it sent before the
    outage first thing), then takes them over again."""
    nova_opts.set_override('poll_interval', 0.05, group='nova')
    nova_opts.set_override('retry_interval', 0.3, group='nova')
    nova_opts.set_override('retry_max_interval', 60, group='nova')
    nova_opts.set_override('claim_timeout', 1, group='nova')
    claims: list[tuple[float, bool]] = []
    real = nova_events.claim_due
    failing = range(1, 5)  # the second to the fifth claim

    def claim_due(*args, take_over=True, **kwargs):
        claims.append((time.monotonic(), take_over))
        if len(claims) - 1 in failing:
            raise db_exc.DBConnectionError('the database is away')
        return real(*args, take_over=take_over, **kwargs)

    monkeypatch.setattr(nova_events, 'claim_due', claim_due)
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client)
    instance.start()
    try:
        poll(lambda: len(claims) > failing.stop)
        back = claims[failing.stop][0]  # the first claim that works
        poll(lambda: claims[-1][0] - back > 2.0, 5)
    finally:
        instance.stop()
        instance.wait(10)
    assert claims[0][1] is True  # no failure yet
    # Retried at most a third of claim_timeout apart (0.3, 0.33, 0.33 s,
    # less jitter), not doubled each time (0.3, 0.6, 1.2 s, less jitter:
    # the last at least 0.96 s).
    times = [t for t, _take in claims[1:failing.stop + 1]]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < 0.8, gaps
    after = claims[failing.stop:]
    # Not before claim_timeout (1 s) after the loop worked again, and
    # again after it (the loop's turn after ``back`` may take a while on
    # a busy machine, hence the margin).
    assert {take for t, take in after if t - back < 0.95} == {False}
    assert {take for t, take in after if t - back > 1.6} == {True}


def test_stop_is_prompt(notifier):
    notifier.start()
    time.sleep(0.1)
    started = time.monotonic()
    notifier.stop()
    notifier.wait(5)
    assert not notifier.running
    assert time.monotonic() - started < 1


def test_two_notifiers_send_each_event_once(
        database, admin_context, nova_opts):
    nova_opts.set_override('events_batch_size', 10, group='nova')
    nova_opts.set_override('poll_interval', 0.05, group='nova')
    arqs = enqueue(admin_context, 300, now=timeutils.utcnow())
    clients = [FakeClient(), FakeClient()]
    instances = [notifier_mod.Notifier('c%d' % i, nova_opts,
                                       lambda c=c: c)
                 for i, c in enumerate(clients)]
    for instance in instances:
        instance.start()
    try:
        poll(lambda: nova_events.pending_count(admin_context) == 0, 20)
    finally:
        for instance in instances:
            instance.stop()
        for instance in instances:
            instance.wait(10)
    tags = clients[0].tags() + clients[1].tags()
    assert sorted(tags) == sorted(arqs)


# Recording outcomes together ------------------------------------------------


@pytest.fixture
def recordings(monkeypatch):
    """The ``sent`` ids of every record_outcomes call."""
    calls: list[list[int]] = []
    real = nova_events.record_outcomes

    def record(context, now, sent=(), rejected=(), retry=()):
        calls.append(sorted(sent))
        return real(context, now, sent=sent, rejected=rejected, retry=retry)

    monkeypatch.setattr(nova_events, 'record_outcomes', record)
    return calls


@contextlib.contextmanager
def running(nova_opts, client, **overrides):
    """A started notifier of conductor c1 with ``[nova]`` overrides,
    stopped on exit."""
    for name, value in overrides.items():
        nova_opts.set_override(name, value, group='nova')
    instance = notifier_mod.Notifier('c1', nova_opts, lambda: client)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()
        instance.wait(10)


def _deliver_one(instance, context):
    rows_ = _enqueue_leased(context, 1, instance.host, timeutils.utcnow(), 30)
    instance.deliver(rows_)
    return rows_[0]


def test_outcomes_of_several_requests_are_recorded_together(
        database, admin_context, nova_opts, client, recordings):
    with running(nova_opts, client, record_delay=0.5) as instance:
        delivered = []
        for n in range(1, 4):
            delivered.append(_deliver_one(instance, admin_context))
            client.wait_calls(n)  # sent at once, one request each
        assert recordings == []
        assert nova_events.pending_count(admin_context) == 3
        poll(lambda: nova_events.pending_count(admin_context) == 0)
        assert recordings == [sorted(r['id'] for r in delivered)]


def test_no_record_delay_records_after_every_request(
        database, admin_context, nova_opts, client, recordings):
    with running(nova_opts, client, record_delay=0) as instance:
        first = _deliver_one(instance, admin_context)
        client.wait_calls(1)
        poll(lambda: len(recordings) == 1)
        second = _deliver_one(instance, admin_context)
        client.wait_calls(2)
        poll(lambda: len(recordings) == 2)
        assert recordings == [[first['id']], [second['id']]]


def test_stopping_records_what_was_sent(database, admin_context, nova_opts,
                                        client, recordings):
    with running(nova_opts, client, record_delay=5) as instance:
        row = _deliver_one(instance, admin_context)
        client.wait_calls(1)
    assert recordings == [[row['id']]]
    assert nova_events.pending_count(admin_context) == 0


def test_a_failed_record_is_tried_again_without_sending_again(
        database, admin_context, nova_opts, client, monkeypatch):
    failures = [RuntimeError('database gone')]
    real = nova_events.record_outcomes

    def record(*args, **kwargs):
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(nova_events, 'record_outcomes', record)
    with running(nova_opts, client, record_delay=0,
                 poll_interval=0.05) as instance:
        _deliver_one(instance, admin_context)
        poll(lambda: nova_events.pending_count(admin_context) == 0)
        # The count follows the record's commit.
        poll(lambda: instance.sent == 1)
        assert len(client.calls) == 1


def test_waking_only_to_record_claims_nothing(
        database, admin_context, nova_opts, client, recordings,
        monkeypatch):
    claims = []
    real_claim = nova_events.claim_due
    monkeypatch.setattr(
        nova_events, 'claim_due',
        lambda *a, **k: claims.append(a) or real_claim(*a, **k))
    with running(nova_opts, client, record_delay=0.2) as instance:
        poll(lambda: len(claims) == 1)  # the first round at start
        _deliver_one(instance, admin_context)
        client.wait_calls(1)
        poll(lambda: len(recordings) == 1)
        time.sleep(0.1)
        assert len(claims) == 1  # delivered rows need no claim


def test_nothing_is_sent_while_sent_outcomes_cannot_be_recorded(
        database, admin_context, nova_opts, client, monkeypatch):
    """The database goes away after an event was sent: no other event is
    sent until the outcome is recorded, and the sent one is not claimed
    and sent again although its lease ran out meanwhile."""
    down = threading.Event()
    down.set()
    real = nova_events.record_outcomes

    def record(*args, **kwargs):
        if down.is_set():
            raise RuntimeError('database gone')
        return real(*args, **kwargs)

    monkeypatch.setattr(nova_events, 'record_outcomes', record)
    with running(nova_opts, client, record_delay=0, poll_interval=0.05,
                 retry_interval=0.05, retry_max_interval=0.1) as instance:
        (first,) = _enqueue_leased(admin_context, 1, instance.host,
                                   timeutils.utcnow(), 0.3)
        instance.deliver([first])
        client.wait_calls(1)
        second = _deliver_one(instance, admin_context)
        time.sleep(0.8)  # the first lease ran out
        assert client.tags() == [first['arq_uuid']]
        down.clear()
        poll(lambda: nova_events.pending_count(admin_context) == 0)
    assert sorted(client.tags()) == sorted([first['arq_uuid'],
                                            second['arq_uuid']])
