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

"""Factories of database rows for tests: ``create_test_<row>(**kw)``.

Each writes one row with sensible defaults, any column overridden by a
keyword, and returns the row's values with its ``id``::

    device = factories.create_test_device(engine, hostname='h1')
    deployable = factories.create_test_deployable(
        engine, device_id=device['id'], rp_uuid=RP)
    handle = factories.create_test_attach_handle(
        engine, deployable_id=deployable['id'], in_use=True)

``engine`` is an SQLAlchemy engine or connection (None: the DB API's
engine, :func:`cyborg.db.api.get_engine`). Rows the agent's reports
create (devices, deployables, control path ids, attach handles) and the
others are inserted with the product's models, as cyborg/db/ does;
device profiles go through the DB API
(:func:`cyborg.db.device_profiles.device_profile_create`). Parents a
row needs and is not given are created with their own defaults.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import device_profiles as profiles_db
from cyborg.db import models
from cyborg.domain import arq_states

_numbers = itertools.count(1)


@contextlib.contextmanager
def _connection(engine):
    """A connection in a transaction committed at the end."""
    engine = engine if engine is not None else db_api.get_engine()
    if isinstance(engine, sa.engine.Connection):
        yield engine
        return
    with engine.begin() as connection:
        yield connection


def _insert(engine, model, values: dict[str, Any]) -> dict[str, Any]:
    with _connection(engine) as connection:
        row_id = connection.execute(
            sa.insert(model).values(**values)).inserted_primary_key[0]
    return dict(values, id=row_id)


def create_test_device(engine=None, **kw) -> dict[str, Any]:
    """A device (an FPGA on host ``h1`` by default)."""
    number = next(_numbers)
    values = {'uuid': uuidutils.generate_uuid(), 'type': 'FPGA',
              'vendor': '0x8086', 'model': 'm', 'hostname': 'h1',
              'address': '0000:%02x:00.0' % (number % 256)}
    values.update(kw)
    return _insert(engine, models.Device, values)


def create_test_deployable(engine=None, **kw) -> dict[str, Any]:
    """A deployable of one accelerator; of a new device unless
    ``device_id`` is given."""
    values = {'uuid': uuidutils.generate_uuid(), 'num_accelerators': 1,
              'rp_uuid': uuidutils.generate_uuid()}
    values.update(kw)
    if 'device_id' not in values:
        values['device_id'] = create_test_device(engine)['id']
    values.setdefault('name', 'deployable-%d' % next(_numbers))
    return _insert(engine, models.Deployable, values)


def create_test_controlpath_id(engine=None, **kw) -> dict[str, Any]:
    """A PCI control path id; of a new device unless ``device_id``."""
    values = {'uuid': uuidutils.generate_uuid(), 'cpid_type': 'PCI',
              'cpid_info': '{}'}
    values.update(kw)
    if 'device_id' not in values:
        values['device_id'] = create_test_device(engine)['id']
    return _insert(engine, models.ControlpathID, values)


def pci_info(function: int, bus: str = '0c') -> str:
    """The attach info of a PCI function, as the API shows it."""
    return json.dumps({'domain': '0000', 'bus': bus, 'device': 0,
                       'function': function})


def create_test_attach_handle(engine=None, **kw) -> dict[str, Any]:
    """A free PCI attach handle of ``deployable_id`` (a new deployable
    if not given) under ``cpid_id`` (a new control path id of the
    deployable's device if not given)."""
    values = {'uuid': uuidutils.generate_uuid(), 'in_use': False,
              'attach_type': 'PCI', 'attach_info': pci_info(
                  next(_numbers) % 8)}
    values.update(kw)
    if 'deployable_id' not in values:
        values['deployable_id'] = create_test_deployable(engine)['id']
    if 'cpid_id' not in values:
        with _connection(engine) as connection:
            device_id = connection.execute(
                sa.select(models.Deployable.device_id).where(
                    models.Deployable.id == values['deployable_id'])
            ).scalar_one()
        values['cpid_id'] = create_test_controlpath_id(
            engine, device_id=device_id)['id']
    return _insert(engine, models.AttachHandle, values)


def create_test_device_profile(context=None, engine=None,
                               **kw) -> dict[str, Any]:
    """A device profile (one group of one FPGA by default) through the
    DB API, ``context`` defaulting to an admin context; or, given an
    ``engine`` the DB API is not configured with, as the row the DB API
    writes (``groups`` stored in ``profile_json``)."""
    values = {'name': 'dp-%d' % next(_numbers),
              'groups': [{'resources:FPGA': '1'}]}
    values.update(kw)
    if engine is None:
        return profiles_db.device_profile_create(
            context or cyborg_context.get_admin_context(), values)
    row = {key: value for key, value in values.items() if key != 'groups'}
    row.setdefault('uuid', uuidutils.generate_uuid())
    row['profile_json'] = json.dumps({'groups': values['groups']})
    return _insert(engine, models.DeviceProfile, row)


def create_test_attribute(engine=None, **kw) -> dict[str, Any]:
    """An attribute ``k=v``; of a new deployable unless
    ``deployable_id`` is given."""
    values = {'uuid': uuidutils.generate_uuid(), 'key': 'k', 'value': 'v'}
    values.update(kw)
    if 'deployable_id' not in values:
        values['deployable_id'] = create_test_deployable(engine)['id']
    return _insert(engine, models.Attribute, values)


def create_test_arq(engine=None, **kw) -> dict[str, Any]:
    """An ``Initial`` ARQ of project ``p1``; of a new device profile
    unless ``device_profile_id`` is given."""
    values = {'uuid': uuidutils.generate_uuid(),
              'state': arq_states.INITIAL, 'project_id': 'p1',
              'device_profile_group_id': 0}
    values.update(kw)
    if 'device_profile_id' not in values:
        values['device_profile_id'] = create_test_device_profile()['id']
    return _insert(engine, models.ExtendedAcceleratorRequest, values)


def create_test_service(engine=None, **kw) -> dict[str, Any]:
    """A service row (an agent on host ``h1``, never seen up)."""
    values = {'host': 'h1', 'binary': 'cyborg-agent'}
    values.update(kw)
    return _insert(engine, models.Service, values)


def create_test_provider(engine=None, **kw) -> dict[str, Any]:
    """What a sync of host ``h1`` recorded of one resource provider."""
    values = {'uuid': uuidutils.generate_uuid(), 'host': 'h1',
              'name': 'h1_provider-%d' % next(_numbers),
              'parent_uuid': uuidutils.generate_uuid(), 'generation': 1}
    values.update(kw)
    return _insert(engine, models.PlacementProvider, values)


def create_test_nova_event(engine=None, **kw) -> dict[str, Any]:
    """A ``completed`` event in the outbox, due now and never sent."""
    values = {'arq_uuid': uuidutils.generate_uuid(),
              'instance_uuid': uuidutils.generate_uuid(),
              'status': 'completed', 'next_attempt_at': timeutils.utcnow()}
    values.update(kw)
    return _insert(engine, models.NovaEvent, values)
