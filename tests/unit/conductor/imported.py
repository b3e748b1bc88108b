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

"""Rows as the import of an upstream Cyborg database writes them.

Written straight into the database (not through the import command), so
that the adoption is tested on its own: a device with ``driver`` NULL at
the address its control path id names, deployables named and with
provider uuids as upstream's drivers make them, attach handles whose info
is spelt as upstream's fake driver spells it (``"device": "0"``), an agent
service row with no report yet, ``adopted`` provider rows with an unknown
parent, and Bound ARQs holding handles.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid as uuid_lib

import sqlalchemy as sa

from cyborg.common import constants
from cyborg.db import models
from cyborg.domain import device_tree

DEVICES = models.Device.__table__
DEPLOYABLES = models.Deployable.__table__
HANDLES = models.AttachHandle.__table__
ATTRIBUTES = models.Attribute.__table__
CPIDS = models.ControlpathID.__table__
SERVICES = models.Service.__table__
PROVIDERS = models.PlacementProvider.__table__
PROFILES = models.DeviceProfile.__table__
ARQS = models.ExtendedAcceleratorRequest.__table__


def upstream_rp_uuid(name: str) -> str:
    """The provider uuid upstream derives from a deployable's name."""
    return str(uuid_lib.uuid3(uuid_lib.NAMESPACE_DNS, name))


def upstream_handle(address: str, function: int) -> dict[str, str]:
    """A handle's info as upstream's fake driver writes it: function
    ``function`` (1..) of the device at ``address``'s bus."""
    info = device_tree.pci_address_info(address)
    return dict(info, device=str(function // 8),
                function=str(function % 8))


@dataclasses.dataclass
class Deployable:
    """An imported deployable: ``handles`` are functions (see
    :func:`upstream_handle`), ``in_use`` those Bound ARQs hold."""

    name: str
    handles: list[int]
    in_use: list[int] = dataclasses.field(default_factory=list)
    resource_class: str = 'FPGA'
    traits: list[str] = dataclasses.field(default_factory=list)
    bitstream_id: str | None = None

    @property
    def rp_uuid(self) -> str:
        return upstream_rp_uuid(self.name)


@dataclasses.dataclass
class Imported:
    """What :func:`insert` wrote: uuids by deployable name, handle uuids
    by (deployable name, function), ARQ uuids by the same."""

    device_uuid: str
    deployables: dict[str, str]
    handles: dict[tuple[str, int], str]
    arqs: dict[tuple[str, int], str]


def insert(engine, host: str, address: str, deployables: list[Deployable],
           profile: str = 'upstream-fpga', instance: str | None = None
           ) -> Imported:
    """Write an imported device of ``host`` at ``address``."""
    now = datetime.datetime.utcnow()
    device_uuid = str(uuid_lib.uuid4())
    found = Imported(device_uuid, {}, {}, {})
    with engine.begin() as connection:
        if connection.execute(sa.select(SERVICES.c.id).where(
                SERVICES.c.host == host)).first() is None:
            connection.execute(sa.insert(SERVICES).values(
                host=host, binary=constants.BINARY_AGENT, rp_name=host,
                created_at=now, sync_requested=0, sync_done=0))
        profile_id = _profile(connection, profile)
        device_id = connection.execute(sa.insert(DEVICES).values(
            uuid=device_uuid, type='FPGA', vendor='0xABCD',
            model='miss model info', hostname=host, address=address,
            std_board_info='{"class":"Fake class","device_id":"0xabcd"}',
            vendor_board_info='fake_vendor_info', status='enabled',
            health='healthy', driver=None, missing=False,
            created_at=now)).inserted_primary_key[0]
        cpid_id = connection.execute(sa.insert(CPIDS).values(
            uuid=str(uuid_lib.uuid4()), device_id=device_id, cpid_type='PCI',
            cpid_info=device_tree.canonical_json(
                device_tree.pci_address_info(address)),
            created_at=now)).inserted_primary_key[0]
        for deployable in deployables:
            _deployable(connection, host, device_id, cpid_id, deployable,
                        profile_id, instance, found, now)
    return found


def _profile(connection, name: str) -> int:
    row = connection.execute(sa.select(PROFILES.c.id).where(
        PROFILES.c.name == name)).first()
    if row is not None:
        return row.id
    return connection.execute(sa.insert(PROFILES).values(
        uuid=str(uuid_lib.uuid4()), name=name, profile_json=json.dumps(
            {'groups': [{'resources:FPGA': '1'}]}))).inserted_primary_key[0]


def _deployable(connection, host, device_id, cpid_id, deployable,
                profile_id, instance, found, now) -> None:
    dep_uuid = str(uuid_lib.uuid4())
    found.deployables[deployable.name] = dep_uuid
    dep_id = connection.execute(sa.insert(DEPLOYABLES).values(
        uuid=dep_uuid, name=deployable.name,
        num_accelerators=len(deployable.handles), device_id=device_id,
        rp_uuid=deployable.rp_uuid, driver_name='fake', preparation='none',
        bitstream_id=deployable.bitstream_id, retained=False,
        created_at=now)).inserted_primary_key[0]
    attributes = {'rc': deployable.resource_class}
    attributes.update({'trait%d' % index: trait
                       for index, trait in enumerate(deployable.traits)})
    for key, value in attributes.items():
        connection.execute(sa.insert(ATTRIBUTES).values(
            uuid=str(uuid_lib.uuid4()), deployable_id=dep_id, key=key,
            value=value, created_at=now))
    address = connection.execute(sa.select(DEVICES.c.address).where(
        DEVICES.c.id == device_id)).scalar()
    for function in deployable.handles:
        handle_uuid = str(uuid_lib.uuid4())
        in_use = function in deployable.in_use
        handle_id = connection.execute(sa.insert(HANDLES).values(
            uuid=handle_uuid, deployable_id=dep_id, cpid_id=cpid_id,
            in_use=in_use, attach_type='TEST_PCI',
            attach_info=device_tree.canonical_json(
                upstream_handle(address, function)),
            created_at=now)).inserted_primary_key[0]
        found.handles[deployable.name, function] = handle_uuid
        if in_use:
            arq_uuid = str(uuid_lib.uuid4())
            connection.execute(sa.insert(ARQS).values(
                uuid=arq_uuid, project_id='p1', state='Bound',
                device_profile_id=profile_id, device_profile_group_id=0,
                hostname=host, device_rp_uuid=deployable.rp_uuid,
                instance_uuid=instance or str(uuid_lib.uuid4()),
                attach_handle_id=handle_id, deployable_id=dep_id,
                created_at=now))
            found.arqs[deployable.name, function] = arq_uuid
    connection.execute(sa.insert(PROVIDERS).values(
        uuid=deployable.rp_uuid, host=host, name=deployable.name,
        parent_uuid='', adopted=True, created_at=now))


def release(engine, arq_uuid: str) -> None:
    """What deleting a Bound ARQ does to the rows: the ARQ goes and its
    handle is free."""
    with engine.begin() as connection:
        handle_id = connection.execute(sa.select(ARQS.c.attach_handle_id)
                                       .where(ARQS.c.uuid == arq_uuid)
                                       ).scalar()
        connection.execute(sa.delete(ARQS).where(ARQS.c.uuid == arq_uuid))
        connection.execute(sa.update(HANDLES).where(
            HANDLES.c.id == handle_id).values(in_use=False))
