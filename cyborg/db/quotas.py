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

"""What per-project limits read and lock: a project's usage counted from
its ARQ rows, the row a creation locks while it checks its project's
limits, and the resource classes device profiles ask for.

See :mod:`cyborg.domain.quotas` for what each ARQ counts.
"""

import json
from typing import Any

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import PROFILES
from cyborg.db.models import QUOTA_LOCKS
from cyborg.domain import arq_states as states
from cyborg.domain import quotas as quota_rules

# One GROUP BY over the project's ARQs (the project_id index): the ARQs
# being deleted no longer count. Rows without ``resources`` (created
# before quotas) are grouped by their profile group, whose resources
# they count.
_USAGE = (sa.select(ARQS.c.resources, ARQS.c.device_profile_id,
                    ARQS.c.device_profile_group_id,
                    sa.func.count().label('count'))
          .where(ARQS.c.project_id == sa.bindparam('project_id'))
          .where(ARQS.c.state != states.DELETING)
          .group_by(ARQS.c.resources, ARQS.c.device_profile_id,
                    ARQS.c.device_profile_group_id))
_PROFILE_JSON = sa.select(PROFILES.c.id, PROFILES.c.profile_json).where(
    PROFILES.c.id.in_(sa.bindparam('ids', expanding=True)))
_LOCK = (sa.select(QUOTA_LOCKS.c.id)
         .where(QUOTA_LOCKS.c.project_id == sa.bindparam('project_id'))
         .with_for_update())
_ADD_LOCK = sa.insert(QUOTA_LOCKS)


def count_usage(connection, project_id: str) -> dict[str, int]:
    """``project_id``'s usage of every resource it holds, read in the
    transaction of ``connection`` (its own uncommitted ARQs count)."""
    stored: dict[str, int] = {}
    legacy: dict[tuple[int, int], int] = {}
    for row in connection.execute(_USAGE, {'project_id': project_id}):
        if row.resources is not None:
            stored[row.resources] = stored.get(row.resources, 0) + row.count
        else:
            key = (row.device_profile_id, row.device_profile_group_id)
            legacy[key] = legacy.get(key, 0) + row.count
    groups = []
    if legacy:
        profiles = {row.id: json.loads(row.profile_json)['groups']
                    for row in connection.execute(
                        _PROFILE_JSON,
                        {'ids': sorted({key[0] for key in legacy})})}
        for (profile_id, index), count in legacy.items():
            profile_groups = profiles.get(profile_id, [])
            group = (profile_groups[index]
                     if index < len(profile_groups) else {})
            groups.append((group, count))
    return quota_rules.usage(stored.items(), groups)


@db_api.connection_reader
def usage(context, project_id: str) -> dict[str, int]:
    """``project_id``'s usage of every resource it holds."""
    return count_usage(context.connection, project_id)


def lock_project(connection, project_id: str) -> bool:
    """Lock ``project_id``'s quota row until the transaction ends
    (creations of the project wait for each other there); False when
    the project has no row yet (see :func:`add_project`)."""
    # Creations through two Galera nodes insert different ARQ rows:
    # only a write of this row makes one of them fail certification.
    db_api.lock_rows(connection, QUOTA_LOCKS,
                     QUOTA_LOCKS.c.project_id == project_id)
    return connection.execute(
        _LOCK, {'project_id': project_id}).first() is not None


@db_api.connection_writer
def add_project(context, project_id: str) -> None:
    """Give ``project_id`` its quota row (in a transaction of its own:
    two first creations of a project may both add it)."""
    try:
        with context.connection.begin_nested():
            context.connection.execute(_ADD_LOCK, {'project_id': project_id})
    except db_exc.DBDuplicateEntry:
        pass


@db_api.connection_reader
def profile_resource_classes(context) -> dict[str, list[str]]:
    """Every resource class a device profile asks for, with the names of
    the profiles that ask for it."""
    classes: dict[str, set[str]] = {}
    for row in context.connection.execute(
            sa.select(PROFILES.c.name, PROFILES.c.profile_json)):
        groups: list[dict[str, Any]] = json.loads(row.profile_json)['groups']
        for group in groups:
            for resource_class, _ in quota_rules.group_classes(group):
                classes.setdefault(resource_class, set()).add(row.name)
    return {resource_class: sorted(names)
            for resource_class, names in sorted(classes.items())}
