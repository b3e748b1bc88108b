"""Accelerator requests in the database.

Reads serve the API (one query per list, joined with the device profile
and attach handle). Writes belong to the conductor; every state change is
a compare-and-swap against :mod:`cyborg.common.arq_states`.
"""

import json
from typing import Any

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import arq_states as states
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.objects import device_profile as dp_rules

ARQS = models.ExtendedAcceleratorRequest.__table__
PROFILES = models.DeviceProfile.__table__
HANDLES = models.AttachHandle.__table__
DEPLOYABLES = models.Deployable.__table__
DEVICES = models.Device.__table__

_COLUMNS = [ARQS, PROFILES.c.name.label('device_profile_name'),
            HANDLES.c.uuid.label('attach_handle_uuid'),
            HANDLES.c.attach_type.label('attach_handle_type'),
            HANDLES.c.attach_info.label('attach_handle_info')]


def _select():
    return (sa.select(*_COLUMNS)
            .join(PROFILES, PROFILES.c.id == ARQS.c.device_profile_id)
            .outerjoin(HANDLES, HANDLES.c.id == ARQS.c.attach_handle_id))


def _to_dict(row) -> dict[str, Any]:
    values = dict(row._mapping)
    info = values.get('attach_handle_info')
    values['attach_handle_info'] = json.loads(info) if info else {}
    return values


def _scoped(query, project_id: str | None):
    """Only ``project_id``'s ARQs; None means every project (admin)."""
    if project_id is not None:
        query = query.where(ARQS.c.project_id == project_id)
    return query


@db_api.main_context_manager.reader.connection
def arq_list(context, project_id: str | None,
             instance_uuid: str | None = None,
             uuids: list[str] | None = None) -> list[dict[str, Any]]:
    """ARQs visible to ``project_id`` (None: all), in creation order."""
    query = _scoped(_select(), project_id).order_by(ARQS.c.id)
    if instance_uuid is not None:
        query = query.where(ARQS.c.instance_uuid == instance_uuid)
    if uuids is not None:
        query = query.where(ARQS.c.uuid.in_(list(uuids)))
    return [_to_dict(row) for row in context.connection.execute(query)]


@db_api.main_context_manager.reader.connection
def arq_get(context, uuid: str, project_id: str | None) -> dict[str, Any]:
    row = context.connection.execute(
        _scoped(_select(), project_id).where(ARQS.c.uuid == uuid)).first()
    if row is None:
        raise exception.ARQNotFound(uuid=uuid)
    return _to_dict(row)


@db_api.writer
def arq_create(context, device_profile_name: str,
               project_id: str | None) -> list[dict[str, Any]]:
    """One ARQ per requested accelerator of every group, atomically."""
    session = context.session
    profile = session.execute(sa.select(PROFILES).where(
        PROFILES.c.name == device_profile_name)).first()
    if profile is None:
        raise exception.DeviceProfileNotFound(key='name',
                                              value=device_profile_name)
    groups = json.loads(profile.profile_json)['groups']
    now = timeutils.utcnow()
    rows = [{'uuid': uuidutils.generate_uuid(), 'project_id': project_id,
             'state': states.INITIAL, 'device_profile_id': profile.id,
             'device_profile_group_id': index, 'created_at': now}
            for index, group in enumerate(groups)
            for _ in range(dp_rules.accelerator_count(group))]
    if rows:
        session.execute(sa.insert(ARQS), rows)
    connection = session.connection()
    return [_to_dict(row) for row in connection.execute(
        _select().where(ARQS.c.uuid.in_([r['uuid'] for r in rows]))
        .order_by(ARQS.c.id))] if rows else []


# Writes (conductor only)

BIND_FIELDS = ('hostname', 'device_rp_uuid', 'instance_uuid')


def _lock(session, uuids, project_id: str | None) -> list:
    """The ARQs, locked in id order (so concurrent calls cannot deadlock);
    ARQNotFound for the first uuid that is missing or not visible."""
    rows = list(session.execute(
        _scoped(sa.select(ARQS), project_id)
        .where(ARQS.c.uuid.in_(list(uuids)))
        .order_by(ARQS.c.id).with_for_update()))
    found = {row.uuid for row in rows}
    for uuid in uuids:
        if uuid not in found:
            raise exception.ARQNotFound(uuid=uuid)
    return rows


def _swap(session, row, target: str, values: dict[str, Any]) -> None:
    """Compare-and-swap ``row`` from its state to ``target``."""
    if not states.allowed(row.state, target):
        raise exception.ARQBadState(state=row.state, uuid=row.uuid,
                                    expected=sorted(states.sources(target)))
    updated = session.execute(
        sa.update(ARQS).where(ARQS.c.id == row.id,
                              ARQS.c.state == row.state)
        .values(state=target, updated_at=timeutils.utcnow(),
                **values)).rowcount
    if updated != 1:
        raise exception.ARQBadState(state='(changed concurrently)',
                                    uuid=row.uuid,
                                    expected=sorted(states.sources(target)))


def _release_handle(session, row) -> None:
    if row.attach_handle_id is not None:
        session.execute(sa.update(HANDLES).where(
            HANDLES.c.id == row.attach_handle_id).values(
                in_use=False, updated_at=timeutils.utcnow()))


_CLEARED = dict(hostname=None, device_rp_uuid=None, instance_uuid=None,
                attach_handle_id=None, deployable_id=None, bind_owner=None,
                bind_started_at=None)


@db_api.writer
def arq_bind_start(context, bindings: dict[str, dict[str, str]],
                   project_id: str | None, owner: str) -> list[str]:
    """Move every ARQ to BindStarted, or none; the uuids to bind.

    Binding an ARQ again to the same host, provider and instance while it
    is binding or bound changes nothing (Nova retries are safe).
    """
    session = context.session
    jobs = []
    for row in _lock(session, list(bindings), project_id):
        wanted = bindings[row.uuid]
        same = all(getattr(row, f) == wanted[f] for f in BIND_FIELDS)
        if same and row.state in (states.BIND_STARTED, states.BOUND):
            continue
        values = {f: wanted[f] for f in BIND_FIELDS}
        if wanted.get('project_id'):
            values['project_id'] = wanted['project_id']
        _swap(session, row, states.BIND_STARTED,
              dict(values, bind_owner=owner, bind_error=None,
                   bind_started_at=timeutils.utcnow(),
                   attach_handle_id=None, deployable_id=None))
        jobs.append(row.uuid)
    return jobs


@db_api.writer
def arq_unbind(context, uuids: list[str], project_id: str | None) -> None:
    """Unbind ARQs and release their handles (idempotent per ARQ)."""
    session = context.session
    for row in _lock(session, uuids, project_id):
        if row.state in (states.INITIAL, states.UNBOUND):
            continue
        _release_handle(session, row)
        _swap(session, row, states.UNBOUND, dict(_CLEARED))


@db_api.writer
def arq_mark_deleting(context, uuids: list[str] | None,
                      instance_uuid: str | None,
                      project_id: str | None) -> list[str]:
    """Move ARQs to Deleting and release their handles; their uuids.

    By uuid every ARQ must exist; by instance, none may.
    """
    session = context.session
    if uuids is not None:
        rows = _lock(session, uuids, project_id)
    else:
        rows = list(session.execute(
            _scoped(sa.select(ARQS), project_id)
            .where(ARQS.c.instance_uuid == instance_uuid)
            .order_by(ARQS.c.id).with_for_update()))
    for row in rows:
        if row.state != states.DELETING:
            _release_handle(session, row)
            _swap(session, row, states.DELETING,
                  dict(attach_handle_id=None))
    return [row.uuid for row in rows]


@db_api.writer
def arq_purge(context, uuids: list[str]) -> None:
    """Remove ARQs that reached Deleting."""
    if uuids:
        context.session.execute(sa.delete(ARQS).where(
            ARQS.c.uuid.in_(list(uuids)),
            ARQS.c.state == states.DELETING))
