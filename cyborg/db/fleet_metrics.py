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

"""The reads behind the conductor's fleet metrics.

:func:`fleet_snapshot` reads everything one scrape reports in one read
transaction of :func:`statements` statements, whatever the number of
hosts, devices and accelerator requests: counts are GROUP BY queries,
and the per-device and per-deployable series come from one query each.
The statements are built once; a scrape only runs them.
"""

import dataclasses
import datetime

import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import EVENTS
from cyborg.db.models import SERVICES
from cyborg.domain import arq_states
from cyborg.domain import providers


def statements(by_project: bool) -> int:
    """The statements one :func:`fleet_snapshot` runs."""
    return 7 if by_project else 6


@dataclasses.dataclass
class FleetSnapshot:
    """What one scrape reports, as read (rows are plain tuples of the
    columns listed here)."""

    #: (hostname, driver, vendor, model, type, health, status, count)
    devices: list
    #: Accelerators per group of deployables: (hostname, resource_class,
    #: device status, device health, device missing, deployable
    #: retained, total, allocated, allocated to Bound ARQs, unallocated)
    deployables: list
    #: (state, bind_error of a failed bind else None, count)
    arqs: list
    #: Bound ARQs: (project_id, resource_class, count); only when asked
    #: for by project (per resource class, see ``deployables``)
    bound: list
    #: (hostname, address, utilization text)
    utilization: list
    #: (host, last_seen_up, sync_requested, sync_done)
    agents: list
    #: unsent Nova events
    outbox_depth: int
    #: creation time of the oldest one that is late (see _OUTBOX)
    outbox_oldest: datetime.datetime | None
    #: (hostname, address, partitions text) of the partitioned devices
    partitions: list = dataclasses.field(default_factory=list)


_DEVICE_LABELS = (DEVICES.c.hostname, DEVICES.c.driver, DEVICES.c.vendor,
                  DEVICES.c.model, DEVICES.c.type, DEVICES.c.health,
                  DEVICES.c.status)
_DEVICES = (sa.select(*_DEVICE_LABELS, sa.func.count())
            .group_by(*_DEVICE_LABELS))


def _resource_class(deployable_id):
    """The ``rc`` attribute of the deployable ``deployable_id`` names,
    to outer join (:mod:`cyborg.domain.providers`)."""
    rc = ATTRIBUTES.alias('rc')
    return rc, sa.and_(rc.c.deployable_id == deployable_id,
                       rc.c.key == providers.RESOURCE_CLASS_KEY)


# An ARQ holds an accelerator of its deployable while it holds one of
# its attach handles: the handle is claimed in the transaction that
# binds the ARQ and given back in the one that fails, unbinds or
# deletes it (so the column, not a list of states, is the truth). A
# Bound ARQ always holds one: counted here too, the bound ARQs per
# resource class cost no statement of their own.
#
# The counts are cast to the column type of num_accelerators: summed,
# PostgreSQL's counts (bigint) would make numerics, slower to add up and
# read as Decimal.
_HELD = (sa.select(ARQS.c.deployable_id,
                   sa.cast(sa.func.count(), sa.Integer).label('held'),
                   sa.cast(sa.func.count(sa.case(
                       (ARQS.c.state == arq_states.BOUND, 1))),
                       sa.Integer).label('bound'))
         .where(ARQS.c.attach_handle_id.is_not(None))
         .group_by(ARQS.c.deployable_id).subquery('held'))
_DEPLOYABLE_RC, _DEPLOYABLE_RC_ON = _resource_class(DEPLOYABLES.c.id)
_HELD_COUNT = sa.func.coalesce(_HELD.c.held, 0)
# Accelerators per host and resource class, apart by what makes them
# offered or not: their device's status and health, whether it went
# missing (cyborg.domain.devices; the rule is applied by the caller) and
# whether the deployable is only retained for the ARQ that holds it. A
# host has a handful of such groups however many deployables it has.
_GROUP = (DEVICES.c.hostname, _DEPLOYABLE_RC.c.value, DEVICES.c.status,
          DEVICES.c.health, DEVICES.c.missing, DEPLOYABLES.c.retained)
_DEPLOYABLES = (
    sa.select(*_GROUP, sa.func.sum(DEPLOYABLES.c.num_accelerators),
              sa.func.sum(_HELD_COUNT),
              sa.func.sum(sa.func.coalesce(_HELD.c.bound, 0)),
              # Unheld per deployable, never below 0.
              sa.func.sum(sa.case(
                  (DEPLOYABLES.c.num_accelerators > _HELD_COUNT,
                   DEPLOYABLES.c.num_accelerators - _HELD_COUNT),
                  else_=0)))
    .select_from(DEPLOYABLES)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .outerjoin(_DEPLOYABLE_RC, _DEPLOYABLE_RC_ON)
    .outerjoin(_HELD, _HELD.c.deployable_id == DEPLOYABLES.c.id)
    .group_by(*_GROUP))

# The bind error only of failed binds: others group by state alone.
_FAILURE = sa.case((ARQS.c.state.in_(sorted(arq_states.FAILED)),
                    ARQS.c.bind_error), else_=sa.null())
_ARQS = sa.select(ARQS.c.state, _FAILURE, sa.func.count()).group_by(
    ARQS.c.state, _FAILURE)


_BOUND_RC, _BOUND_RC_ON = _resource_class(ARQS.c.deployable_id)
_BOUND_BY_PROJECT = (
    sa.select(ARQS.c.project_id, _BOUND_RC.c.value, sa.func.count())
    .select_from(ARQS).outerjoin(_BOUND_RC, _BOUND_RC_ON)
    .where(ARQS.c.state == arq_states.BOUND)
    .group_by(ARQS.c.project_id, _BOUND_RC.c.value))


# The devices' readings: their utilization and their partitions, with
# one statement.
_READINGS = (sa.select(DEVICES.c.hostname, DEVICES.c.address,
                       DEVICES.c.utilization, DEVICES.c.partitions)
             .where(sa.or_(DEVICES.c.utilization.is_not(None),
                           DEVICES.c.partitions.is_not(None))))

_AGENTS = (sa.select(SERVICES.c.host, SERVICES.c.last_seen_up,
                     SERVICES.c.sync_requested, SERVICES.c.sync_done)
           .where(SERVICES.c.binary == constants.BINARY_AGENT))

# Every unsent event counts in the depth; the oldest age is that of the
# oldest one that should have gone by now. A failed bind's event that is
# repeated until Nova acts on it (``repeat_until``) waits by design once
# it was tried: it is not late.
_LATE = sa.or_(EVENTS.c.repeat_until.is_(None), EVENTS.c.attempts == 0)
_OUTBOX = (sa.select(sa.func.count(),
                     sa.func.min(sa.case((_LATE, EVENTS.c.created_at),
                                         else_=sa.null())))
           .where(EVENTS.c.sent_at.is_(None)))


def _tuples(connection, statement) -> list[tuple]:
    """The rows of ``statement`` as plain tuples: the conductor goes
    through thousands of them per scrape, and a tuple unpacks and
    hashes several times faster than a database row."""
    return list(map(tuple, connection.execute(statement).all()))


@db_api.connection_reader
def fleet_snapshot(context, by_project: bool = False) -> FleetSnapshot:
    """Everything the fleet metrics report, read in one transaction;
    bound ARQs per project too if ``by_project``."""
    connection = context.connection
    depth, oldest = connection.execute(_OUTBOX).one()
    readings = _tuples(connection, _READINGS)
    return FleetSnapshot(
        devices=_tuples(connection, _DEVICES),
        deployables=_tuples(connection, _DEPLOYABLES),
        arqs=_tuples(connection, _ARQS),
        bound=(_tuples(connection, _BOUND_BY_PROJECT) if by_project
               else []),
        utilization=[(host, address, text) for host, address, text, _p
                     in readings if text is not None],
        agents=_tuples(connection, _AGENTS),
        outbox_depth=depth, outbox_oldest=oldest,
        partitions=[(host, address, text) for host, address, _u, text
                    in readings if text is not None])
