# Copyright 2026 The Cyborg Authors.
#
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
"""Purging finished records: rows nothing will read or change again.

* ``nova_events``: an event is finished once ``sent_at`` is set (Nova
  took it, or refused it for good); it is purged by the age of
  ``sent_at``. Rows still to be sent, leased, waiting for a retry or
  repeating (``sent_at`` NULL) are never purged, whatever their age.
* ``services``: the rows of conductors whose last heartbeat is that old
  and that are down (a conductor that starts again registers again).
  Agents' rows hold their host's state: ``cyborg-manage host delete``
  retires a host.
* ``usage_records``: a usage record is finished once sent, purged by the
  age of ``sent_at`` (unsent ones are kept, whatever their age).
* ``arq_usage``: a binding interval that ended before the cutoff; the
  periods before it can no longer be audited by ``cyborg-manage usage
  audit``.
* ``usage_audits``: audits of periods that ended before the cutoff,
  except the latest, from whose end the next audits follow.

Accelerator requests are never purged: they belong to Nova, which deletes
them.

Rows are deleted in batches of at most ``batch_size``, each batch in its
own transaction, so purging a large table never holds one long
transaction or its locks.
"""

from collections.abc import Callable
import dataclasses
import datetime

import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import api as db_api
from cyborg.db.models import ARQ_USAGE
from cyborg.db.models import EVENTS
from cyborg.db.models import SERVICES
from cyborg.db.models import USAGE_AUDITS
from cyborg.db.models import USAGE_RECORDS


@dataclasses.dataclass(frozen=True)
class Cutoff:
    """Which rows are old enough to purge."""

    #: Rows finished before this time.
    before: datetime.datetime
    #: Services whose last heartbeat is before this time are down.
    down_since: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Purgeable:
    """A table and the condition of its rows finished before a cutoff."""

    table: sa.Table
    finished: Callable[[Cutoff], sa.ColumnElement]


def _events_finished(cutoff: Cutoff):
    return sa.and_(EVENTS.c.sent_at.is_not(None),
                   EVENTS.c.sent_at < cutoff.before)


def _conductors_gone(cutoff: Cutoff):
    return sa.and_(SERVICES.c.binary == constants.BINARY_CONDUCTOR,
                   SERVICES.c.last_seen_up < cutoff.before,
                   SERVICES.c.last_seen_up < cutoff.down_since)


def _records_sent(cutoff: Cutoff):
    return sa.and_(USAGE_RECORDS.c.sent_at.is_not(None),
                   USAGE_RECORDS.c.sent_at < cutoff.before)


def _intervals_ended(cutoff: Cutoff):
    return ARQ_USAGE.c.unbound_at < cutoff.before


def _audits_ended(cutoff: Cutoff):
    latest = USAGE_AUDITS.alias('latest')
    return sa.and_(USAGE_AUDITS.c.period_end < cutoff.before,
                   USAGE_AUDITS.c.period_end < sa.select(
                       sa.func.max(latest.c.period_end)).scalar_subquery())


#: What ``purge`` deletes, in the order it deletes it.
PURGEABLE: tuple[Purgeable, ...] = (
    Purgeable(EVENTS, _events_finished),
    Purgeable(SERVICES, _conductors_gone),
    Purgeable(USAGE_RECORDS, _records_sent),
    Purgeable(ARQ_USAGE, _intervals_ended),
    Purgeable(USAGE_AUDITS, _audits_ended),
)


def _by_name(name: str) -> Purgeable:
    for purgeable in PURGEABLE:
        if purgeable.table.name == name:
            return purgeable
    raise KeyError(name)


@db_api.connection_reader
def count(context, cutoff: Cutoff) -> dict[str, int]:
    """Per table, the number of rows finished before ``cutoff``."""
    return {p.table.name: context.connection.execute(
        sa.select(sa.func.count()).select_from(p.table)
        .where(p.finished(cutoff))).scalar()
        for p in PURGEABLE}


@db_api.connection_writer
def delete_batch(context, table: str, cutoff: Cutoff,
                 batch_size: int) -> int:
    """Delete up to ``batch_size`` rows of ``table`` finished before
    ``cutoff``, in one transaction; the number deleted."""
    purgeable = _by_name(table)
    # Ids first, then a DELETE by id: MySQL/MariaDB cannot DELETE with a
    # LIMIT from a subquery on the same table, and deleting by primary key
    # locks only the rows deleted.
    ids = list(context.connection.execute(
        sa.select(purgeable.table.c.id)
        .where(purgeable.finished(cutoff))
        .order_by(purgeable.table.c.id).limit(batch_size)).scalars())
    if not ids:
        return 0
    return context.connection.execute(
        sa.delete(purgeable.table).where(purgeable.table.c.id.in_(ids))
    ).rowcount


def purge(context, cutoff: Cutoff, batch_size: int) -> dict[str, int]:
    """Delete every row finished before ``cutoff``, batch by batch;
    the number deleted per table."""
    deleted = {}
    for purgeable in PURGEABLE:
        name = purgeable.table.name
        deleted[name] = 0
        while True:
            done = delete_batch(context, name, cutoff, batch_size)
            deleted[name] += done
            if done < batch_size:
                break
    return deleted
