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

"""The ``nova_events`` outbox: Nova events waiting to be delivered.

Life of a row:

* :func:`enqueue_many` writes it in the transaction that resolves an ARQ's
  bind (so the outcome and its event commit together), due at once;
* a conductor's notifier :func:`claim_due` s it: a lease
  (``claimed_by``, ``claimed_until``) that keeps other conductors off the
  row while this one posts it to Nova;
* the outcome is recorded with :func:`mark_sent`, :func:`mark_retry`
  (due again at ``next_attempt_at``, lease dropped) or
  :func:`mark_rejected`. A conductor that dies in between leaves a lease
  that expires: the row is claimed again (delivery is at least once).

A row with ``repeat_until`` (the ``failed`` event of a bind that failed
on its host, which Nova may have refused or dropped because its compute
was not waiting yet) is not finished by Nova's answer: it is due again
after a backoff, as a retry is, until that time passes or Nova unbinds
or deletes its ARQ, when :func:`cancel_repeats` removes it.

A row is finished once ``sent_at`` is set. Delivered rows have
``last_error`` NULL; rejected rows (Nova refused the event for good, e.g.
the instance is gone) have ``last_error`` starting with
:data:`REJECTED_PREFIX`. ``attempts`` counts the requests that carried the
event.

Writers go through :func:`cyborg.db.api.connection_writer` (serialised
per process on SQLite). Times are naive UTC datetimes
(``oslo_utils.timeutils.utcnow()``), passed in by the caller so tests
control the clock.
"""

from collections.abc import Sequence
import datetime
import functools
from typing import Any

from oslo_log import log as logging
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db.models import EVENTS
from cyborg.domain import events

LOG = logging.getLogger(__name__)

STATUSES = events.STATUSES
REJECTED_PREFIX = 'rejected: '

# Dialects whose SELECT ... FOR UPDATE SKIP LOCKED lets concurrent
# claimers pass each other's rows instead of waiting for them.
_SKIP_LOCKED_DIALECTS = ('postgresql', 'mysql', 'mariadb')


def enqueue_many(connection, events: Sequence[tuple[str, str, str]],
                 now: datetime.datetime, owner: str | None = None,
                 lease_until: datetime.datetime | None = None,
                 repeat_until: datetime.datetime | None = None
                 ) -> list[dict[str, Any]]:
    """Queue ``(arq_uuid, instance_uuid, status)`` events, due at ``now``;
    the rows written.

    One INSERT on ``connection`` (a SQLAlchemy Connection or Session),
    inside whatever transaction it is in: call it in the transaction that
    records the binds' outcomes. ``status`` is ``'completed'`` or
    ``'failed'``. With an ``owner``, the rows are leased to it until
    ``lease_until``: it sends them once the transaction has committed,
    and nobody else does before the lease ends. With ``repeat_until``
    they are sent again until then (see the module docstring).
    """
    for _arq, _instance, status in events:
        if status not in STATUSES:
            raise ValueError('status must be one of %s, not %r'
                             % (', '.join(STATUSES), status))
    rows = [dict(arq_uuid=arq, instance_uuid=instance, status=status,
                 attempts=0, next_attempt_at=now, created_at=now,
                 claimed_by=owner, claimed_until=lease_until,
                 repeat_until=repeat_until)
            for arq, instance, status in events]
    if not rows:
        return []
    dialect = (connection.dialect if hasattr(connection, 'dialect')
               else connection.get_bind().dialect)
    if len(rows) > 1 and dialect.insert_returning:
        # One statement for the batch; only what tells the rows apart
        # comes back (every other value is the same for all of them).
        ids: dict[tuple[str, str, str], list[int]] = {}
        for row in connection.execute(_INSERT_RETURNING_IDS, rows):
            ids.setdefault((row.arq_uuid, row.instance_uuid, row.status),
                           []).append(row.id)
        for key in ids:
            ids[key].sort(reverse=True)
        return [_written(row, ids[row['arq_uuid'], row['instance_uuid'],
                                  row['status']].pop())
                for row in rows]
    # One row (the bind of one ARQ): its id comes with the INSERT's
    # answer (lastrowid; RETURNING id on PostgreSQL), without a result
    # set of every column to parse.
    return [_written(row, connection.execute(
        _INSERT, row).inserted_primary_key[0]) for row in rows]


def _written(row: dict[str, Any], row_id: int) -> dict[str, Any]:
    """The outbox row as the database holds it once ``row`` is
    inserted with ``row_id``."""
    return dict(_UNSET, **row, id=row_id)


_INSERT = sa.insert(EVENTS)
_INSERT_RETURNING_IDS = sa.insert(EVENTS).returning(
    EVENTS.c.id, EVENTS.c.arq_uuid, EVENTS.c.instance_uuid, EVENTS.c.status)
# The columns an enqueued row leaves unset.
_UNSET = {column.name: None for column in EVENTS.c}


def _claimable(now: datetime.datetime, owner: str | None = None):
    """Rows due at ``now`` that nobody holds a live lease on; with an
    ``owner``, only those whose run-out lease, if any, was its own."""
    lease_over = EVENTS.c.claimed_until < now
    if owner is not None:
        lease_over = sa.and_(lease_over, EVENTS.c.claimed_by == owner)
    return sa.and_(
        EVENTS.c.sent_at.is_(None),
        EVENTS.c.next_attempt_at <= now,
        sa.or_(EVENTS.c.claimed_until.is_(None), lease_over))


def _row(row) -> dict[str, Any]:
    return dict(row._mapping)


@db_api.connection_writer
def claim_due(context, owner: str, now: datetime.datetime,
              lease_seconds: float, limit: int,
              take_over: bool = True) -> list[dict[str, Any]]:
    """Lease up to ``limit`` due events to ``owner``; the leased rows.

    Oldest due first (by ``next_attempt_at``, then id). Without
    ``take_over``, an event whose lease by another conductor ran out is
    left to that conductor (it may have sent it and not recorded it
    yet). On PostgreSQL and MySQL the candidates are locked with FOR
    UPDATE SKIP LOCKED, so concurrent claimers take disjoint rows
    without waiting. On SQLite (one writer at a time) the UPDATE
    re-checks that each row is still claimable; if its row count shows
    that another claimer got some rows first, only the rows now leased
    to ``owner`` until this lease's end are returned.
    """
    connection = context.connection
    until = now + datetime.timedelta(seconds=lease_seconds)
    claimable = _claimable(now, None if take_over else owner)
    query = (sa.select(EVENTS.c.id).where(claimable)
             .order_by(EVENTS.c.next_attempt_at, EVENTS.c.id).limit(limit))
    if connection.dialect.name in _SKIP_LOCKED_DIALECTS:
        query = query.with_for_update(skip_locked=True)
    ids = [row.id for row in connection.execute(query)]
    if not ids:
        return []
    return _lease(connection, ids, owner, now, until, claimable)


def _lease(connection, ids: Sequence[int], owner: str,
           now: datetime.datetime, until: datetime.datetime,
           claimable) -> list[dict[str, Any]]:
    """Lease the rows among ``ids`` still ``claimable``; the leased
    rows."""
    updated = connection.execute(
        db_api.by_primary_key(sa.update(EVENTS))
        .where(EVENTS.c.id.in_(list(ids)), claimable)
        .values(claimed_by=owner, claimed_until=until, updated_at=now)
        .execution_options(synchronize_session=False)).rowcount
    query = sa.select(EVENTS).where(EVENTS.c.id.in_(list(ids)))
    if updated != len(ids):
        LOG.debug('%s claimed %d of %d due Nova events; others were '
                  'claimed meanwhile', owner, updated, len(ids))
        query = query.where(EVENTS.c.claimed_by == owner,
                            EVENTS.c.claimed_until == until)
    query = query.order_by(EVENTS.c.next_attempt_at, EVENTS.c.id)
    return [_row(row) for row in connection.execute(query)]


@functools.cache
def _finish_statement(columns: tuple[str, ...], attempt: bool):
    """Drop the lease of the unfinished events ``ids`` and set
    ``columns`` (parameters ``new_<column>``), counting an attempt if
    ``attempt``."""
    values: dict[str, Any] = {'claimed_by': None, 'claimed_until': None}
    values.update((column, sa.bindparam('new_' + column))
                  for column in columns)
    if attempt:
        values['attempts'] = EVENTS.c.attempts + 1
    return (db_api.by_primary_key(sa.update(EVENTS))
            .where(EVENTS.c.id.in_(sa.bindparam('ids', expanding=True)),
                   EVENTS.c.sent_at.is_(None))
            .values(values))


def _finish(context, ids: Sequence[int], now: datetime.datetime,
            attempt: bool = True, **values: Any) -> int:
    if not ids:
        return 0
    values['updated_at'] = now
    params = {'new_' + column: value for column, value in values.items()}
    params['ids'] = list(ids)
    return context.connection.execute(
        _finish_statement(tuple(sorted(values)), attempt), params).rowcount


@db_api.connection_writer
def mark_sent(context, ids: Sequence[int], now: datetime.datetime) -> int:
    """Nova took these events: finished. The number of rows changed."""
    return _finish(context, ids, now, sent_at=now, last_error=None)


@db_api.connection_writer
def mark_retry(context, ids: Sequence[int], now: datetime.datetime,
               error: str | None, next_attempt_at: datetime.datetime
               ) -> int:
    """Nova did not take these events: due again at ``next_attempt_at``.

    Counts the attempt, records ``error`` and drops the lease. The number
    of rows changed (finished rows are left alone).
    """
    return _finish(context, ids, now, next_attempt_at=next_attempt_at,
                   last_error=error)


@db_api.connection_writer
def mark_rejected(context, ids: Sequence[int], now: datetime.datetime,
                  error: str | None) -> int:
    """Nova refused these events for good: finished, never retried.

    ``sent_at`` is set and ``last_error`` is :data:`REJECTED_PREFIX` plus
    ``error``. The number of rows changed.
    """
    return _finish(context, ids, now, sent_at=now,
                   last_error=REJECTED_PREFIX + (error or 'no reason given'))


@db_api.connection_writer
def release(context, ids: Sequence[int], now: datetime.datetime) -> int:
    """Drop the lease of unsent events without counting an attempt.

    They are due again at once (``next_attempt_at`` is left alone).
    """
    return _finish(context, ids, now, attempt=False)


@db_api.connection_writer
def record_outcomes(context, now: datetime.datetime,
                    sent: Sequence[int] = (),
                    rejected: Sequence[tuple[Sequence[int], str | None]] = (),
                    retry: Sequence[tuple[Sequence[int], str | None,
                                          datetime.datetime]] = ()) -> None:
    """The outcomes of one batch, in one transaction.

    ``sent`` ids as in :func:`mark_sent`; ``rejected`` (ids, error) pairs
    as in :func:`mark_rejected`; ``retry`` (ids, error, next_attempt_at)
    triples as in :func:`mark_retry`.
    """
    if sent:
        mark_sent(context, sent, now)
    for ids, error in rejected:
        mark_rejected(context, ids, now, error)
    for ids, error, next_attempt_at in retry:
        mark_retry(context, ids, now, error, next_attempt_at)


_CANCEL_REPEATS = sa.delete(EVENTS).where(
    EVENTS.c.arq_uuid.in_(sa.bindparam('arq_uuids', expanding=True)),
    EVENTS.c.repeat_until.is_not(None), EVENTS.c.sent_at.is_(None))


def cancel_repeats(connection, arq_uuids: Sequence[str]) -> None:
    """Stop repeating the events of ``arq_uuids``: Nova acted on them.

    Call it in the transaction that unbinds or deletes the ARQs. A
    notifier sending one right now records its outcome on no row.
    """
    if arq_uuids:
        connection.execute(_CANCEL_REPEATS, {'arq_uuids': list(arq_uuids)})


@db_api.connection_reader
def pending_count(context) -> int:
    """Events not finished yet (due, leased or waiting for a retry)."""
    return context.connection.execute(
        sa.select(sa.func.count()).select_from(EVENTS)
        .where(EVENTS.c.sent_at.is_(None))).scalar()


@db_api.connection_reader
def event_list(context, arq_uuid: str | None = None
               ) -> list[dict[str, Any]]:
    """Every event (of ``arq_uuid``), by id: for tests and diagnostics."""
    query = sa.select(EVENTS).order_by(EVENTS.c.id)
    if arq_uuid is not None:
        query = query.where(EVENTS.c.arq_uuid == arq_uuid)
    return [_row(row) for row in context.connection.execute(query)]
