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

"""The prepared handles of a host, for its agent's restore at start.

See :mod:`cyborg.domain.restore`: :func:`host_handles` lists every
attach handle of the host's deployables that declare a preparation,
with the state of the ARQ holding it; :func:`record_outcome` writes what
the agent could and could not restore.
"""

import dataclasses
import json
from typing import Any

from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import CPIDS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.domain import arq_states as states
from cyborg.domain import bitstream as bitstream_rules
from cyborg.domain import device_tree
from cyborg.domain import providers
from cyborg.domain import restore


@dataclasses.dataclass(frozen=True)
class HostHandle:
    """A prepared handle of a host and what holds it."""

    uuid: str
    deployable_id: int
    driver: str | None
    device_address: str
    attach_type: str
    attach_info: dict[str, str]
    preparation: str
    #: The ARQ holding it and its state (None: no ARQ holds it).
    arq_uuid: str | None
    arq_state: str | None
    #: The region's recorded bitstream (a Glance image id), if any.
    bitstream_id: str | None
    controlpath: dict[str, Any] | None
    #: The function trait recorded for its deployable, if any.
    function_trait: str | None

    @property
    def action(self) -> restore.Action:
        return restore.action_for(self.arq_state)


def _function_traits(connection, deployable_ids: set[int]
                     ) -> dict[int, str]:
    """The recorded function trait of each deployable that has one."""
    if not deployable_ids:
        return {}
    rows = connection.execute(
        sa.select(ATTRIBUTES.c.deployable_id, ATTRIBUTES.c.key,
                  ATTRIBUTES.c.value)
        .where(ATTRIBUTES.c.deployable_id.in_(sorted(deployable_ids))))
    found: dict[int, str] = {}
    for row in rows:
        if (providers.is_trait_key(row.key)
                and bitstream_rules.function_traits([row.value])):
            found[row.deployable_id] = row.value
    return found


@db_api.connection_reader
def host_handles(context, host: str) -> list[HostHandle]:
    """Every handle of ``host``'s deployables that declare a
    preparation, with the ARQ holding it (one query, and one for the
    programmed regions' function traits)."""
    connection = context.connection
    query = (sa.select(HANDLES.c.uuid, HANDLES.c.attach_type,
                       HANDLES.c.attach_info, DEVICES.c.driver,
                       DEVICES.c.address, DEPLOYABLES.c.id.label('dep_id'),
                       DEPLOYABLES.c.preparation, DEPLOYABLES.c.bitstream_id,
                       ARQS.c.uuid.label('arq_uuid'),
                       ARQS.c.state.label('arq_state'), CPIDS.c.cpid_type,
                       CPIDS.c.cpid_info)
             .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
             .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
             .outerjoin(ARQS, ARQS.c.attach_handle_id == HANDLES.c.id)
             .outerjoin(CPIDS, CPIDS.c.id == HANDLES.c.cpid_id)
             .where(DEVICES.c.hostname == host,
                    DEPLOYABLES.c.preparation
                    != device_tree.Preparation.NONE.value)
             .order_by(HANDLES.c.id))
    rows = connection.execute(query).all()
    traits = _function_traits(connection, {
        row.dep_id for row in rows if row.bitstream_id is not None})
    return [HostHandle(
        row.uuid, row.dep_id, row.driver, row.address, row.attach_type,
        json.loads(row.attach_info), row.preparation, row.arq_uuid,
        row.arq_state, row.bitstream_id,
        {'cpid_type': row.cpid_type,
         'cpid_info': json.loads(row.cpid_info)}
        if row.cpid_type is not None else None,
        traits.get(row.dep_id)) for row in rows]


def _handle_ids(uuids):
    return sa.select(HANDLES.c.id).where(HANDLES.c.uuid.in_(sorted(uuids)))


def _bound_on(host: str, uuids):
    """The Bound ARQs of ``host`` that hold one of the handles
    ``uuids``."""
    return sa.and_(ARQS.c.hostname == host, ARQS.c.state == states.BOUND,
                   ARQS.c.attach_handle_id.in_(_handle_ids(uuids)))


@db_api.retrying_writer
def record_outcome(context, host: str, outcome: restore.Outcome
                   ) -> list[str]:
    """Write what ``host``'s agent did with its prepared handles: the
    Bound ARQ of each handle it could not restore has the reason as its
    bind error (the ARQ stays Bound: its guest holds the device), a
    restored one has none any more, and each released handle no ARQ
    holds is free. The ARQs whose handle failed."""
    connection = context.connection
    now = timeutils.utcnow()
    failed: list[str] = []
    for handle_uuid, reason in sorted(outcome.failed.items()):
        # Selected, then updated: MariaDB has no UPDATE ... RETURNING.
        uuids = connection.execute(sa.select(ARQS.c.uuid).where(
            _bound_on(host, [handle_uuid]))).scalars().all()
        if not uuids:
            continue  # unbound meanwhile: nothing to tell
        connection.execute(
            sa.update(ARQS).where(ARQS.c.uuid.in_(uuids),
                                  ARQS.c.state == states.BOUND)
            .values(bind_error=restore.failure_reason(handle_uuid, reason),
                    updated_at=now))
        failed.extend(uuids)
    if outcome.restored:
        connection.execute(
            sa.update(ARQS).where(_bound_on(host, outcome.restored),
                                  ARQS.c.bind_error.is_not(None))
            .values(bind_error=None, updated_at=now))
    if outcome.released:
        unheld = ~sa.exists().where(ARQS.c.attach_handle_id == HANDLES.c.id)
        on_host = HANDLES.c.deployable_id.in_(
            sa.select(DEPLOYABLES.c.id)
            .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
            .where(DEVICES.c.hostname == host))
        connection.execute(
            sa.update(HANDLES).where(
                HANDLES.c.uuid.in_(sorted(outcome.released)), unheld,
                on_host, HANDLES.c.in_use)
            .values(in_use=False, updated_at=now))
    return failed
