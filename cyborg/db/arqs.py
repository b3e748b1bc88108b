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

"""Accelerator requests in the database: the API's reads, creation, and
the compare-and-swap transitions of every write.

Reads serve the API (one query per list, joined with the device profile
and attach handle). Writes belong to the conductor; every state change is
a compare-and-swap against :mod:`cyborg.domain.arq_states` on rows locked
first (:func:`lock`, :func:`swap`). Unbinding and deleting give the
attach handles back (:func:`release_handles`); binding, the claim of
those handles and the end of bind jobs are :mod:`cyborg.db.binding`.

The statements of the Nova flow are built once per shape
(``functools.cache``) and take their values as bind parameters: building
a SQLAlchemy statement costs several times more CPU than running it.
"""

from collections.abc import Callable
import dataclasses
import datetime
import functools
import json
import types
from typing import Any

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import device_profiles as profiles_db
from cyborg.db import nova_events
from cyborg.db import quotas as quotas_db
from cyborg.db import usage as usage_db
from cyborg.db.models import ARQS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import PROFILES
from cyborg.domain import arq_states as states
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import device_tree
from cyborg.domain import implicit_profiles
from cyborg.domain import quotas as quota_rules

_COLUMNS = [ARQS, PROFILES.c.name.label('device_profile_name'),
            HANDLES.c.uuid.label('attach_handle_uuid'),
            HANDLES.c.attach_type.label('attach_handle_type'),
            HANDLES.c.attach_info.label('attach_handle_info')]


def _to_dict(row) -> dict[str, Any]:
    values = dict(row._mapping)
    info = values.get('attach_handle_info')
    values['attach_handle_info'] = json.loads(info) if info else {}
    return values


def _where(query, scoped: bool, filters: tuple[str, ...]):
    """``query`` limited to the ``project_id`` parameter's ARQs (if
    ``scoped``; unscoped is every project, for admins) and to those
    matching the parameter of each of ``filters``: ``uuids`` (a list),
    or a column (``uuid``, ``instance_uuid``)."""
    if scoped:
        query = query.where(ARQS.c.project_id == sa.bindparam('project_id'))
    for name in filters:
        if name == 'uuids':
            query = query.where(
                ARQS.c.uuid.in_(sa.bindparam('uuids', expanding=True)))
        else:
            query = query.where(ARQS.c[name] == sa.bindparam(name))
    return query


def _params(project_id: str | None, filters: dict[str, Any]
            ) -> dict[str, Any]:
    params = dict(filters, project_id=project_id)
    if 'uuids' in params:
        params['uuids'] = list(params['uuids'])
    return params


@functools.cache
def _view_query(scoped: bool, filters: tuple[str, ...]):
    """ARQs with their profile name and attach handle, by id."""
    return _where(sa.select(*_COLUMNS)
                  .join(PROFILES, PROFILES.c.id == ARQS.c.device_profile_id)
                  .outerjoin(HANDLES, HANDLES.c.id == ARQS.c.attach_handle_id),
                  scoped, filters).order_by(ARQS.c.id)


def _view(connection, project_id: str | None, **filters: Any):
    """Rows of the ARQs visible to ``project_id`` matching ``filters``."""
    # The filters' names, sorted, are the cache key of the statement;
    # their values go in as parameters.
    query = _view_query(project_id is not None, tuple(sorted(filters)))
    return connection.execute(query, _params(project_id, filters))


@db_api.connection_reader
def arq_list(context, project_id: str | None,
             instance_uuid: str | None = None,
             uuids: list[str] | None = None) -> list[dict[str, Any]]:
    """ARQs visible to ``project_id`` (None: all), in creation order."""
    filters = {name: value for name, value in (
        ('instance_uuid', instance_uuid), ('uuids', uuids))
        if value is not None}
    return [_to_dict(row)
            for row in _view(context.connection, project_id, **filters)]


def describe(connection, uuids: list[str]) -> list[dict[str, Any]]:
    """The ARQs ``uuids`` as :func:`arq_list` gives them, read in the
    transaction of ``connection`` (for the notifications of a write,
    without a transaction of their own)."""
    if not uuids:
        return []
    return [_to_dict(row) for row in _view(connection, None, uuids=uuids)]


@db_api.connection_reader
def arq_get(context, uuid: str, project_id: str | None) -> dict[str, Any]:
    row = _view(context.connection, project_id, uuid=uuid).first()
    if row is None:
        raise exception.ARQNotFound(uuid=uuid)
    return _to_dict(row)


_PROFILE_BY_NAME = sa.select(PROFILES.c.id, PROFILES.c.profile_json,
                             PROFILES.c.enabled).where(
    PROFILES.c.name == sa.bindparam('name'))
# The same, with the number of ARQs the project holds (``held``): one
# round trip for both.
_PROFILE_AND_HELD = _PROFILE_BY_NAME.add_columns(
    sa.select(sa.func.count()).select_from(ARQS)
    .where(ARQS.c.project_id == sa.bindparam('project_id'))
    .scalar_subquery().label('held'))
_INSERT = sa.insert(ARQS)
#: A count of a project's usage against its limits, in the transaction
#: of a connection, after the insert of its new ARQs: raises to refuse.
QuotaCount = Callable[[Any], None]

#: A project's limits for its new ARQs: (project id, what each new ARQ
#: counts) -> the count to make once the project's quota row is locked,
#: or None when no limit applies to what they count (nothing to lock).
QuotaCheck = Callable[[str, list[dict[str, int]]], QuotaCount | None]


class _NoQuotaRow(Exception):
    """The project of a limited creation has no quota row yet."""


def arq_create(context, device_profile_name: str,
               project_id: str | None, max_arqs: int | None = None,
               max_project_arqs: int | None = None,
               quota_check: QuotaCheck | None = None
               ) -> list[dict[str, Any]]:
    """One ARQ per requested accelerator of every group, atomically.

    Nothing is created when the profile is disabled (409), when that is
    more than ``max_arqs`` (400), or would give ``project_id`` more than
    ``max_project_arqs`` (403). With a ``quota_check`` (and a project),
    ``quota_check(project_id, resources)`` is asked for the project's
    limits of what each new ARQ counts before the insert; when one
    applies, the project's quota row is locked after the insert and the
    count it answered is made in the transaction: what it raises rolls the
    creation back.
    """
    limited = quota_check is not None and project_id is not None
    try:
        return _arq_create(context, device_profile_name, project_id,
                           max_arqs, max_project_arqs,
                           quota_check if limited else None)
    except _NoQuotaRow:
        quotas_db.add_project(context, project_id)
    return _arq_create(context, device_profile_name, project_id, max_arqs,
                       max_project_arqs, quota_check)


@db_api.connection_writer
def _arq_create(context, device_profile_name: str,
                project_id: str | None, max_arqs: int | None,
                max_project_arqs: int | None,
                quota_check: QuotaCheck | None) -> list[dict[str, Any]]:
    connection = context.connection
    # No cap, or no project to count for: no count in the query.
    limited = max_project_arqs is not None and project_id is not None
    profile = connection.execute(
        _PROFILE_AND_HELD if limited else _PROFILE_BY_NAME,
        {'name': device_profile_name, 'project_id': project_id}).first()
    if (profile is None and implicit_profiles.is_implicit(device_profile_name)
            and profiles_db.store_implicit_profile(connection,
                                                   device_profile_name)):
        profile = connection.execute(
            _PROFILE_AND_HELD if limited else _PROFILE_BY_NAME,
            {'name': device_profile_name, 'project_id': project_id}).first()
    if profile is None:
        raise exception.DeviceProfileNotFound(key='name',
                                              value=device_profile_name)
    if not profile.enabled:
        raise exception.DeviceProfileDisabled(name=device_profile_name)
    groups = json.loads(profile.profile_json)['groups']
    counts = [dp_rules.accelerator_count(group) for group in groups]
    count = sum(counts)
    if max_arqs is not None:
        dp_rules.check_limit('ARQs the device profile asks for', count,
                             max_arqs, '[api] max_arqs_per_request')
    # ``held`` is read without a lock: concurrent creations may each
    # overshoot the cap by one request (a safety cap, not a quota; see
    # [api] max_arqs_per_project).
    if limited and profile.held + count > max_project_arqs:
        raise exception.ProjectLimitExceeded(
            project=project_id, count=profile.held + count,
            limit=max_project_arqs)
    now = timeutils.utcnow()
    resources = [quota_rules.arq_resources(group) for group in groups]
    group_json = [json.dumps(group, sort_keys=True) for group in groups]
    rows = [{'uuid': uuidutils.generate_uuid(), 'project_id': project_id,
             'state': states.INITIAL, 'device_profile_id': profile.id,
             'device_profile_group_id': index, 'created_at': now,
             'resources': _resources_column(resources[index], unit),
             'group_json': group_json[index]}
            for index, amount in enumerate(counts)
            for unit in range(amount)]
    # The limits are read (Keystone, when not cached) before the insert.
    count_usage = None if quota_check is None else quota_check(
        project_id, [resources[index][unit]
                     for index, amount in enumerate(counts)
                     for unit in range(amount)])
    if rows:
        connection.execute(_INSERT, rows)  # one executemany for them all
    if count_usage is not None:
        # Locked last, so that the creations of a project wait for each
        # other only for the count and the commit. Each statement reads
        # what committed before it (READ COMMITTED on every database):
        # the count comes after every creation that held the lock before.
        if not quotas_db.lock_project(connection, project_id):
            raise _NoQuotaRow()
        count_usage(connection)
    # Built from what was inserted: no statement to read the rows back.
    return [dict(row, device_profile_name=device_profile_name,
                 updated_at=None, **_NEW_ARQ) for row in rows]


def _resources_column(resources: list[dict[str, int]], unit: int
                      ) -> str | None:
    """The ``resources`` of a group's ``unit``-th ARQ."""
    return quota_rules.encode(resources[unit]) if unit < len(resources) \
        else None


# What a new ARQ holds besides the values it is created with.
_NEW_ARQ = dict(hostname=None, device_rp_uuid=None, instance_uuid=None,
                attach_handle_id=None, deployable_id=None, bind_owner=None,
                bind_started_at=None, bind_error=None, bound_at=None,
                attach_handle_uuid=None, attach_handle_type=None,
                attach_handle_info={}, alternative=None)


# Writes (conductor only). Rows are locked, then changed only through
# swap, which keeps the in-memory row equal to the database's.


def _lock_column(name: str):
    """An ARQ column, or ``profile_json``: its device profile's groups
    (a scalar subquery, so that only the ARQ rows are locked), read only
    for an ARQ without its own group (``group_json``), older than it."""
    if name != 'profile_json':
        return ARQS.c[name]
    profile = (sa.select(PROFILES.c.profile_json)
               .where(PROFILES.c.id == ARQS.c.device_profile_id)
               .scalar_subquery())
    return sa.case((ARQS.c.group_json.is_(None), profile)).label(
        'profile_json')


@functools.cache
def _lock_query(scoped: bool, filters: tuple[str, ...],
                columns: tuple[str, ...] | None = None):
    """ARQ rows (only ``columns`` if given) locked in id order (so
    concurrent writers cannot deadlock); see :func:`_where`."""
    query = (sa.select(ARQS) if columns is None
             else sa.select(*[_lock_column(column) for column in columns]))
    return (_where(query, scoped, filters).order_by(ARQS.c.id)
            .with_for_update())


# What deleting (and unbinding) reads of the ARQs it locks, and what a
# bind does: each column is a descriptor the database sends and the
# driver parses (PyMySQL in Python) with every result.
DELETE_COLUMNS = ('id', 'uuid', 'state', 'instance_uuid',
                  'attach_handle_id')


def lock_rows(connection, project_id: str | None,
              columns: tuple[str, ...] | None = None, **filters: Any
              ) -> list[types.SimpleNamespace]:
    """The ARQs visible to ``project_id`` (None: all) matching
    ``filters`` (``uuids``, ``uuid``, ``instance_uuid``), locked, as
    mutable rows for :func:`swap`: every column, or only ``columns``."""
    query = _lock_query(project_id is not None, tuple(sorted(filters)),
                        columns)
    rows = connection.execute(query, _params(project_id, filters))
    return [types.SimpleNamespace(**row._mapping) for row in rows]


def lock(connection, uuids, project_id: str | None,
         columns: tuple[str, ...] | None = None
         ) -> list[types.SimpleNamespace]:
    """The ARQs ``uuids``, locked (every column, or only ``columns``);
    ARQNotFound for the first uuid that is missing or not visible to
    ``project_id``."""
    rows = lock_rows(connection, project_id, columns, uuids=uuids)
    found = {row.uuid for row in rows}
    # In the request's order: the 404 names the first uuid it lacks.
    for uuid in uuids:
        if uuid not in found:
            raise exception.ARQNotFound(uuid=uuid)
    return rows


def check_transition(row, target: str, source: str | None = None) -> None:
    """ARQBadState unless ``row`` (or, given, state ``source``) may move
    to ``target``."""
    source = row.state if source is None else source
    if not states.allowed(source, target):
        raise exception.ARQBadState(state=source, uuid=row.uuid,
                                    expected=sorted(states.sources(target)))


@functools.cache
def _swap_statement(columns: tuple[str, ...]):
    """UPDATE of ``columns`` (parameters ``new_<column>``) of the ARQ
    ``row_id`` if it still is in state ``old_state``."""
    return (sa.update(ARQS)
            .where(ARQS.c.id == sa.bindparam('row_id'),
                   ARQS.c.state == sa.bindparam('old_state'))
            .values({column: sa.bindparam('new_' + column)
                     for column in columns}))


def swap(connection, row, target: str, values: dict[str, Any],
         via: str | None = None) -> None:
    """Compare-and-swap locked ``row`` from its state to ``target``.

    With ``via``, the row passes through that state on the way, inside
    this transaction (nobody else sees it): both transitions are checked
    and one UPDATE is written.
    """
    if via is not None:
        check_transition(row, via)
        check_transition(row, target, source=via)
    else:
        check_transition(row, target)
    now = timeutils.utcnow()
    new = dict(values, state=target, updated_at=now)
    params = {'new_' + column: value for column, value in new.items()}
    # Sorted columns: one cached statement per set of columns.
    updated = connection.execute(
        _swap_statement(tuple(sorted(new))),
        dict(params, row_id=row.id, old_state=row.state)).rowcount
    # No row: its state changed since it was read (it was not locked, or
    # not by this transaction).
    if updated != 1:
        raise exception.ARQBadState(state='(changed concurrently)',
                                    uuid=row.uuid,
                                    expected=sorted(states.sources(target)))
    vars(row).update(values, state=target, updated_at=now)


@dataclasses.dataclass(frozen=True)
class PreparedHandle:
    """An attach handle whose preparation (an mdev, a vGPU type...) its
    host's agent must undo before the handle is free again."""
    id: int
    uuid: str
    attach_type: str
    attach_info: dict[str, Any]
    host: str
    driver: str | None
    #: What the agent undoes (:class:`device_tree.Preparation`).
    preparation: str = device_tree.Preparation.NONE.value


def _prepared():
    """Handles of deployables that declare a preparation."""
    return HANDLES.c.deployable_id.in_(
        sa.select(DEPLOYABLES.c.id).where(
            DEPLOYABLES.c.preparation != device_tree.Preparation.NONE.value))


_FREE_UNPREPARED = (
    sa.update(HANDLES)
    .where(HANDLES.c.id.in_(sa.bindparam('ids', expanding=True)),
           ~_prepared())
    .values(in_use=False, updated_at=sa.bindparam('now')))


def release_handles(connection, rows) -> list[PreparedHandle]:
    """Free the attach handles ``rows`` hold; the prepared ones.

    Prepared handles (of deployables declaring a preparation, see
    :class:`device_tree.Preparation`) stay in
    use, held by no ARQ, until :func:`free_prepared` once the agent has
    released them, so nobody claims a handle whose old preparation is
    still being undone. One UPDATE when none was prepared.
    """
    ids = [row.attach_handle_id for row in rows
           if row.attach_handle_id is not None]
    if not ids:
        return []
    now = timeutils.utcnow()
    freed = connection.execute(_FREE_UNPREPARED,
                               {'ids': ids, 'now': now}).rowcount
    if freed == len(ids):
        return []  # the usual case: nothing prepared, one statement
    # The prepared ones stay in use; updated_at starts the clock the
    # sweeper reads (claim_unreleased) if their release never ends.
    connection.execute(sa.update(HANDLES).where(
        HANDLES.c.id.in_(ids), _prepared()).values(updated_at=now))
    return _prepared_handles(connection, HANDLES.c.id.in_(ids))


def _prepared_handles(connection, condition) -> list[PreparedHandle]:
    query = (sa.select(HANDLES.c.id, HANDLES.c.uuid, HANDLES.c.attach_type,
                       HANDLES.c.attach_info, DEVICES.c.hostname,
                       DEVICES.c.driver, DEPLOYABLES.c.preparation)
             .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
             .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
             .where(condition, DEPLOYABLES.c.preparation
                    != device_tree.Preparation.NONE.value)
             .order_by(HANDLES.c.id))
    return [PreparedHandle(row.id, row.uuid, row.attach_type,
                           json.loads(row.attach_info), row.hostname,
                           row.driver, row.preparation)
            for row in connection.execute(query)]


def _unheld():
    """Handles no ARQ holds."""
    return ~sa.exists().where(ARQS.c.attach_handle_id == HANDLES.c.id)


@db_api.connection_writer
def free_prepared(context, handle_ids: list[int]) -> None:
    """Free prepared handles whose preparation the agent has released
    (unless an ARQ holds one again)."""
    if handle_ids:
        context.connection.execute(
            sa.update(HANDLES).where(HANDLES.c.id.in_(handle_ids),
                                     _unheld())
            .values(in_use=False, updated_at=timeutils.utcnow()))


@db_api.connection_writer
def claim_unreleased(context, older_than: datetime.datetime,
                     now: datetime.datetime) -> list[PreparedHandle]:
    """Prepared handles in use by no ARQ since before ``older_than`` (a
    release that failed, or whose conductor died), to be released again.

    They are marked as of ``now``, so that other conductors' sweepers
    leave them alone while this one tries.
    """
    connection = context.connection
    stale = sa.and_(HANDLES.c.in_use == sa.true(), _unheld(),
                    HANDLES.c.updated_at < older_than,
                    _prepared())
    ids = [row.id for row in connection.execute(
        sa.select(HANDLES.c.id).where(stale))]
    if not ids:
        return []
    # ``stale`` again: a handle another sweeper marked meanwhile is no
    # longer older than ``older_than`` and stays out.
    connection.execute(sa.update(HANDLES).where(HANDLES.c.id.in_(ids), stale)
                       .values(updated_at=now))
    return _prepared_handles(connection, HANDLES.c.id.in_(ids))


_CLEARED = dict(hostname=None, device_rp_uuid=None, instance_uuid=None,
                attach_handle_id=None, deployable_id=None, bind_owner=None,
                bind_started_at=None, bind_error=None, bound_at=None,
                alternative=None)


@db_api.connection_writer
def arq_unbind(context, uuids: list[str], project_id: str | None,
               described: list | None = None) -> list[PreparedHandle]:
    """Unbind ARQs and release their handles (idempotent per ARQ); the
    handles whose preparation is to be released. ``described``, if
    given, becomes the ARQs it changes as they were (:func:`describe`).
    """
    connection = context.connection
    # Unbinding an unbound ARQ changes nothing (Nova repeats unbinds).
    rows = [row for row in lock(connection, uuids, project_id)
            if row.state not in states.UNBOUND_STATES]
    if described is not None:
        # Replaced, not added to: a retried transaction describes again.
        described[:] = describe(connection, [row.uuid for row in rows])
    _cancel_failure_reports(connection, rows)
    # Their usage first: the swap clears what they are bound to.
    usage_db.close_intervals(connection, rows, timeutils.utcnow())
    prepared = release_handles(connection, rows)
    for row in rows:
        swap(connection, row, states.UNBOUND, dict(_CLEARED))
    return prepared


@db_api.connection_writer
def arq_delete(context, uuids: list[str] | None, instance_uuid: str | None,
               project_id: str | None, described: list | None = None
               ) -> list[PreparedHandle]:
    """Delete ARQs, releasing their handles; the handles whose
    preparation is to be released. ``described``, if given, becomes the
    ARQs deleted as they were (:func:`describe`).

    By uuid every ARQ must exist; by instance, none may. The ARQs pass
    through Deleting inside this one transaction, so nobody sees it.
    """
    connection = context.connection
    if uuids is not None:
        rows = lock(connection, uuids, project_id, DELETE_COLUMNS)
    else:
        rows = lock_rows(connection, project_id, DELETE_COLUMNS,
                         instance_uuid=instance_uuid)
    # Every transition is checked before anything is written: one ARQ
    # that may not be deleted leaves them all.
    for row in rows:
        if row.state != states.DELETING:
            check_transition(row, states.DELETING)
    if described is not None:
        # Replaced, not added to: a retried transaction describes again.
        described[:] = describe(connection, [row.uuid for row in rows])
    _cancel_failure_reports(connection, rows)
    # The usage of the Bound ones outlives them.
    usage_db.close_intervals(connection, rows, timeutils.utcnow())
    prepared = release_handles(connection, rows)
    if rows:
        connection.execute(_DELETE, {'ids': [row.id for row in rows]})
    return prepared


# How many abandoned ARQs one call deletes: one short transaction whatever
# the backlog; the next sweep takes the next ones.
ABANDONED_BATCH = 500


def _abandoned(created_before: datetime.datetime):
    """ARQs never bound (Initial: nothing enters it again) and created
    before ``created_before``."""
    return sa.and_(ARQS.c.state == states.INITIAL,
                   ARQS.c.created_at < created_before)


@db_api.connection_writer
def delete_abandoned(context, created_before: datetime.datetime,
                     described: list | None = None,
                     limit: int = ABANDONED_BATCH) -> list[str]:
    """Delete at most ``limit`` ARQs created before ``created_before``
    and never bound (see :func:`_abandoned`); their uuids.

    Nova binds the ARQs it creates at once, so one left Initial was
    abandoned: the answer to its creation was lost (its creator never
    learnt its uuid) or its creator gave up. It holds no handle, no
    binding interval and no event; it counts in its project's limits
    until it is gone. ``described``, if given, becomes the ARQs deleted
    as they were (:func:`describe`).
    """
    connection = context.connection
    # Skipped when locked: a bind holds it and takes it out of Initial.
    rows = connection.execute(
        sa.select(ARQS.c.id, ARQS.c.uuid)
        .where(_abandoned(created_before)).order_by(ARQS.c.id)
        .limit(limit).with_for_update(skip_locked=True)).all()
    uuids = [row.uuid for row in rows]
    if described is not None:
        # Replaced, not added to: a retried transaction describes again.
        described[:] = describe(connection, uuids)
    if not rows:
        return []
    # The condition again: on a Galera node the lock holds on this node
    # only; a bind committed through another node since is seen by this
    # locking delete (or fails this transaction's certification).
    connection.execute(sa.delete(ARQS).where(
        ARQS.c.id.in_([row.id for row in rows]),
        _abandoned(created_before)))
    return uuids


def _cancel_failure_reports(connection, rows) -> None:
    """Nova acts on the failure of BindFailing ``rows``: stop repeating
    their ``failed`` events (no statement when none is BindFailing)."""
    nova_events.cancel_repeats(connection, [
        row.uuid for row in rows if row.state == states.BIND_FAILING])


_DELETE = sa.delete(ARQS).where(
    ARQS.c.id.in_(sa.bindparam('ids', expanding=True)))
