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

"""Delivers the ``nova_events`` outbox to Nova.

Every conductor runs one :class:`Notifier`: a daemon thread that posts
batches of events to Nova, one request per batch, and records each
event's outcome. Events this conductor's binds queued arrive through
:meth:`Notifier.deliver` right after their transaction committed, already
leased to the conductor, and go out at once, or, under load, together
with the others that arrive within ``[nova] send_interval`` of the
previous request; the thread also claims every
other due event (:func:`cyborg.db.nova_events.claim_due`: retries, and
events whose conductor died) every ``[nova] poll_interval`` seconds, and
loops at once while full batches keep coming.

Events Nova could not take are retried with exponential backoff
(``retry_interval`` doubled per attempt, capped at ``retry_max_interval``,
minus up to 20% jitter); events Nova refused are never retried. Events
to repeat (``repeat_until``: the failure of a bind on its host, which
Nova drops or refuses until its compute waits for it) are sent again
whatever Nova answered, capped at ``repeat_max_interval``, until then.
Events Nova cannot take yet because the instance has no host (422: Nova
binds before it places the instance) are retried the same way for up to
``unhosted_retry_timeout`` after they were queued, then dropped. The
thread records outcomes up to ``[nova] record_delay`` after Nova answered,
those of every request sent meanwhile in one transaction (the events
themselves go out at once). Nothing kills the thread: a failing client,
database or Nova is logged and backed off from.

Leases of other conductors that ran out are taken over only by a
notifier that has run without failing for ``[nova] claim_timeout``, and
a failing notifier tries again at least every third of it: after a
database outage longer than the lease, the conductor that sent an event
just before it records the outcome soon after the database is back,
and no other conductor sends the event again meanwhile.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import datetime
import random
import threading
import time
from typing import Any
from typing import Protocol

from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.clients import nova as nova_client
from cyborg.common import metrics
from cyborg.db import nova_events

LOG = logging.getLogger(__name__)

# Fraction of a backoff delay taken off at random, so that events (and
# conductors) that failed together do not retry in lockstep.
JITTER = 0.2


class ClientUnavailable(Exception):
    """The client factory failed; nothing was claimed."""


class EventSender(Protocol):
    def send_events(self, events: list[dict[str, Any]]
                    ) -> dict[str, str]: ...


def backoff(attempts: int, interval: float, max_interval: float,
            rng: random.Random | None = None) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (>= 1).

    ``interval * 2 ** (attempts - 1)``, at most ``max_interval``, less a
    random jitter of up to :data:`JITTER` of it.
    """
    # Capped: the delay is capped anyway, and 2 ** n of a huge attempt count
    # would overflow the float product.
    exponent = min(max(attempts - 1, 0), 32)
    delay = min(max_interval, interval * 2 ** exponent)
    return delay * (1.0 - JITTER * (rng or random).random())


class Notifier:
    """The conductor's Nova event sender; see the module docstring.

    ``conf`` needs the ``[nova]`` group (:mod:`cyborg.conf.nova`);
    ``client_factory`` builds the client (anything with ``send_events``,
    e.g. :class:`cyborg.clients.nova.NovaClient`) on first use and again
    after it failed to. ``start``/``stop``/``wait`` match
    :class:`cyborg.common.service.PeriodicTask`, so an RPCService can run
    a notifier as one of its periodic tasks.
    """

    def __init__(self, host: str, conf,
                 client_factory: Callable[[], EventSender],
                 clock: Callable[[], datetime.datetime] = timeutils.utcnow,
                 rng: random.Random | None = None):
        self.host = host
        self.name = 'nova-notifier'
        self._conf = conf
        self._client_factory = client_factory
        self._client: EventSender | None = None
        self._clock = clock
        self._rng = rng or random.Random()
        self._wake = threading.Event()
        self._ready: collections.deque[dict[str, Any]] = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        # (outbox row, outcome) pairs sent but not recorded yet, and when
        # (time.monotonic()) they are to be recorded at the latest.
        self._unrecorded: list[tuple[dict[str, Any], Any]] = []
        self._record_at = 0.0
        # When (time.monotonic()) the last request to Nova was sent.
        self._last_request = float('-inf')
        # Since when (time.monotonic()) the loop has not failed (the
        # database, as a rule); None while it fails: see _may_take_over.
        self._healthy_since: float | None = float('-inf')
        # Counters, for tests and logs.
        self.sent = 0
        self.retried = 0
        self.rejected = 0
        self.repeated = 0
        self.requests = 0

    # Life cycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (once); it sends what is due at once."""
        if self._thread is not None:
            return
        nova = self._conf.nova
        if nova.timeout is not None and nova.timeout >= nova.claim_timeout:
            LOG.warning('[nova] timeout (%ss) is not below claim_timeout '
                        '(%ss): a slow Nova may get an event twice',
                        nova.timeout, nova.claim_timeout)
        if nova.record_delay >= nova.claim_timeout:
            LOG.warning('[nova] record_delay (%ss) is not below '
                        'claim_timeout (%ss): other conductors may send '
                        'delivered events again', nova.record_delay,
                        nova.claim_timeout)
        self._stop.clear()
        self._wake.set()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name='nova-notifier-%s' % self.host)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop after the batch in flight, if any."""
        self._stop.set()
        self._wake.set()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (after :meth:`stop`)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        """Send what is due now; cheap, thread-safe, never blocks.

        Call it after the transaction that enqueued an event committed.
        """
        self._wake.set()

    def deliver(self, rows: list[dict[str, Any]]) -> None:
        """Send these outbox rows, leased to this conductor, now.

        Thread-safe and never blocks; call it after the transaction that
        queued them committed. Rows whose lease has ended by the time the
        thread gets to them are left to :func:`nova_events.claim_due`.
        """
        self._ready.extend(rows)
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # The loop ---------------------------------------------------------------

    def _loop(self) -> None:
        LOG.info('Nova notifier of %s started', self.host)
        next_poll = time.monotonic()
        while not self._stop.is_set():
            woken = self._wake.wait(self._sleep_time(next_poll))
            if woken:
                self._gather()
            self._wake.clear()
            try:
                if self._unrecorded and time.monotonic() >= self._record_at:
                    # Outcomes due for recording are recorded before
                    # anything else is claimed or sent: while the database
                    # is unreachable nothing more is sent that could not
                    # be recorded, and once it is back the leases that ran
                    # out meanwhile are not claimed here before the events
                    # sent under them are recorded (they would go to Nova
                    # twice).
                    self._record()
                # Woken only to record: nothing new to send or claim.
                while ((woken or time.monotonic() >= next_poll)
                       and not self._stop.is_set()):
                    next_poll = (time.monotonic()
                                 + self._conf.nova.poll_interval)
                    if self._send() < self._conf.nova.events_batch_size:
                        break
                if time.monotonic() >= self._record_at:
                    self._record()
            except ClientUnavailable as e:
                self._back_off('Cannot build the Nova client (%s); events '
                               'stay queued' % e)
                continue
            except Exception:
                self._healthy_since = None
                self._back_off('Nova notifier of %s failed' % self.host,
                               exc_info=True)
                continue
            self._failures = 0
            if self._healthy_since is None:
                self._healthy_since = time.monotonic()
        try:
            # On stop too: what was sent but not recorded would be sent again
            # once its lease ran out.
            self._record()
        except Exception:
            LOG.exception('Nova notifier of %s could not record the '
                          'outcome of %d sent event(s); they will be sent '
                          'again', self.host, len(self._unrecorded))
        LOG.info('Nova notifier of %s stopped', self.host)

    def _gather(self) -> None:
        """Wait out ``[nova] send_interval`` since the last request, unless
        a full batch is ready, so that the events delivered meanwhile go
        to Nova in one request."""
        nova = self._conf.nova
        wait = self._last_request + nova.send_interval - time.monotonic()
        if wait > 0 and len(self._ready) < nova.events_batch_size:
            self._stop.wait(wait)

    def _sleep_time(self, next_poll: float) -> float:
        """Seconds until the next poll, or until outcomes are due."""
        until = (min(next_poll, self._record_at) if self._unrecorded
                 else next_poll)
        return max(0.0, until - time.monotonic())

    def _back_off(self, message: str, exc_info: bool = False) -> None:
        self._failures += 1
        delay = self._loop_backoff()
        LOG.error('%s; next try in %.1fs', message, delay, exc_info=exc_info)
        self._stop.wait(delay)

    def _loop_backoff(self) -> float:
        nova = self._conf.nova
        # Never below poll_interval: a failing loop polls no faster than a
        # healthy one. At most a third of claim_timeout: once the database
        # is back, this conductor records what it sent before the outage
        # well before the others take its run-out leases over (see
        # _may_take_over).
        cap = max(nova.poll_interval,
                  min(nova.retry_max_interval, nova.claim_timeout / 3))
        return backoff(self._failures,
                       min(cap, max(nova.retry_interval, nova.poll_interval)),
                       cap, self._rng)

    def _get_client(self) -> EventSender:
        if self._client is None:
            try:
                self._client = self._client_factory()
            except Exception as e:
                raise ClientUnavailable('%s: %s' % (type(e).__name__, e))
        return self._client

    def run_once(self) -> int:
        """Claim, send and record one batch; the number of events claimed.

        Raises :class:`ClientUnavailable` if the client cannot be built
        (nothing is claimed then), or the database's error; a failing
        ``send_events`` is a retry of the batch.
        """
        claimed = self._send()
        self._record()
        return claimed

    def _send(self) -> int:
        """Claim and send one batch, keeping the outcomes to record; the
        number of events claimed."""
        nova = self._conf.nova
        client = self._get_client()
        context = cyborg_context.get_admin_context()
        # Delivered rows first: they are leased already, so sending them costs
        # no claim statement.
        rows = (self._take_ready(nova.events_batch_size)
                or nova_events.claim_due(context, self.host, self._clock(),
                                         nova.claim_timeout,
                                         nova.events_batch_size,
                                         take_over=self._may_take_over()))
        if not rows:
            return 0
        # One event per ARQ per request: results are keyed by ARQ uuid and
        # a later event of the same ARQ must not overtake an earlier one.
        batch: dict[str, dict[str, Any]] = {}
        later = []
        for row in rows:
            if row['arq_uuid'] in batch:
                later.append(row['id'])
            else:
                batch[row['arq_uuid']] = row
        if later:
            nova_events.release(context, later, self._clock())
        events = [nova_client.make_event(row['arq_uuid'],
                                         row['instance_uuid'], row['status'])
                  for row in batch.values()]
        started = time.monotonic()
        self._last_request = started
        self.requests += 1
        try:
            results = client.send_events(events)
        except Exception as e:
            LOG.exception('Sending %d event(s) to Nova failed', len(events))
            self._client = None  # built again next time
            results = {tag: nova_client.EventResult(
                nova_client.RETRY, '%s: %s' % (type(e).__name__, e))
                for tag in batch}
        elapsed = time.monotonic() - started
        for tag, row in batch.items():
            metrics.nova_event(row['status'], result_label(results.get(tag)))
        if elapsed >= nova.claim_timeout:
            LOG.warning('Sending %d event(s) to Nova took %.1fs, longer '
                        'than [nova] claim_timeout: another conductor may '
                        'have sent them too', len(events), elapsed)
        # The delay runs from the oldest unrecorded outcome: none waits longer
        # than record_delay (below claim_timeout, or another conductor could
        # claim and send it again).
        if not self._unrecorded:
            self._record_at = time.monotonic() + nova.record_delay
        self._unrecorded.extend((row, results.get(tag))
                                for tag, row in batch.items())
        # A batch's worth waiting: record at the next turn of the loop.
        if len(self._unrecorded) >= nova.events_batch_size:
            self._record_at = 0.0
        return len(rows)

    def _may_take_over(self) -> bool:
        """Whether events another conductor leased, and whose lease ran
        out, may be claimed: only once this loop has run without failing
        for ``[nova] claim_timeout``. After a database outage every lease
        taken before it has run out, while the conductors that sent
        under them are alive and record their outcomes first thing once
        the database is back (their failing loops retry at least every
        third of ``claim_timeout``); taking their events at once would
        send them to Nova twice. A conductor that died leaves its events
        to the others a lease later."""
        since = self._healthy_since
        return (since is not None and time.monotonic() - since
                >= self._conf.nova.claim_timeout)

    def _take_ready(self, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` delivered rows whose lease is still ours."""
        now = self._clock()
        rows = []
        while self._ready and len(rows) < limit:
            row = self._ready.popleft()
            # A lease that ran out may be another conductor's now: the row is
            # dropped here and claim_due hands it to whoever holds it.
            if row['claimed_by'] == self.host and row['claimed_until'] > now:
                rows.append(row)
        return rows

    def _record(self) -> None:
        """Record the outcomes of the events sent so far, in one
        transaction; kept for the next try if the database fails.

        Events to retry are grouped by attempt count (one jittered delay
        per group), rejected ones by reason: a few UPDATEs per batch.
        """
        if not self._unrecorded:
            return
        nova = self._conf.nova
        now = self._clock()
        sent = []
        rejected: dict[str | None, list[int]] = {}
        retry: dict[tuple[int, str | None], list[int]] = {}
        repeat: dict[tuple[int, str | None], list[int]] = {}
        for row, result in self._unrecorded:
            detail = getattr(result, 'detail', None)
            repeat_until = row.get('repeat_until')
            if repeat_until is not None and repeat_until > now:
                # Nova may have dropped it: its compute was not waiting.
                repeat.setdefault((row['attempts'] + 1, _repeat_detail(
                    result, detail)), []).append(row['id'])
            elif result == nova_client.UNHOSTED:
                if now - row['created_at'] < datetime.timedelta(
                        seconds=nova.unhosted_retry_timeout):
                    repeat.setdefault((row['attempts'] + 1, detail),
                                      []).append(row['id'])
                else:
                    rejected.setdefault(detail, []).append(row['id'])
            elif result == nova_client.SENT:
                sent.append(row['id'])
            elif result == nova_client.REJECTED:
                rejected.setdefault(detail, []).append(row['id'])
            else:
                if result is None:
                    detail = 'Nova client gave no outcome for this event'
                retry.setdefault((row['attempts'] + 1, detail),
                                 []).append(row['id'])
        retries = []
        for (attempts, detail), ids in retry.items():
            delay = backoff(attempts, nova.retry_interval,
                            nova.retry_max_interval, self._rng)
            retries.append((ids, detail,
                            now + datetime.timedelta(seconds=delay)))
        for (attempts, detail), ids in repeat.items():
            delay = backoff(attempts, nova.retry_interval,
                            nova.repeat_max_interval, self._rng)
            retries.append((ids, detail,
                            now + datetime.timedelta(seconds=delay)))
        nova_events.record_outcomes(
            cyborg_context.get_admin_context(), now, sent=sent,
            rejected=[(ids, detail) for detail, ids in rejected.items()],
            retry=retries)
        self._unrecorded = []
        retried = sum(len(ids) for ids in retry.values())
        repeated = sum(len(ids) for ids in repeat.values())
        self.repeated += repeated
        dropped = sum(len(ids) for ids in rejected.values())
        self.sent += len(sent)
        self.rejected += dropped
        self.retried += retried
        if retried or dropped or repeated:
            LOG.info('Nova events: %d sent, %d to retry, %d rejected, %d '
                     'to send again (failures Nova has not acted on, '
                     'instances without a host yet)', len(sent), retried,
                     dropped, repeated)
        else:
            LOG.debug('Nova events: %d sent', len(sent))


def result_label(result) -> str:
    """The ``result`` label of an event's outcome: accepted, refused
    (Nova will not take it: rejected, or no host yet) or error (no
    answer for it)."""
    if result == nova_client.SENT:
        return 'accepted'
    if result in (nova_client.REJECTED, nova_client.UNHOSTED):
        return 'refused'
    return 'error'


def _repeat_detail(result, detail: str | None) -> str:
    """What Nova answered to an event that is repeated, for the row's
    ``last_error``."""
    if result == nova_client.SENT:
        return 'repeated until Nova acts: Nova took it'
    if result is None:
        return 'repeated until Nova acts: no outcome from the Nova client'
    return 'repeated until Nova acts: %s' % (detail or result)
