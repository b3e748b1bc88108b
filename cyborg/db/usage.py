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

"""Usage of bound accelerator requests, in the database.

Binding intervals (see :mod:`cyborg.domain.usage`):

* an ARQ's open interval is its own row: ``bound_at`` is written in the
  UPDATE that moves it to Bound (no statement of its own);
* :func:`close_intervals` copies it, with what it is bound to, into
  ``arq_usage`` in the transaction that moves the ARQ out of Bound
  (unbind, delete): one INSERT ... SELECT, none when no ARQ was Bound.
  The row outlives the ARQ.

Audits: :func:`audit_period` creates the usage records of one ended
period in one transaction, with the ``usage_audits`` row whose unique
``period_start`` lets only one conductor do it; the records are the
``usage_records`` outbox, leased to that conductor, which sends them
and :func:`mark_sent` s them. Records whose sender died are leased
again by :func:`claim_unsent` once the lease has expired. Creation is
exactly once; sending is at least once (a conductor that dies after the
broker took a record and before marking it sent leaves it to be sent
again).

Mean utilization: :func:`add_readings` adds each busy reading of a
device (``gpu_percent``) to the ``arq_utilization`` row of every ARQ
Bound on the device, for the period of the reading (one upsert per
report that carries readings, written with them); an audit reads the
sums of its period into the records' mean and deletes them.

Times are naive UTC datetimes passed in by the caller.
"""

import datetime
import functools
from typing import Any

from oslo_db import exception as db_exc
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.db import api as db_api
from cyborg.db.models import ARQ_USAGE
from cyborg.db.models import ARQ_UTILIZATION
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import PROFILES
from cyborg.db.models import USAGE_AUDITS
from cyborg.db.models import USAGE_RECORDS
from cyborg.db.models import DateTime
from cyborg.domain import arq_states as states
from cyborg.domain import providers
from cyborg.domain import usage

# What an interval says of its ARQ, as arq_usage names it.
_INTERVAL_COLUMNS = ('arq_uuid', 'project_id', 'instance_uuid',
                     'device_profile_name', 'resource_class', 'vendor',
                     'model', 'host', 'device_uuid', 'bound_at')


def _bound_at():
    # A Bound ARQ without bound_at (imported from upstream Cyborg after
    # the migration that filled it) counts from its last change.
    return sa.func.coalesce(ARQS.c.bound_at, ARQS.c.updated_at,
                            ARQS.c.created_at)


def _open_intervals():
    """The open interval of each ARQ, from the live rows: the columns of
    :data:`_INTERVAL_COLUMNS` and the device's stored utilization."""
    resource_class = (
        sa.select(ATTRIBUTES.c.value)
        .where(ATTRIBUTES.c.deployable_id == ARQS.c.deployable_id,
               ATTRIBUTES.c.key == providers.RESOURCE_CLASS_KEY)
        .scalar_subquery())
    return (
        sa.select(ARQS.c.uuid.label('arq_uuid'), ARQS.c.project_id,
                  ARQS.c.instance_uuid,
                  PROFILES.c.name.label('device_profile_name'),
                  resource_class.label('resource_class'),
                  DEVICES.c.vendor, DEVICES.c.model,
                  sa.func.coalesce(DEVICES.c.hostname,
                                   ARQS.c.hostname).label('host'),
                  DEVICES.c.uuid.label('device_uuid'),
                  _bound_at().label('bound_at'),
                  DEVICES.c.utilization)
        .select_from(
            ARQS.outerjoin(PROFILES,
                           PROFILES.c.id == ARQS.c.device_profile_id)
            .outerjoin(DEPLOYABLES, DEPLOYABLES.c.id == ARQS.c.deployable_id)
            .outerjoin(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)))


def _close_statement():
    now = sa.bindparam('now', type_=ARQ_USAGE.c.unbound_at.type)
    opened = _open_intervals()
    return sa.insert(ARQ_USAGE).from_select(
        _INTERVAL_COLUMNS + ('unbound_at', 'created_at'),
        opened.with_only_columns(
            *[c for c in opened.selected_columns
              if c.name != 'utilization'], now, now)
        .where(ARQS.c.id.in_(sa.bindparam('ids', expanding=True)),
               ARQS.c.state == states.BOUND))


# Built once: unbinding and deleting run it.
_CLOSE = _close_statement()


def close_intervals(connection, rows, now: datetime.datetime) -> None:
    """Record the binding intervals of the Bound ARQs among the locked
    ``rows`` (with ``id`` and ``state``), ending at ``now``: call it in
    the transaction that moves them out of Bound, before it does. No
    statement when none is Bound."""
    ids = [row.id for row in rows if row.state == states.BOUND]
    if ids:
        connection.execute(_CLOSE, {'ids': ids, 'now': now})


@functools.cache
def _intervals_query():
    """Every interval overlapping the period ``[start, end)``: the closed
    ones and the open ones, in ONE statement, so that an unbind that
    commits meanwhile is seen on one side only."""
    closed = sa.select(
        *[ARQ_USAGE.c[name] for name in _INTERVAL_COLUMNS],
        ARQ_USAGE.c.unbound_at,
        sa.select(DEVICES.c.utilization)
        .where(DEVICES.c.uuid == ARQ_USAGE.c.device_uuid)
        .scalar_subquery().label('utilization')
    ).where(ARQ_USAGE.c.unbound_at > sa.bindparam('start'),
            ARQ_USAGE.c.bound_at < sa.bindparam('end'))
    opened = _open_intervals()
    opened = opened.with_only_columns(
        *[c for c in opened.selected_columns if c.name != 'utilization'],
        sa.null().label('unbound_at'), DEVICES.c.utilization
    ).where(ARQS.c.state == states.BOUND,
            _bound_at() < sa.bindparam('end'))
    return sa.union_all(closed, opened)


def _interval(row) -> usage.Interval:
    return usage.Interval(
        arq_uuid=row.arq_uuid, project_id=row.project_id,
        instance_uuid=row.instance_uuid,
        device_profile_name=row.device_profile_name,
        resource_class=row.resource_class, vendor=row.vendor,
        model=row.model, host=row.host, bound_at=row.bound_at,
        unbound_at=row.unbound_at, utilization=row.utilization)


def intervals(connection, start: datetime.datetime,
              end: datetime.datetime) -> list[usage.Interval]:
    """The binding intervals overlapping ``[start, end)``."""
    return [_interval(row) for row in connection.execute(
        _intervals_query(), {'start': start, 'end': end})]


def _readings_upsert(dialect: str, select):
    """INSERT ``select`` (arq_uuid, period_start, busy_sum, samples)
    into arq_utilization, adding to the row an ARQ has for the period
    already."""
    columns = ['arq_uuid', 'period_start', 'busy_sum', 'samples']
    if dialect in ('mysql', 'mariadb'):
        insert = mysql.insert(ARQ_UTILIZATION).from_select(columns, select)
        return insert.on_duplicate_key_update(
            busy_sum=ARQ_UTILIZATION.c.busy_sum + insert.inserted.busy_sum,
            samples=ARQ_UTILIZATION.c.samples + insert.inserted.samples)
    module = postgresql if dialect == 'postgresql' else sqlite
    insert = module.insert(ARQ_UTILIZATION).from_select(columns, select)
    return insert.on_conflict_do_update(
        index_elements=['arq_uuid', 'period_start'],
        set_={'busy_sum': ARQ_UTILIZATION.c.busy_sum
              + insert.excluded.busy_sum,
              'samples': ARQ_UTILIZATION.c.samples
              + insert.excluded.samples})


def add_readings(connection, host: str, busy: dict[str, float],
                 period_start: datetime.datetime) -> None:
    """Add the busy percent ``busy`` ({device address: reading}) of
    ``host``'s devices to every ARQ Bound on them, in the period
    starting at ``period_start``: one statement (none without readings).
    """
    if not busy:
        return
    reading = sa.case({address: sa.literal(value, sa.Float)
                       for address, value in busy.items()},
                      value=DEVICES.c.address)
    select = (sa.select(ARQS.c.uuid, sa.literal(period_start, DateTime),
                        reading, sa.literal(1, sa.Integer))
              .select_from(ARQS)
              .join(DEPLOYABLES, DEPLOYABLES.c.id == ARQS.c.deployable_id)
              .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
              .where(ARQS.c.state == states.BOUND,
                     DEVICES.c.hostname == host,
                     DEVICES.c.address.in_(sorted(busy))))
    connection.execute(_readings_upsert(connection.dialect.name, select))


def _period_readings(connection, start: datetime.datetime,
                     end: datetime.datetime
                     ) -> dict[str, tuple[float, int]]:
    """{ARQ uuid: (sum of busy readings, readings)} of the period
    ``[start, end)``."""
    rows = connection.execute(
        sa.select(ARQ_UTILIZATION.c.arq_uuid,
                  sa.func.sum(ARQ_UTILIZATION.c.busy_sum),
                  sa.func.sum(ARQ_UTILIZATION.c.samples))
        .where(ARQ_UTILIZATION.c.period_start >= start,
               ARQ_UTILIZATION.c.period_start < end)
        .group_by(ARQ_UTILIZATION.c.arq_uuid))
    return {uuid: (float(total), int(count)) for uuid, total, count in rows}


@db_api.connection_reader
def last_audited_end(context) -> datetime.datetime | None:
    """The end of the latest period audited; None if none was."""
    return context.connection.execute(
        sa.select(sa.func.max(USAGE_AUDITS.c.period_end))).scalar()


def audit_period(context, start: datetime.datetime, end: datetime.datetime,
                 now: datetime.datetime, owner: str,
                 lease_until: datetime.datetime | None
                 ) -> list[dict[str, Any]] | None:
    """Create the usage records of the period ``[start, end)``, audited
    by ``owner`` and leased to it until ``lease_until`` (None: not
    leased, any conductor sends them); the records (rows of
    ``usage_records``), or None if the period (or one overlapping it)
    was audited already.

    One transaction: the audit row (unique on ``period_start``) and the
    records commit together. A concurrent audit of the same period
    waits on the unique key, then fails on it and rolls back: the
    period was audited by the other.
    """
    try:
        return _audit_period(context, start, end, now, owner, lease_until)
    except db_exc.DBDuplicateEntry:
        return None


@db_api.connection_writer
def _audit_period(context, start, end, now, owner, lease_until):
    connection = context.connection
    # Any audited period overlapping this one (the same, or one of
    # another length): its time is counted already.
    done = connection.execute(
        sa.select(USAGE_AUDITS.c.id)
        .where(USAGE_AUDITS.c.period_start < end,
               USAGE_AUDITS.c.period_end > start)).first()
    if done is not None:
        return None
    found = usage.records(intervals(connection, start, end), start, end,
                          _period_readings(connection, start, end))
    # Read into the records: the readings of this period and before
    # (none can come for a period that ended) are done with.
    connection.execute(sa.delete(ARQ_UTILIZATION).where(
        ARQ_UTILIZATION.c.period_start < end))
    holder = owner if lease_until is not None else None
    connection.execute(sa.insert(USAGE_AUDITS).values(
        period_start=start, period_end=end, audited_by=owner,
        records=len(found), created_at=now))
    rows = [dict(arq_uuid=record['arq_uuid'], period_start=start,
                 period_end=end, payload=usage.dumps(record),
                 claimed_by=holder, claimed_until=lease_until, attempts=0,
                 created_at=now)
            for record in found]
    if rows:
        connection.execute(sa.insert(USAGE_RECORDS), rows)
    return _leased(connection, holder, lease_until, start)


def _leased(connection, owner: str | None, until: datetime.datetime | None,
            period: datetime.datetime | None = None
            ) -> list[dict[str, Any]]:
    """The unsent records leased to ``owner`` until ``until`` (None and
    None: not leased) (of the period starting at ``period`` if given),
    oldest first."""
    query = sa.select(USAGE_RECORDS).where(
        USAGE_RECORDS.c.claimed_by == owner,
        USAGE_RECORDS.c.claimed_until == until,
        USAGE_RECORDS.c.sent_at.is_(None))
    if period is not None:
        query = query.where(USAGE_RECORDS.c.period_start == period)
    return [dict(row._mapping) for row in connection.execute(
        query.order_by(USAGE_RECORDS.c.id))]


def _claimable(now: datetime.datetime):
    """Unsent records nobody holds a live lease on."""
    return sa.and_(USAGE_RECORDS.c.sent_at.is_(None),
                   sa.or_(USAGE_RECORDS.c.claimed_until.is_(None),
                          USAGE_RECORDS.c.claimed_until < now))


# As cyborg.db.nova_events: concurrent claimers pass each other's rows.
_SKIP_LOCKED_DIALECTS = ('postgresql', 'mysql', 'mariadb')


@db_api.connection_writer
def claim_unsent(context, owner: str, now: datetime.datetime,
                 lease_until: datetime.datetime, limit: int
                 ) -> list[dict[str, Any]]:
    """Lease up to ``limit`` unsent records nobody holds to ``owner``
    until ``lease_until`` (those whose sender died or gave up); the
    leased records, oldest first."""
    connection = context.connection
    query = (sa.select(USAGE_RECORDS.c.id).where(_claimable(now))
             .order_by(USAGE_RECORDS.c.id).limit(limit))
    if connection.dialect.name in _SKIP_LOCKED_DIALECTS:
        query = query.with_for_update(skip_locked=True)
    ids = [row.id for row in connection.execute(query)]
    if not ids:
        return []
    # _claimable again: on SQLite (no row locks) another claimer may
    # have taken some meanwhile; only what this UPDATE leased is ours.
    connection.execute(
        db_api.by_primary_key(sa.update(USAGE_RECORDS))
        .where(USAGE_RECORDS.c.id.in_(ids), _claimable(now))
        .values(claimed_by=owner, claimed_until=lease_until,
                updated_at=now))
    return _leased(connection, owner, lease_until)


@db_api.connection_writer
def mark_sent(context, record_id: int, now: datetime.datetime) -> None:
    """The record ``record_id`` was handed to the transport."""
    context.connection.execute(
        db_api.by_primary_key(sa.update(USAGE_RECORDS))
        .where(USAGE_RECORDS.c.id == record_id)
        .values(sent_at=now, claimed_by=None, claimed_until=None,
                attempts=USAGE_RECORDS.c.attempts + 1, updated_at=now))


@db_api.connection_writer
def release(context, record_ids: list[int], now: datetime.datetime,
            attempted: int | None = None) -> None:
    """Drop the lease of unsent records ``record_ids`` (a send failed):
    the next audit run of any conductor sends them. ``attempted``: the
    one whose send failed, counted."""
    if not record_ids:
        return
    connection = context.connection
    connection.execute(
        db_api.by_primary_key(sa.update(USAGE_RECORDS))
        .where(USAGE_RECORDS.c.id.in_(record_ids),
               USAGE_RECORDS.c.sent_at.is_(None))
        .values(claimed_by=None, claimed_until=None, updated_at=now))
    if attempted is not None:
        connection.execute(
            db_api.by_primary_key(sa.update(USAGE_RECORDS))
            .where(USAGE_RECORDS.c.id == attempted)
            .values(attempts=USAGE_RECORDS.c.attempts + 1))
