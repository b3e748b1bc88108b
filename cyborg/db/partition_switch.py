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

"""What a partitioned device's switch of profile needs of the database
(see :class:`cyborg.conductor.partitions.SwitchGuard`): the device's
deployables and their providers, whether anything holds them, and the
bookkeeping to forget once their inventory was reserved behind the
sync's back."""

import dataclasses

import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import HANDLES
from cyborg.db.models import PROVIDERS
from cyborg.db.models import SERVICES


@dataclasses.dataclass(frozen=True)
class DeviceServing:
    """The deployables a device serves as the database knows them."""

    #: Every deployable name of the device (``[]``: no such device).
    names: tuple[str, ...]
    #: {deployable name: its resource provider's uuid}, of those with one.
    providers: dict[str, str]
    #: An accelerator request or an attach handle in use holds one.
    held: bool


@db_api.connection_reader
def device_serving(context, host: str, address: str) -> DeviceServing:
    """The deployables of ``host``'s device at ``address``, with one
    statement."""
    held = sa.or_(
        sa.exists().where(ARQS.c.deployable_id == DEPLOYABLES.c.id),
        sa.exists().where(HANDLES.c.deployable_id == DEPLOYABLES.c.id,
                          HANDLES.c.in_use == sa.true()))
    rows = context.connection.execute(
        sa.select(DEPLOYABLES.c.name, DEPLOYABLES.c.rp_uuid,
                  held.label('held'))
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEVICES.c.hostname == host, DEVICES.c.address == address)
        .order_by(DEPLOYABLES.c.id)).all()
    return DeviceServing(
        tuple(row.name for row in rows),
        {row.name: row.rp_uuid for row in rows if row.rp_uuid},
        any(row.held for row in rows))


@db_api.connection_writer
def forget_written_inventory(context, host: str,
                             rp_uuids: list[str]) -> None:
    """The inventory of providers ``rp_uuids`` was changed outside a
    sync: the next sync writes it again (no hash, generation unknown),
    and the host's next report is applied even if unchanged (no
    digest), so that a sync follows it."""
    connection = context.connection
    if rp_uuids:
        connection.execute(sa.update(PROVIDERS).where(
            PROVIDERS.c.uuid.in_(rp_uuids)).values(inventory_hash=None,
                                                   generation=None))
    connection.execute(sa.update(SERVICES).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT).values(
            report_hash=None))
