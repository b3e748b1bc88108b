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

"""Device taints in the database (``device_taints``).

A device's rows come from its driver (``source`` driver, ``origin``
``driver``: replaced by each changed report, see
:func:`sync_driver_taints`) and from taint rules (``source`` admin,
``origin`` the rule's uuid: written by :mod:`cyborg.db.taint_rules`).
Its *effective* taints are all its rows, whatever their source: the
Placement sync puts the traits of each taint with a scheduling effect on
its providers (:func:`cyborg.domain.tolerations.placement_traits`), and
the device profile answer forbids those a group does not tolerate.

A row's ``created_at`` is when the taint was added, and tells whether
Placement has its traits yet (:func:`active_scheduling_taints`): every
writer stamps it with the time of its write, and a taint whose value
changes, or that starts or stops keeping allocations off, is a new row.

The number of distinct keys is bounded (``[taints] max_keys``): every
writer checks new keys with :func:`keys_over_limit`.
"""

import collections
from collections.abc import Collection
from collections.abc import Iterable
import datetime
from typing import Any

import sqlalchemy as sa

from cyborg.common import constants
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import PROVIDERS
from cyborg.db.models import SERVICES
from cyborg.db.models import TAINTS
from cyborg.domain import device_health
from cyborg.domain import taints as taint_rules

#: ``origin`` of a driver taint's row.
DRIVER_ORIGIN = taint_rules.Source.DRIVER.value

_SCHEDULING = [effect.value for effect in taint_rules.SCHEDULING_EFFECTS]


def _taint(row) -> taint_rules.Taint:
    return taint_rules.Taint(key=row.key, value=row.value,
                             effect=row.effect, source=row.source,
                             reason=row.reason or '',
                             added_at=row.created_at)


def rows_taints(connection, device_ids: Collection[int]
                ) -> dict[int, list[taint_rules.Taint]]:
    """:func:`effective_taints` read on ``connection`` (inside the
    caller's transaction); one statement, none for no device."""
    found: dict[int, list[taint_rules.Taint]] = collections.defaultdict(
        list)
    if not device_ids:
        return {}
    for row in connection.execute(
            sa.select(TAINTS).where(TAINTS.c.device_id.in_(
                sorted(set(device_ids))))
            .order_by(TAINTS.c.device_id, TAINTS.c.key, TAINTS.c.id)):
        found[row.device_id].append(_taint(row))
    return dict(found)


@db_api.connection_reader
def effective_taints(context, device_ids: Collection[int]
                     ) -> dict[int, list[taint_rules.Taint]]:
    """``{device id: its taints}`` (driver and admin, by key; the time
    each was added in ``added_at``) of the devices of ``device_ids``
    that have any."""
    return rows_taints(context.connection, device_ids)


def _in_placement() -> sa.ColumnElement:
    """Whether a provider of the taint's device was written to Placement
    since the taint was added (so its traits exist there: a change that
    changes them adds the taint again, see :func:`sync_driver_taints`)."""
    return sa.exists().where(
        DEPLOYABLES.c.device_id == TAINTS.c.device_id,
        PROVIDERS.c.uuid == DEPLOYABLES.c.rp_uuid,
        PROVIDERS.c.updated_at >= TAINTS.c.created_at)


@db_api.connection_reader
def active_scheduling_taints(context) -> dict[str, frozenset[str]]:
    """``{key: its values}`` of every taint with a scheduling effect
    (NoSchedule, NoExecute) on some device whose providers Placement
    has since: one statement.

    A taint counts once a sync has written a provider of its device:
    until then its trait may not exist in Placement, which refuses a
    request that forbids an unknown trait, and no provider carries it.
    """
    values: dict[str, set[str]] = collections.defaultdict(set)
    for key, value in context.connection.execute(
            sa.select(TAINTS.c.key, TAINTS.c.value).distinct()
            .where(TAINTS.c.effect.in_(_SCHEDULING), _in_placement())):
        values[key].add(value)
    return {key: frozenset(found) for key, found in values.items()}


@db_api.connection_reader
def device_states(context, deployable_ids: Collection[int]
                  ) -> dict[int, device_health.DeviceState]:
    """``{deployable id: what the health of its device is graded from}``
    (see :mod:`cyborg.domain.device_health`): two statements, none for
    no deployable."""
    if not deployable_ids:
        return {}
    connection = context.connection
    rows = list(connection.execute(
        sa.select(DEPLOYABLES.c.id, DEVICES.c.id.label('device_id'),
                  DEVICES.c.health, DEVICES.c.missing,
                  DEVICES.c.health_reason, DEVICES.c.health_since,
                  SERVICES.c.last_seen_up)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .outerjoin(SERVICES, sa.and_(
            SERVICES.c.host == DEVICES.c.hostname,
            SERVICES.c.binary == constants.BINARY_AGENT))
        .where(DEPLOYABLES.c.id.in_(sorted(set(deployable_ids))))))
    taints = rows_taints(connection, {row.device_id for row in rows})
    return {row.id: device_health.DeviceState(
        health=row.health, missing=row.missing,
        health_reason=row.health_reason, health_since=row.health_since,
        agent_seen=row.last_seen_up,
        taints=tuple(taints.get(row.device_id, ())))
        for row in rows}


def active_scheduling_keys(context) -> set[str]:
    """The distinct keys of the taints with a scheduling effect."""
    return set(active_scheduling_taints(context))


def keys_over_limit(connection, keys: Iterable[str], limit: int
                    ) -> list[str]:
    """Those of ``keys`` that no row holds yet and that would take the
    number of distinct keys past ``limit`` (sorted: the first ones that
    fit are allowed); reads the distinct keys (one statement) only when
    ``keys`` has any."""
    keys = sorted(set(keys))
    if not keys:
        return []
    known = set(connection.execute(
        sa.select(TAINTS.c.key).distinct()).scalars())
    room = max(0, limit - len(known))
    new = [key for key in keys if key not in known]
    return new[room:]


def delete_device_taints(connection, device_ids: Collection[int]) -> None:
    """Delete every taint row of the devices (before the devices)."""
    if device_ids:
        connection.execute(sa.delete(TAINTS).where(
            TAINTS.c.device_id.in_(sorted(set(device_ids)))))


def _driver_row(device_id: int, taint: taint_rules.Taint,
                now: datetime.datetime) -> dict[str, Any]:
    return dict(device_id=device_id, key=taint.key, value=taint.value,
                effect=taint.effect.value,
                source=taint_rules.Source.DRIVER.value,
                origin=DRIVER_ORIGIN, reason=taint.reason or None,
                created_at=now)


def _within_limit(connection, reported: dict[int, list[taint_rules.Taint]],
                  limit: int | None, known_keys: set[str]
                  ) -> dict[int, list[taint_rules.Taint]]:
    """``reported`` with each taint whose new key is over the limit
    replaced by the :data:`~cyborg.domain.taints.UNHEALTHY_KEY` taint
    (same effect; a device keeps one taint per key, the strongest)."""
    if limit is None:
        limit = CONF.taints.max_keys
    wanted = {taint.key for taints in reported.values() for taint in taints}
    over = set(keys_over_limit(connection, wanted - known_keys, limit))
    if not over:
        return reported
    result = {}
    for device_id, taints in reported.items():
        kept: dict[str, taint_rules.Taint] = {}
        for taint in taints:
            if taint.key in over:
                taint = taint_rules.Taint(
                    key=taint_rules.UNHEALTHY_KEY, effect=taint.effect,
                    reason='taint key %s over the limit of %d keys: %s'
                           % (taint.key, limit, taint.reason))
            previous = kept.get(taint.key)
            if previous is None or (taint.keeps_allocations_off()
                                    and not previous.keeps_allocations_off()):
                kept[taint.key] = taint
        result[device_id] = list(kept.values())
    return result


def _new_traits(row, taint: taint_rules.Taint) -> bool:
    """Whether ``taint`` puts other traits on its device than ``row``."""
    return (row.value != taint.value
            or (row.effect in _SCHEDULING) != taint.keeps_allocations_off())


def sync_driver_taints(connection,
                       reported: dict[int, list[taint_rules.Taint]],
                       limit: int | None, now: datetime.datetime
                       ) -> set[int]:
    """Make the driver rows of the devices of ``reported`` (``{device
    id: the driver taints its report holds}``) those taints; the ids of
    the devices whose driver taints changed. ``limit``: most distinct
    keys (None: ``[taints] max_keys``), see :func:`_within_limit`.

    A taint whose key, value, effect and reason are unchanged keeps its
    row (and the time it was added); one whose reason changed, or whose
    effect changed from one scheduling effect to the other, is updated
    in place (its traits are the same); one whose value changed, or
    that starts or stops keeping allocations off, is added again (its
    row deleted and inserted: it is new to Placement); the others are
    inserted or deleted. One read of the devices' driver rows
    (none for no device), then at most one statement per insert batch,
    update and delete batch; a new key costs one read more (the limit).
    """
    if not reported:
        return set()
    rows = list(connection.execute(
        sa.select(TAINTS).where(
            TAINTS.c.device_id.in_(sorted(reported)),
            TAINTS.c.origin == DRIVER_ORIGIN)))
    known: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    for row in rows:
        known[row.device_id][row.key] = row
    reported = _within_limit(connection, reported, limit,
                             {row.key for row in rows})
    inserts, deleted, changed = [], [], set()
    for device_id, taints in reported.items():
        have = known.get(device_id, {})
        wanted = {taint.key: taint for taint in taints}
        for key, row in have.items():
            if key not in wanted:
                deleted.append(row.id)
                changed.add(device_id)
        for key, taint in wanted.items():
            row = have.get(key)
            if row is not None and _new_traits(row, taint):
                deleted.append(row.id)
                row = None
            if row is None:
                inserts.append(_driver_row(device_id, taint, now))
                changed.add(device_id)
            elif (row.value, row.effect, row.reason or '') != (
                    taint.value, taint.effect.value, taint.reason):
                connection.execute(sa.update(TAINTS).where(
                    TAINTS.c.id == row.id).values(
                        value=taint.value, effect=taint.effect.value,
                        reason=taint.reason or None, updated_at=now))
                changed.add(device_id)
    if deleted:
        connection.execute(sa.delete(TAINTS).where(TAINTS.c.id.in_(deleted)))
    if inserts:
        connection.execute(sa.insert(TAINTS), inserts)
    return changed
