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

"""Queries behind the devices, deployables and attributes APIs.

Lists are one query each (deployables' attributes, devices' allocations:
one more query for the whole page), never a query per row.
"""

from typing import Any

from oslo_db import exception as db_exc
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import services
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.domain import providers


def _page(query, table, sort_key: str | None, sort_dir: str | None,
          limit: int | None, default_desc: bool):
    """Order by ``sort_key`` (then id), as upstream does by default."""
    descending = (sort_dir == 'desc') if sort_dir else default_desc
    columns = [table.c[sort_key]] if sort_key else []
    if not sort_key and default_desc:
        columns = [table.c.created_at]
    columns.append(table.c.id)
    query = query.order_by(*[c.desc() if descending else c.asc()
                             for c in columns])
    if limit is not None:
        query = query.limit(limit)
    return query


def _not_found(resource: str, key: str, value) -> exception.ResourceNotFound:
    return exception.ResourceNotFound(resource=resource, key=key, value=value)


# Devices

@db_api.connection_reader
def device_list(context, filters: dict[str, str], sort_key=None,
                sort_dir=None, limit=None, allocations: bool = False
                ) -> list[dict[str, Any]]:
    """The devices matching ``filters``; with ``allocations``, each with
    its ``deployables`` (see :func:`_with_allocations`), read with one
    more statement for the whole page."""
    query = sa.select(DEVICES)
    for key, value in filters.items():
        query = query.where(DEVICES.c[key] == value)
    query = _page(query, DEVICES, sort_key, sort_dir, limit,
                  default_desc=bool(filters or sort_key or limit))
    devices = [dict(row._mapping)
               for row in context.connection.execute(query)]
    if allocations:
        _with_allocations(context.connection, devices)
    return devices


@db_api.connection_reader
def device_get(context, uuid: str, allocations: bool = False
               ) -> dict[str, Any]:
    """A device; with ``allocations``, with its ``deployables`` (see
    :func:`_with_allocations`)."""
    row = context.connection.execute(
        sa.select(DEVICES).where(DEVICES.c.uuid == uuid)).first()
    if row is None:
        raise _not_found('Device', 'uuid', uuid)
    device = dict(row._mapping)
    if allocations:
        _with_allocations(context.connection, [device])
    return device


@db_api.connection_reader
def bound_device_addresses(context, host: str) -> list[str]:
    """The addresses of ``host``'s devices that hold an accelerator
    request (one bound or binding on a deployable of the device) or an
    attach handle in use (a release not done yet): those its agent must
    not reset."""
    on_device = sa.and_(DEPLOYABLES.c.device_id == DEVICES.c.id)
    held = sa.or_(
        sa.exists().where(on_device, ARQS.c.deployable_id ==
                          DEPLOYABLES.c.id),
        sa.exists().where(on_device, HANDLES.c.deployable_id ==
                          DEPLOYABLES.c.id, HANDLES.c.in_use))
    query = (sa.select(DEVICES.c.address)
             .where(DEVICES.c.hostname == host, held)
             .order_by(DEVICES.c.address))
    return [row.address for row in context.connection.execute(query)]


def _with_allocations(connection, devices: list[dict[str, Any]]) -> None:
    """Give each of ``devices`` its ``deployables``, in the order they
    were added: dicts of ``uuid``, ``name``, ``parent_uuid``,
    ``num_accelerators`` and ``allocations``, the ARQs holding one of the
    deployable's attach handles (``uuid``, ``state`` as stored,
    ``instance_uuid``, ``project_id``). One statement for all the
    devices."""
    by_device: dict[int, list[dict[str, Any]]] = {
        device['id']: [] for device in devices}
    if not by_device:
        return
    held = HANDLES.join(ARQS, ARQS.c.attach_handle_id == HANDLES.c.id)
    query = (sa.select(
        DEPLOYABLES.c.id, DEPLOYABLES.c.device_id, DEPLOYABLES.c.uuid,
        DEPLOYABLES.c.name, DEPLOYABLES.c.parent_id,
        DEPLOYABLES.c.num_accelerators, ARQS.c.uuid.label('arq_uuid'),
        ARQS.c.state, ARQS.c.instance_uuid, ARQS.c.project_id)
        .select_from(DEPLOYABLES.outerjoin(
            held, HANDLES.c.deployable_id == DEPLOYABLES.c.id))
        .where(DEPLOYABLES.c.device_id.in_(list(by_device)))
        .order_by(DEPLOYABLES.c.id, ARQS.c.id))
    deployables: dict[int, dict[str, Any]] = {}
    parents: dict[int, int] = {}
    for row in connection.execute(query):
        deployable = deployables.get(row.id)
        if deployable is None:
            deployable = deployables[row.id] = {
                'uuid': row.uuid, 'name': row.name, 'parent_uuid': None,
                'num_accelerators': row.num_accelerators,
                'allocations': []}
            by_device[row.device_id].append(deployable)
            if row.parent_id is not None:
                parents[row.id] = row.parent_id
        if row.arq_uuid is not None:
            deployable['allocations'].append({
                'uuid': row.arq_uuid, 'state': row.state,
                'instance_uuid': row.instance_uuid,
                'project_id': row.project_id})
    # A parent is a deployable of the same device, so it was read too.
    for child, parent in parents.items():
        deployables[child]['parent_uuid'] = deployables[parent]['uuid']
    for device in devices:
        device['deployables'] = by_device[device['id']]


@db_api.connection_writer
def device_set_status(context, uuid: str, status: str) -> dict[str, Any]:
    """Set a device's status; returns the device as it was before. A
    change is a Placement sync request of the device's host, recorded
    in the same transaction."""
    connection = context.connection
    row = connection.execute(sa.select(DEVICES).where(
        DEVICES.c.uuid == uuid).with_for_update()).first()
    if row is None:
        raise _not_found('Device', 'uuid', uuid)
    if row.status != status:
        connection.execute(sa.update(DEVICES).where(DEVICES.c.id == row.id)
                           .values(status=status,
                                   updated_at=timeutils.utcnow()))
        services.count_sync_request(connection, row.hostname)
    return dict(row._mapping)


# Deployables

def _attributes_by_deployable(connection, ids) -> dict[int, list]:
    result: dict[int, list] = {}
    if not ids:
        return result
    for row in connection.execute(
            sa.select(ATTRIBUTES.c.deployable_id, ATTRIBUTES.c.key,
                      ATTRIBUTES.c.value)
            .where(ATTRIBUTES.c.deployable_id.in_(list(ids)))
            .order_by(ATTRIBUTES.c.id)):
        result.setdefault(row.deployable_id, []).append({row.key: row.value})
    return result


def _with_attributes(connection, rows) -> list[dict[str, Any]]:
    deployables = [dict(row._mapping) for row in rows]
    attributes = _attributes_by_deployable(
        connection, [d['id'] for d in deployables])
    for deployable in deployables:
        deployable['attributes_list'] = attributes.get(deployable['id'], [])
    return deployables


@db_api.connection_reader
def deployable_list(context, name=None, sort_key=None, sort_dir=None,
                    limit=None) -> list[dict[str, Any]]:
    query = sa.select(DEPLOYABLES)
    if name is not None:
        query = query.where(DEPLOYABLES.c.name == name)
    query = _page(query, DEPLOYABLES, sort_key, sort_dir, limit,
                  default_desc=name is not None or bool(sort_key or limit))
    return _with_attributes(context.connection,
                            context.connection.execute(query))


@db_api.connection_reader
def deployable_get(context, uuid: str) -> dict[str, Any]:
    rows = list(context.connection.execute(
        sa.select(DEPLOYABLES).where(DEPLOYABLES.c.uuid == uuid)))
    if not rows:
        raise _not_found('Deployable', 'uuid', uuid)
    return _with_attributes(context.connection, rows)[0]


# Attributes

@db_api.connection_reader
def attribute_list(context, deployable_id: int | None = None,
                   key: str | None = None) -> list[dict[str, Any]]:
    query = sa.select(ATTRIBUTES).order_by(ATTRIBUTES.c.id)
    if deployable_id is not None:
        query = query.where(ATTRIBUTES.c.deployable_id == deployable_id)
    if key is not None:
        query = query.where(ATTRIBUTES.c.key == key)
    return [dict(row._mapping) for row in context.connection.execute(query)]


@db_api.connection_reader
def attribute_get(context, uuid: str) -> dict[str, Any]:
    row = context.connection.execute(
        sa.select(ATTRIBUTES).where(ATTRIBUTES.c.uuid == uuid)).first()
    if row is None:
        raise _not_found('Attribute', 'uuid', uuid)
    return dict(row._mapping)


@db_api.connection_writer
def attribute_create(context, values: dict[str, Any]) -> dict[str, Any]:
    """Add an attribute; one that shapes Placement (see
    :func:`cyborg.domain.providers.shapes_placement`) is a Placement
    sync request of the deployable's host, in the same transaction."""
    connection = context.connection
    deployable = connection.execute(
        sa.select(DEPLOYABLES.c.id, DEVICES.c.hostname)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEPLOYABLES.c.id == values['deployable_id'])).first()
    if deployable is None:
        raise _not_found('Deployable', 'id', values['deployable_id'])
    uuid = values.get('uuid') or uuidutils.generate_uuid()
    try:
        with connection.begin_nested():
            connection.execute(sa.insert(ATTRIBUTES).values(
                uuid=uuid, deployable_id=values['deployable_id'],
                key=values['key'], value=values['value'],
                created_at=timeutils.utcnow()))
    except db_exc.DBDuplicateEntry:
        raise exception.Conflict(
            reason='deployable %s already has an attribute %s, or uuid %s '
                   'is taken' % (values['deployable_id'], values['key'],
                                 uuid))
    if providers.shapes_placement(values['key']):
        services.count_sync_request(connection, deployable.hostname)
    return dict(connection.execute(sa.select(ATTRIBUTES).where(
        ATTRIBUTES.c.uuid == uuid)).first()._mapping)


@db_api.connection_writer
def attribute_delete(context, uuid: str) -> dict[str, Any]:
    """Delete an attribute; returns it. One that shapes Placement is a
    Placement sync request of its host, in the same transaction."""
    connection = context.connection
    row = connection.execute(
        sa.select(ATTRIBUTES, DEVICES.c.hostname)
        .join(DEPLOYABLES, DEPLOYABLES.c.id == ATTRIBUTES.c.deployable_id)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(ATTRIBUTES.c.uuid == uuid)).first()
    if row is None:
        raise _not_found('Attribute', 'uuid', uuid)
    connection.execute(sa.delete(ATTRIBUTES).where(
        ATTRIBUTES.c.id == row.id))
    if providers.shapes_placement(row.key):
        services.count_sync_request(connection, row.hostname)
    return {key: value for key, value in row._mapping.items()
            if key != 'hostname'}


@db_api.connection_reader
def deployable_host(context, deployable_id: int) -> str | None:
    """The host of deployable ``deployable_id`` (None if it is gone)."""
    return host_of(context.connection, deployable_id)


def host_of(connection, deployable_id: int) -> str | None:
    """:func:`deployable_host` inside a caller's transaction: the host
    of a deployable is its device's."""
    return connection.execute(
        sa.select(DEVICES.c.hostname)
        .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
        .where(DEPLOYABLES.c.id == deployable_id)).scalar()
