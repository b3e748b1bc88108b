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

"""The FPGA regions programmed at bind or through the API, in the
database.

A region (a deployable) is programmed by one party at a time, and never
under an accelerator request that holds it with another bitstream:

* a bind job programs only when :func:`begin_for_arq` says so: the
  region does not hold the bitstream yet, no other ARQ is binding, bound
  or failing on it, and no handle of it is held by the program API;
* the program API first :func:`hold`\\ s every attach handle of the
  region (the claim binds use, so no bind can start on it meanwhile) and
  is refused while an ARQ uses the region; :func:`unhold` frees them.
  Handles left held by a conductor that died are freed by the bind
  sweeper (the FPGA drivers declare their regions' preparation
  ``program``, see :func:`cyborg.db.arqs.claim_unreleased`);
* :func:`record` writes what the region holds now: its ``bitstream_id``
  and its function trait (only on that deployable), and asks for its
  host's providers to be synced to Placement.

Each check runs under the deployable's row lock.
"""

import dataclasses
import json
from typing import Any

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import hardware
from cyborg.db import services
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import CPIDS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.domain import arq_states as states
from cyborg.domain import bitstream as bitstream_rules
from cyborg.domain import providers

SKIP = 'skip'
PROGRAM = 'program'

#: ARQ states in which an ARQ uses the deployable it claimed.
USING = (states.BIND_STARTED, states.BOUND, states.BIND_FAILING)

#: The attribute in which FPGA drivers report a region's interface id.
REGION_ID_KEY = 'region_id'


@dataclasses.dataclass(frozen=True)
class Target:
    """A deployable to program and what programming it needs."""
    id: int
    uuid: str
    rp_uuid: str | None
    host: str
    driver: str | None
    #: The control path (``cpid_type``, ``cpid_info``) of its first
    #: attach handle; None: it has none to program through.
    controlpath: dict[str, Any] | None
    bitstream_id: str | None
    region_id: str | None
    traits: list[str]
    name: str | None = None
    device_uuid: str | None = None


def _not_found(uuid: str) -> exception.DeployableNotFound:
    return exception.DeployableNotFound('Deployable %s not found' % uuid,
                                        uuid=uuid)


@db_api.connection_reader
def target(context, deployable_id: int | None = None,
           uuid: str | None = None) -> Target:
    """The deployable ``deployable_id`` (or ``uuid``);
    DeployableNotFound when there is none."""
    connection = context.connection
    query = (sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.uuid,
                       DEPLOYABLES.c.rp_uuid, DEPLOYABLES.c.bitstream_id,
                       DEVICES.c.hostname, DEVICES.c.driver,
                       DEPLOYABLES.c.name,
                       DEVICES.c.uuid.label('device_uuid'))
             .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id))
    if deployable_id is not None:
        query = query.where(DEPLOYABLES.c.id == deployable_id)
    else:
        query = query.where(DEPLOYABLES.c.uuid == uuid)
    row = connection.execute(query).first()
    if row is None:
        raise _not_found(str(uuid if uuid is not None else deployable_id))
    attributes = dict(connection.execute(
        sa.select(ATTRIBUTES.c.key, ATTRIBUTES.c.value)
        .where(ATTRIBUTES.c.deployable_id == row.id)).all())
    cpid = connection.execute(
        sa.select(CPIDS.c.cpid_type, CPIDS.c.cpid_info)
        .join(HANDLES, HANDLES.c.cpid_id == CPIDS.c.id)
        .where(HANDLES.c.deployable_id == row.id)
        .order_by(HANDLES.c.id).limit(1)).first()
    controlpath = ({'cpid_type': cpid.cpid_type,
                    'cpid_info': json.loads(cpid.cpid_info)}
                   if cpid is not None else None)
    return Target(row.id, row.uuid, row.rp_uuid, row.hostname, row.driver,
                  controlpath, row.bitstream_id,
                  attributes.get(REGION_ID_KEY),
                  sorted(providers.traits_of(attributes)), row.name,
                  row.device_uuid)


def _lock(connection, deployable_id: int):
    # begin_for_arq writes nothing when it allows programming: on Galera
    # two ARQs through two nodes would both be allowed without this.
    db_api.lock_rows(connection, DEPLOYABLES,
                     DEPLOYABLES.c.id == deployable_id)
    row = connection.execute(
        sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.uuid,
                  DEPLOYABLES.c.bitstream_id)
        .where(DEPLOYABLES.c.id == deployable_id).with_for_update()).first()
    if row is None:
        raise _not_found(str(deployable_id))
    return row


def _users(connection, deployable_id: int, but: str | None = None):
    query = (sa.select(ARQS.c.uuid, ARQS.c.state)
             .where(ARQS.c.deployable_id == deployable_id,
                    ARQS.c.state.in_(USING)).order_by(ARQS.c.id))
    if but is not None:
        query = query.where(ARQS.c.uuid != but)
    return list(connection.execute(query))


def _unheld():
    return ~sa.exists().where(ARQS.c.attach_handle_id == HANDLES.c.id)


def _held_by_api(connection, deployable_id: int) -> int:
    return connection.execute(
        sa.select(sa.func.count()).select_from(HANDLES)
        .where(HANDLES.c.deployable_id == deployable_id,
               HANDLES.c.in_use == sa.true(), _unheld())).scalar()


def _describe(users) -> str:
    return ', '.join('ARQ %s is %s on it' % (u.uuid, u.state)
                     for u in users)


@db_api.connection_writer
def begin_for_arq(context, deployable_id: int, arq_uuid: str,
                  bitstream_id: str) -> str:
    """:data:`SKIP` when the region holds ``bitstream_id`` already,
    :data:`PROGRAM` when ARQ ``arq_uuid`` may program it;
    DeployableInUse when another ARQ uses it or the program API is
    programming it."""
    connection = context.connection
    row = _lock(connection, deployable_id)
    if row.bitstream_id == bitstream_id:
        return SKIP
    users = _users(connection, deployable_id, but=arq_uuid)
    if users:
        raise exception.DeployableInUse(
            uuid=row.uuid, reason='%s, with bitstream %s'
            % (_describe(users), row.bitstream_id or 'unknown'))
    if _held_by_api(connection, deployable_id):
        raise exception.DeployableInUse(
            uuid=row.uuid, reason='the program API is programming it, '
            'or a handle of it is still being released')
    return PROGRAM


@db_api.connection_writer
def hold(context, deployable_id: int) -> None:
    """Claim every attach handle of the deployable for the program API;
    DeployableInUse (nothing claimed) when an ARQ uses it or a handle is
    in use."""
    connection = context.connection
    row = _lock(connection, deployable_id)
    users = _users(connection, deployable_id)
    if users:
        raise exception.DeployableInUse(uuid=row.uuid,
                                        reason=_describe(users))
    total = connection.execute(
        sa.select(sa.func.count()).select_from(HANDLES)
        .where(HANDLES.c.deployable_id == deployable_id)).scalar()
    taken = connection.execute(
        sa.update(HANDLES).where(HANDLES.c.deployable_id == deployable_id,
                                 HANDLES.c.in_use == sa.false())
        .values(in_use=True, updated_at=timeutils.utcnow())).rowcount
    if taken != total:
        raise exception.DeployableInUse(
            uuid=row.uuid, reason='%d of its %d attach handles are in use '
            'or being released' % (total - taken, total))


@db_api.connection_writer
def unhold(context, deployable_id: int) -> None:
    """Free the handles :func:`hold` claimed (those no ARQ holds)."""
    context.connection.execute(
        sa.update(HANDLES).where(HANDLES.c.deployable_id == deployable_id,
                                 _unheld())
        .values(in_use=False, updated_at=timeutils.utcnow()))


@db_api.connection_writer
def record(context, deployable_id: int, bitstream_id: str | None,
           function_trait: str | None = None) -> None:
    """The region holds ``bitstream_id`` (None: unknown, after a failed
    programming); with ``function_trait``, its function traits are that
    one alone. Only this deployable changes; its host's providers are
    synced to Placement next."""
    connection = context.connection
    row = _lock(connection, deployable_id)
    connection.execute(
        sa.update(DEPLOYABLES).where(DEPLOYABLES.c.id == deployable_id)
        .values(bitstream_id=bitstream_id, updated_at=timeutils.utcnow()))
    if function_trait is None:
        return
    rows = connection.execute(
        sa.select(ATTRIBUTES.c.id, ATTRIBUTES.c.key, ATTRIBUTES.c.value)
        .where(ATTRIBUTES.c.deployable_id == deployable_id)).all()
    old = {r.key: r.value for r in rows if providers.is_trait_key(r.key)}
    new = bitstream_rules.with_function_trait(set(old.values()),
                                              function_trait)
    if sorted(old.values()) == new:
        return
    connection.execute(sa.delete(ATTRIBUTES).where(
        ATTRIBUTES.c.id.in_([r.id for r in rows if r.key in old])))
    now = timeutils.utcnow()
    connection.execute(sa.insert(ATTRIBUTES), [
        {'uuid': uuidutils.generate_uuid(), 'deployable_id': deployable_id,
         'key': key, 'value': trait, 'created_at': now}
        for key, trait in providers.trait_attributes(new).items()])
    host = hardware.host_of(connection, row.id)
    services.count_sync_request(connection, host)
