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

"""The ``services`` table: one row per (host, binary).

Every service's row carries its last heartbeat. An agent's row also
carries the host's inventory bookkeeping: the digest of the last report
applied and the compute node's provider name (written by
:mod:`cyborg.db.inventory`), and the Placement sync counters: every
change of the host's providers counts ``sync_requested`` up, a sync that
wrote them all moves ``sync_done`` up to the count it saw (see
:mod:`cyborg.db.providers`).

The agent's row is also the host's lock: a report, a sync's record and a
host's deletion lock it first, so that they are applied one at a time.

Functions taking a ``connection`` run inside the caller's transaction.
"""

from typing import Any

from oslo_db import exception as db_exc
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import api as db_api
from cyborg.db.models import SERVICES


@db_api.connection_writer
def service_heartbeat(context, host: str, binary: str, now) -> None:
    """Record that ``binary`` on ``host`` is alive at ``now``."""
    connection = context.connection
    # Update first: every heartbeat but a service's first finds its row, so the
    # usual case is one statement.
    updated = connection.execute(
        sa.update(SERVICES)
        .where(SERVICES.c.host == host, SERVICES.c.binary == binary)
        .values(last_seen_up=now, updated_at=now)).rowcount
    if updated:
        return
    try:
        # A savepoint: a duplicate insert then fails alone, not the whole
        # transaction (PostgreSQL aborts a transaction on any error).
        with connection.begin_nested():
            connection.execute(sa.insert(SERVICES).values(
                host=host, binary=binary, last_seen_up=now, created_at=now))
    except db_exc.DBDuplicateEntry:
        # Another process registered the same service meanwhile.
        pass


@db_api.connection_reader
def service_list(context) -> list[dict[str, Any]]:
    query = sa.select(SERVICES).order_by(SERVICES.c.id)
    return [dict(row._mapping) for row in context.connection.execute(query)]


def _agent_of(host: str):
    return sa.select(SERVICES).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT)


def agent_row(connection, host: str):
    """The agent's row of ``host``; None if it has none."""
    return connection.execute(_agent_of(host)).first()


def lock_agent(connection, host: str):
    """The agent's row of ``host``, locked; inserted first if missing."""
    query = _agent_of(host).with_for_update()
    db_api.lock_rows(connection, SERVICES, SERVICES.c.host == host,
                     SERVICES.c.binary == constants.BINARY_AGENT)
    row = connection.execute(query).first()
    if row is not None:
        return row
    now = timeutils.utcnow()
    connection.execute(sa.insert(SERVICES).values(
        host=host, binary=constants.BINARY_AGENT, created_at=now,
        last_seen_up=now, sync_requested=0, sync_done=0))
    return connection.execute(query).first()


def record_report(connection, service_id: int, digest: str,
                  rp_name: str) -> None:
    """A report with ``digest`` was applied: the host's providers are to
    be synced, and the agent is alive."""
    connection.execute(
        sa.update(SERVICES).where(SERVICES.c.id == service_id).values(
            report_hash=digest, rp_name=rp_name,
            # Counted up in SQL under the row lock: a sync that started before
            # this report saw a lower count, so it cannot mark this change
            # synced (see mark_synced).
            sync_requested=SERVICES.c.sync_requested + 1,
            last_seen_up=timeutils.utcnow(), updated_at=timeutils.utcnow()))


def lock(connection, service_id: int) -> None:
    """Lock the row ``service_id``."""
    db_api.lock_rows(connection, SERVICES, SERVICES.c.id == service_id)
    connection.execute(sa.select(SERVICES.c.id).where(
        SERVICES.c.id == service_id).with_for_update())


def set_compute_rp(connection, service_id: int,
                   compute_rp_uuid: str) -> None:
    """The host's compute node provider was found: ``compute_rp_uuid``."""
    connection.execute(sa.update(SERVICES).where(
        SERVICES.c.id == service_id).values(compute_rp_uuid=compute_rp_uuid))


def mark_synced(connection, service_id: int, seen: int) -> None:
    """Record that every change up to ``seen`` is in Placement.

    Never moves backwards, so concurrent syncs finishing in any order
    leave later changes pending.
    """
    connection.execute(sa.update(SERVICES).where(
        SERVICES.c.id == service_id,
        SERVICES.c.sync_done < seen).values(sync_done=seen))


def record_sync_write(connection, service_id: int,
                      started: int | None) -> bool:
    """Count one more sync that wrote to the host's providers (the row
    locked by the caller). Whether another sync recorded a write since
    this one started at epoch ``started`` (None: not known, no); then
    the host is pending again, for a sync from the latest state."""
    row = connection.execute(sa.select(
        SERVICES.c.sync_epoch, SERVICES.c.sync_requested).where(
            SERVICES.c.id == service_id)).one()
    overlapped = started is not None and row.sync_epoch != started
    connection.execute(sa.update(SERVICES).where(
        SERVICES.c.id == service_id).values(
            sync_epoch=row.sync_epoch + 1,
            sync_requested=row.sync_requested + int(overlapped)))
    return overlapped


def count_sync_request(connection, host: str) -> None:
    """Record, in the caller's transaction, that the host's providers
    must be written again: the write that changed them and this request
    commit together, so a conductor that stops before the sync leaves
    the host pending for any conductor's periodic sync."""
    connection.execute(sa.update(SERVICES).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT).values(
            sync_requested=SERVICES.c.sync_requested + 1))


@db_api.connection_writer
def request_sync(context, host: str) -> None:
    """Record that the host's providers must be written again."""
    count_sync_request(context.connection, host)


@db_api.connection_reader
def hosts_pending_sync(context) -> list[str]:
    """Hosts with changes not yet in Placement."""
    return [row.host for row in context.connection.execute(
        sa.select(SERVICES.c.host).where(
            SERVICES.c.binary == constants.BINARY_AGENT,
            SERVICES.c.sync_requested > SERVICES.c.sync_done))]


@db_api.connection_reader
def sync_pending(context, host: str) -> bool:
    """Whether the host has changes not yet in Placement."""
    return bool(context.connection.execute(
        sa.select(SERVICES.c.id).where(
            SERVICES.c.host == host,
            SERVICES.c.binary == constants.BINARY_AGENT,
            SERVICES.c.sync_requested > SERVICES.c.sync_done)).first())
