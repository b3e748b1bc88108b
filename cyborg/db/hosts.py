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
"""Retiring a compute host whose agent is gone: the queries.

A host's rows are its service rows (``services.host``), its devices
(``devices.hostname``) with their control paths, deployables, attach
handles and attributes, and the resource providers cyborg recorded for
it (``placement_providers.host``, and each deployable's ``rp_uuid``).

A host is in use while an accelerator request holds one of its attach
handles, or is binding, bound or failing on it: such a host is never
retired (the request belongs to an instance Nova still knows).
Requests that merely point at one of its deployables without a handle
lose that pointer, as when the agent reports the device gone.
"""

import dataclasses
import datetime
from typing import Any

import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import taints as taints_db
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import CPIDS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import PROVIDERS
from cyborg.db.models import SERVICES
from cyborg.domain import arq_states as states

#: States of a request that is at work on its host even before it holds
#: an attach handle there.
ACTIVE_STATES = (states.BIND_STARTED, states.BIND_FAILING, states.BOUND)


class HostInUse(Exception):
    """Accelerator requests still hold or bind the host's devices."""

    def __init__(self, host: str, arqs: list[tuple[str, str]]):
        self.host = host
        self.arqs = arqs
        shown = ', '.join('%s (%s)' % arq for arq in arqs[:5])
        more = ' and %d more' % (len(arqs) - 5) if len(arqs) > 5 else ''
        super().__init__(
            'Host %s is in use by %d accelerator request(s): %s%s; unbind '
            'or delete them (delete or move their instances) first.'
            % (host, len(arqs), shown, more))


@dataclasses.dataclass
class Provider:
    """A resource provider cyborg created for a host."""

    uuid: str
    parent_uuid: str | None


@dataclasses.dataclass
class HostRecord:
    """What the database holds about one host."""

    host: str
    #: Service rows: dicts with ``binary`` and ``last_seen_up``.
    services: list[dict[str, Any]]
    #: Row counts per table of the host's hardware.
    counts: dict[str, int]
    #: The providers to delete, children before parents; never the
    #: compute node providers (Nova's) in ``compute_rp_uuids``.
    providers: list[Provider]
    compute_rp_uuids: set[str]
    #: (uuid, state) of the requests that keep the host in use.
    blocking_arqs: list[tuple[str, str]]

    @property
    def known(self) -> bool:
        return bool(self.services or any(self.counts.values())
                    or self.providers)

    def alive_services(self, now: datetime.datetime,
                       down_time: float) -> list[str]:
        """Binaries whose last heartbeat is within ``down_time``."""
        limit = now - datetime.timedelta(seconds=down_time)
        return [s['binary'] for s in self.services
                if s['last_seen_up'] is not None
                and s['last_seen_up'] > limit]


def _ids(connection, query) -> list[int]:
    return list(connection.execute(query).scalars())


def _hardware_ids(connection, host: str) -> dict[str, list[int]]:
    """Ids of the host's rows, per table."""
    devices = _ids(connection, sa.select(DEVICES.c.id).where(
        DEVICES.c.hostname == host))
    deployables = _ids(connection, sa.select(DEPLOYABLES.c.id).where(
        DEPLOYABLES.c.device_id.in_(devices))) if devices else []
    return {
        'devices': devices,
        'controlpath_ids': _ids(connection, sa.select(CPIDS.c.id).where(
            CPIDS.c.device_id.in_(devices))) if devices else [],
        'deployables': deployables,
        'attach_handles': _ids(connection, sa.select(HANDLES.c.id).where(
            HANDLES.c.deployable_id.in_(deployables))) if deployables else [],
        'attributes': _ids(connection, sa.select(ATTRIBUTES.c.id).where(
            ATTRIBUTES.c.deployable_id.in_(deployables)))
        if deployables else [],
    }


def _blocking_arqs(connection, host: str, handle_ids: list[int],
                   lock: bool = False) -> list[tuple[str, str]]:
    condition = sa.and_(ARQS.c.hostname == host,
                        ARQS.c.state.in_(ACTIVE_STATES))
    if handle_ids:
        condition = sa.or_(condition, ARQS.c.attach_handle_id.in_(handle_ids))
    query = sa.select(ARQS.c.uuid, ARQS.c.state).where(condition).order_by(
        ARQS.c.id)
    if lock:
        query = query.with_for_update()
    return [(row.uuid, row.state) for row in connection.execute(query)]


def _children_first(providers: dict[str, str | None]) -> list[Provider]:
    """``providers`` (uuid: parent uuid), each after its descendants."""
    def depth(uuid: str) -> int:
        seen = set()
        level = 0
        while providers.get(uuid) in providers and uuid not in seen:
            seen.add(uuid)
            uuid = providers[uuid]
            level += 1
        return level
    order = sorted(providers, key=lambda uuid: (-depth(uuid), uuid))
    return [Provider(uuid, providers[uuid]) for uuid in order]


@db_api.connection_reader
def host_record(context, host: str) -> HostRecord:
    """Everything the database holds about ``host``."""
    connection = context.connection
    services = [dict(row._mapping) for row in connection.execute(
        sa.select(SERVICES.c.binary, SERVICES.c.last_seen_up,
                  SERVICES.c.compute_rp_uuid)
        .where(SERVICES.c.host == host).order_by(SERVICES.c.id))]
    compute = {s['compute_rp_uuid'] for s in services
               if s['compute_rp_uuid']}
    ids = _hardware_ids(connection, host)
    providers: dict[str, str | None] = {
        row.uuid: row.parent_uuid for row in connection.execute(
            sa.select(PROVIDERS.c.uuid, PROVIDERS.c.parent_uuid)
            .where(PROVIDERS.c.host == host))}
    if ids['deployables']:
        for uuid in connection.execute(
                sa.select(DEPLOYABLES.c.rp_uuid).where(
                    DEPLOYABLES.c.id.in_(ids['deployables']),
                    DEPLOYABLES.c.rp_uuid.is_not(None))).scalars():
            providers.setdefault(uuid, None)
    for uuid in compute:
        # Nova's provider: never cyborg's to delete.
        providers.pop(uuid, None)
    return HostRecord(
        host=host, services=services,
        counts={table: len(rows) for table, rows in ids.items()},
        providers=_children_first(providers), compute_rp_uuids=compute,
        blocking_arqs=_blocking_arqs(connection, host,
                                     ids['attach_handles']))


@db_api.connection_writer
def delete_host(context, host: str) -> dict[str, int]:
    """Delete every row of ``host`` in one transaction; rows deleted per
    table. Raises :class:`HostInUse` (deleting nothing) if a request
    holds or binds one of its devices."""
    connection = context.connection
    # The agent's service row first: the lock inventory reports of the
    # host take, so none is applied while the host is deleted.
    connection.execute(sa.select(SERVICES.c.id).where(
        SERVICES.c.host == host).with_for_update())
    ids = _hardware_ids(connection, host)
    blocking = _blocking_arqs(connection, host, ids['attach_handles'],
                              lock=True)
    if blocking:
        raise HostInUse(host, blocking)
    deleted = {}
    if ids['deployables']:
        # Requests without a handle that still name a deployable of the
        # host (e.g. a failed bind) keep the request, not the pointer.
        connection.execute(sa.update(ARQS).where(
            ARQS.c.deployable_id.in_(ids['deployables'])
        ).values(deployable_id=None))
        # Deployables of the host point at each other; clear those links
        # so that they can go in one statement.
        connection.execute(sa.update(DEPLOYABLES).where(
            DEPLOYABLES.c.id.in_(ids['deployables'])
        ).values(parent_id=None, root_id=None))
    # The devices' taints (driver and admin) go with them.
    taints_db.delete_device_taints(connection, ids['devices'])
    for table, name in ((ATTRIBUTES, 'attributes'),
                        (HANDLES, 'attach_handles'),
                        (DEPLOYABLES, 'deployables'),
                        (CPIDS, 'controlpath_ids'),
                        (DEVICES, 'devices')):
        deleted[name] = connection.execute(
            sa.delete(table).where(table.c.id.in_(ids[name]))
        ).rowcount if ids[name] else 0
    deleted['placement_providers'] = connection.execute(
        sa.delete(PROVIDERS).where(PROVIDERS.c.host == host)).rowcount
    deleted['services'] = connection.execute(
        sa.delete(SERVICES).where(SERVICES.c.host == host)).rowcount
    return deleted
