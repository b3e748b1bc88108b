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

"""Placement provider bookkeeping: what a host's sync reads and records.

``placement_providers`` holds what cyborg last wrote to each resource
provider (its parent, generation and hashes of its inventory and
traits), so that a sync sends only what changed (see
:mod:`cyborg.conductor.placement_sync`). :func:`host_rows` reads
everything a sync of one host starts from in one transaction;
:func:`save_sync` records what it wrote in one transaction.
"""

import dataclasses
from typing import Any

from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import services
from cyborg.db import taints as taints_db
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import PROVIDERS


@dataclasses.dataclass
class HostRows:
    """The rows a sync of one host starts from."""

    #: The agent's service row (``id``, ``sync_requested``,
    #: ``sync_done``, ``rp_name``, ``compute_rp_uuid``...).
    service: Any
    #: The host's deployables with their device's ``status``, ``health``
    #: and ``missing``.
    deployables: list[Any]
    #: Attributes per deployable id: {key: value}.
    attributes: dict[int, dict[str, str]]
    #: The providers' last written rows, by uuid.
    known: dict[str, Any]
    #: Attach handle rows per deployable id, of the deployables of the
    #: devices that hold a ``retained`` deployable (only those).
    handles: dict[int, int] = dataclasses.field(default_factory=dict)
    #: Taints (driver and admin) per device id, of the tainted devices.
    taints: dict[int, list[Any]] = dataclasses.field(default_factory=dict)


@db_api.connection_reader
def host_rows(context, host: str) -> HostRows | None:
    """What the database holds for a sync of ``host``; None for a host
    without an agent."""
    connection = context.connection
    service = services.agent_row(connection, host)
    if service is None:
        return None
    rows = list(connection.execute(
        sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.name,
                  DEPLOYABLES.c.parent_id, DEPLOYABLES.c.device_id,
                  DEPLOYABLES.c.rp_uuid, DEPLOYABLES.c.num_accelerators,
                  DEPLOYABLES.c.retained,
                  DEVICES.c.status, DEVICES.c.health, DEVICES.c.missing)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEVICES.c.hostname == host)))
    attributes: dict[int, dict[str, str]] = {}
    if rows:
        for attr in connection.execute(sa.select(
                ATTRIBUTES.c.deployable_id, ATTRIBUTES.c.key,
                ATTRIBUTES.c.value).where(ATTRIBUTES.c.deployable_id.in_(
                    [row.id for row in rows]))):
            attributes.setdefault(attr.deployable_id, {})[attr.key] = (
                attr.value)
    known = {row.uuid: row for row in connection.execute(
        sa.select(PROVIDERS).where(PROVIDERS.c.host == host))}
    handles: dict[int, int] = {}
    # Counted only on devices that hold a retained deployable: elsewhere no
    # other row holds a unit, and the query is skipped.
    holding = {row.device_id for row in rows if row.retained}
    if holding:
        # Zero first: GROUP BY gives no row for a deployable without handles,
        # and a missing entry would read as "every unit has a handle".
        handles = {row.id: 0 for row in rows if row.device_id in holding}
        handles.update(connection.execute(
            sa.select(HANDLES.c.deployable_id, sa.func.count())
            .where(HANDLES.c.deployable_id.in_(sorted(handles)))
            .group_by(HANDLES.c.deployable_id)).all())
    taints = taints_db.rows_taints(connection,
                                   {row.device_id for row in rows})
    return HostRows(service, rows, attributes, known, handles, taints)


@dataclasses.dataclass
class SyncRecord:
    """What a sync of one host wrote.

    ``providers``: the rows of the providers written (``uuid``, ``host``,
    ``name``, ``parent_uuid``, ``generation``, ``inventory_hash``,
    ``traits_hash``, ``adopted``); ``recorded``: the uuids among them
    that had a row when the sync started; ``compute_rp_uuid``: the host's
    compute node provider, when newly found; ``forgotten``: providers
    deleted from Placement; ``seen``: the change count to mark synced, if
    complete; ``epoch``: the host's ``sync_epoch`` when the sync
    started (None: not known, nothing is checked).
    """

    providers: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    recorded: set[str] = dataclasses.field(default_factory=set)
    compute_rp_uuid: str | None = None
    forgotten: list[str] = dataclasses.field(default_factory=list)
    seen: int | None = None
    epoch: int | None = None


@db_api.connection_writer
def save_sync(context, service_id: int, record: SyncRecord) -> None:
    """Record a sync's progress in one transaction.

    Locks the host's service row first, so that syncs of the host by
    several conductors record one after the other: a row another sync
    inserted meanwhile is updated, not inserted twice.

    Syncs of one host by two conductors may overlap, and then nothing
    tells in which order their writes reached Placement: the one that
    loaded the older state may have written last. Each sync that wrote
    to Placement counts itself in the host's ``sync_epoch``; one that
    finds the count moved since it started (another sync recorded a
    write meanwhile) records its providers without their hashes, and
    the host pending, so the next sync writes them again from the
    latest state.
    """
    connection = context.connection
    services.lock(connection, service_id)
    if record.compute_rp_uuid is not None:
        services.set_compute_rp(connection, service_id,
                                record.compute_rp_uuid)
    rows = record.providers
    if (rows or record.forgotten) and services.record_sync_write(
            connection, service_id, record.epoch):
        rows = [dict(row, inventory_hash=None, traits_hash=None)
                for row in rows]
    _save_providers(connection, rows, record.recorded)
    if record.forgotten:
        connection.execute(sa.delete(PROVIDERS).where(
            PROVIDERS.c.uuid.in_(record.forgotten)))
    if record.seen is not None:
        services.mark_synced(connection, service_id, record.seen)


def _save_providers(connection, rows: list[dict[str, Any]],
                    recorded: set[str]) -> None:
    """Update ``rows``, inserting the missing ones with one statement."""
    now = timeutils.utcnow()
    # Another conductor's sync of the host may have inserted rows this one did
    # not know of: those are updated, not inserted twice.
    unrecorded = [row['uuid'] for row in rows if row['uuid'] not in recorded]
    found = set(connection.execute(sa.select(PROVIDERS.c.uuid).where(
        PROVIDERS.c.uuid.in_(unrecorded))).scalars()) if unrecorded else set()
    new = []
    for row in rows:
        values = dict(row)
        uuid = values.pop('uuid')
        if uuid in recorded or uuid in found:
            updated = connection.execute(sa.update(PROVIDERS).where(
                PROVIDERS.c.uuid == uuid).values(updated_at=now, **values))
            # No row updated: it was deleted meanwhile; what this sync wrote
            # is inserted again.
            if updated.rowcount:
                continue
        new.append(dict(values, uuid=uuid, created_at=now, updated_at=now))
    if new:
        connection.execute(sa.insert(PROVIDERS), new)


@db_api.connection_reader
def hosts_with_adopted(context) -> list[str]:
    """Hosts with a provider still waiting to become fully ours (an
    ``adopted`` row: upstream's name, parent or resource class kept while
    it holds allocations)."""
    return list(context.connection.execute(
        sa.select(PROVIDERS.c.host).where(
            PROVIDERS.c.adopted == sa.true()).distinct()).scalars())
