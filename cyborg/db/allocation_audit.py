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

"""What the allocation audit (:mod:`cyborg.domain.allocation_audit`)
reads of the database: this service's providers and the ARQs that hold
an instance."""

import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db.models import ARQS
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.domain import allocation_audit as audit


@db_api.connection_reader
def providers(context) -> list[audit.Provider]:
    """Every deployable's resource provider, with its host and device."""
    query = (sa.select(DEPLOYABLES.c.rp_uuid, DEVICES.c.hostname,
                       DEVICES.c.address)
             .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
             .where(DEPLOYABLES.c.rp_uuid.is_not(None))
             .order_by(DEPLOYABLES.c.rp_uuid))
    return [audit.Provider(row.rp_uuid, row.hostname, row.address)
            for row in context.connection.execute(query)]


@db_api.connection_reader
def held_arqs(context) -> list[audit.HeldARQ]:
    """The ARQs that name an instance and a provider."""
    query = (sa.select(ARQS.c.uuid, ARQS.c.state, ARQS.c.instance_uuid,
                       ARQS.c.device_rp_uuid, ARQS.c.hostname)
             .where(ARQS.c.instance_uuid.is_not(None),
                    ARQS.c.state.in_(audit.HOLDING))
             .order_by(ARQS.c.uuid))
    return [audit.HeldARQ(row.uuid, row.state, row.instance_uuid,
                          row.device_rp_uuid, row.hostname)
            for row in context.connection.execute(query)]
