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

"""Device profiles in the database.

A profile's groups are stored as JSON (``profile_json``); reads return
them as ``groups``. Names and uuids are unique.
"""

from collections.abc import Sequence
import json
from typing import Any

from oslo_db import exception as db_exc
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import PROFILES
from cyborg.domain import adoption
from cyborg.domain import arq_states
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import implicit_profiles
from cyborg.domain import providers


def _dp_row_to_dict(row) -> dict[str, Any]:
    values = dict(row._mapping)
    values['groups'] = json.loads(values.pop('profile_json'))['groups']
    return values


@db_api.connection_reader
def device_profile_list(context, names: Sequence[str] | None = None
                        ) -> list[dict[str, Any]]:
    """All device profiles, or those with one of ``names``, by id."""
    query = sa.select(PROFILES).order_by(PROFILES.c.id)
    if names is not None:
        if not names:
            return []
        query = query.where(PROFILES.c.name.in_(list(names)))
    return [_dp_row_to_dict(row) for row in context.connection.execute(query)]


@db_api.connection_reader
def device_profile_get(context, *, uuid: str | None = None,
                       name: str | None = None) -> dict[str, Any]:
    """One device profile by uuid or by name."""
    if uuid is not None:
        query = sa.select(PROFILES).where(PROFILES.c.uuid == uuid)
        key, value = 'uuid', uuid
    else:
        query = sa.select(PROFILES).where(PROFILES.c.name == name)
        key, value = 'name', name
    row = context.connection.execute(query).first()
    if row is None:
        raise exception.DeviceProfileNotFound(key=key, value=value)
    return _dp_row_to_dict(row)


@db_api.connection_writer
def device_profile_create(context, values: dict[str, Any]) -> dict[str, Any]:
    """Insert one device profile; name and uuid must be unused."""
    uuid = values.get('uuid') or uuidutils.generate_uuid()
    profile = dict(uuid=uuid, name=values['name'],
                   description=values.get('description'),
                   profile_json=json.dumps({'groups': values['groups']}))
    connection = context.connection
    for column, error in (('name', exception.DuplicateDeviceProfileName),
                          ('uuid', exception.DuplicateDeviceProfileUUID)):
        value = profile[column]
        if connection.execute(sa.select(PROFILES.c.id).where(
                PROFILES.c[column] == value)).first() is not None:
            raise error(**{column: value})
    try:
        connection.execute(sa.insert(PROFILES).values(**profile))
    except db_exc.DBDuplicateEntry as e:
        if 'uuid' in (e.columns or []):
            raise exception.DuplicateDeviceProfileUUID(uuid=uuid)
        raise exception.DuplicateDeviceProfileName(name=values['name'])
    return device_profile_get(context, uuid=uuid)


# States in which an ARQ may still bind, and so read its profile's groups.
_MAY_BIND = (arq_states.INITIAL, arq_states.BIND_STARTED,
             arq_states.BIND_FAILING, arq_states.UNBOUND)


@db_api.connection_writer
def device_profile_update(context, uuid: str, values: dict[str, Any]
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Change a profile's description, groups or ``enabled``; returns
    the profile before and after (the same when nothing changed).

    ARQs bind against the group they were created from (their
    ``group_json``), so new groups apply to ARQs created after the
    update. Only an ARQ created before that column existed reads its
    profile's groups when it binds: new groups are refused (409) while
    such an ARQ may still bind.
    """
    connection = context.connection
    row = connection.execute(sa.select(PROFILES).where(
        PROFILES.c.uuid == uuid).with_for_update()).first()
    if row is None:
        raise exception.DeviceProfileNotFound(key='uuid', value=uuid)
    implicit_profiles.check_writable(row.name)
    before = _dp_row_to_dict(row)
    changed = dp_rules.changes(before, values)
    if not changed:
        return before, before
    if 'groups' in changed:
        waiting = connection.execute(
            sa.select(sa.func.count()).select_from(ARQS).where(
                ARQS.c.device_profile_id == row.id,
                ARQS.c.group_json.is_(None),
                ARQS.c.state.in_(_MAY_BIND))).scalar()
        if waiting:
            raise exception.DeviceProfileGroupsInUse(name=row.name,
                                                     count=waiting)
    update: dict[str, Any] = {'updated_at': timeutils.utcnow()}
    if 'groups' in changed:
        update['profile_json'] = json.dumps({'groups': changed['groups']})
    for key in ('description', 'enabled'):
        if key in changed:
            update[key] = changed[key]
    connection.execute(sa.update(PROFILES).where(PROFILES.c.id == row.id)
                       .values(**update))
    return before, device_profile_get(context, uuid=uuid)


@db_api.connection_writer
def device_profile_delete(context, idents: Sequence[tuple[str, str]]) -> None:
    """Delete several profiles atomically.

    ``idents`` are ("uuid" | "name", value) pairs. Nothing is deleted
    unless every profile exists and no accelerator request uses it.
    """
    connection = context.connection
    ids = []
    for key, value in idents:
        row = connection.execute(
            sa.select(PROFILES.c.id, PROFILES.c.name)
            .where(PROFILES.c[key] == value).with_for_update()).first()
        if row is None:
            raise exception.DeviceProfileNotFound(key=key, value=value)
        implicit_profiles.check_writable(row.name)
        in_use = connection.execute(
            sa.select(sa.func.count()).select_from(ARQS).where(
                ARQS.c.device_profile_id == row.id)).scalar()
        if in_use:
            raise exception.DeviceProfileInUse(name=row.name, count=in_use)
        ids.append(row.id)
    if ids:
        connection.execute(sa.delete(PROFILES).where(PROFILES.c.id.in_(ids)))


@db_api.connection_reader
def reported_resource_classes(context) -> list[str]:
    """The resource classes of the deployables agents reported, sorted:
    each has an implicit profile (:mod:`cyborg.domain.implicit_profiles`)."""
    query = (sa.select(ATTRIBUTES.c.value).distinct()
             .where(ATTRIBUTES.c.key == providers.RESOURCE_CLASS_KEY)
             .order_by(ATTRIBUTES.c.value))
    return list(context.connection.execute(query).scalars())


def store_implicit_profile(connection, name: str) -> bool:
    """Store implicit profile ``name`` if its class is reported (and it
    is not stored yet); whether it is stored now. Inside the caller's
    (writer) transaction."""
    resource_class = implicit_profiles.resource_class_of(name)
    reported = connection.execute(
        sa.select(ATTRIBUTES.c.id).where(
            ATTRIBUTES.c.key == providers.RESOURCE_CLASS_KEY,
            ATTRIBUTES.c.value == resource_class).limit(1)).first()
    if reported is None:
        return False
    profile = implicit_profiles.profile(resource_class)
    try:
        with connection.begin_nested():
            connection.execute(sa.insert(PROFILES).values(
                uuid=profile['uuid'], name=name,
                description=profile['description'],
                profile_json=json.dumps({'groups': profile['groups']})))
    except db_exc.DBDuplicateEntry:
        pass  # stored meanwhile by a concurrent request
    return True


def referenced_traits(connection) -> set[str]:
    """Every trait some device profile group requires or forbids (read
    on ``connection``, inside the caller's transaction)."""
    return adoption.referenced_traits(
        group for text in connection.execute(
            sa.select(PROFILES.c.profile_json)).scalars()
        for group in json.loads(text)['groups'])
