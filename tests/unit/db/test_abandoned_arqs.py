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

"""Deleting abandoned ARQs (created, never bound, older than a cutoff),
on each database: which ones go, which stay, in batches, described for
their notification, and out of their project's usage."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import quotas as quotas_db
from cyborg.db.models import ARQS
from tests.unit.conductor import test_binding
from tests.unit.db import test_arq_transitions

NOW = datetime.datetime(2026, 11, 28, 12, 0, 0)
HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def pci(database, admin_context, conf):
    """Profile "one" (one FPGA); host1 with one device of 4 PCI
    handles: its rp uuid."""
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    return test_binding._report(admin_context, conf, 'host1', 'PCI')


def _created(engine, uuid, at):
    with engine.begin() as connection:
        connection.execute(sa.update(ARQS).where(ARQS.c.uuid == uuid)
                           .values(created_at=at))


def _arq(context, engine, age, project='p1'):
    uuid = arq_db.arq_create(context, 'one', project)[0]['uuid']
    _created(engine, uuid, NOW - age)
    return uuid


def _left(engine):
    with engine.connect() as connection:
        return {row.uuid: row.state for row in connection.execute(
            sa.select(ARQS.c.uuid, ARQS.c.state))}


def test_only_initial_arqs_older_than_the_cutoff_go(pci, admin_context,
                                                    database):
    old = _arq(admin_context, database, 2 * HOUR)
    young = _arq(admin_context, database, HOUR / 2)
    # Bound, then unbound: old and not Initial, so never abandoned.
    bound = _arq(admin_context, database, 2 * HOUR)
    test_arq_transitions._bind(admin_context, bound, pci, 'host1')
    unbound = _arq(admin_context, database, 2 * HOUR)
    test_arq_transitions._bind(admin_context, unbound, pci, 'host1',
                               test_binding.OTHER_INSTANCE)
    arq_db.arq_unbind(admin_context, [unbound], None)

    assert arq_db.delete_abandoned(admin_context, NOW - HOUR) == [old]

    assert _left(database) == {young: 'Initial', bound: 'Bound',
                               unbound: 'Unbound'}
    # Nothing more to delete: nothing changes.
    assert arq_db.delete_abandoned(admin_context, NOW - HOUR) == []
    assert len(_left(database)) == 3


def test_a_batch_at_a_time_oldest_first(pci, admin_context, database):
    uuids = [_arq(admin_context, database, (5 - i) * HOUR) for i in range(4)]
    assert arq_db.delete_abandoned(admin_context, NOW, limit=3) == uuids[:3]
    assert arq_db.delete_abandoned(admin_context, NOW, limit=3) == uuids[3:]
    assert _left(database) == {}


def test_the_deleted_are_described_as_they_were(pci, admin_context,
                                                database):
    uuid = _arq(admin_context, database, 2 * HOUR)
    described = ['left over from a retried transaction']
    arq_db.delete_abandoned(admin_context, NOW - HOUR, described)
    assert [(arq['uuid'], arq['state'], arq['device_profile_name'],
             arq['project_id']) for arq in described] == [
        (uuid, 'Initial', 'one', 'p1')]
    # Nothing deleted, nothing described.
    arq_db.delete_abandoned(admin_context, NOW - HOUR, described)
    assert described == []


def test_they_leave_their_projects_usage(pci, admin_context, database):
    _arq(admin_context, database, 2 * HOUR, project='p1')
    kept = _arq(admin_context, database, HOUR / 2, project='p1')
    with database.connect() as connection:
        assert quotas_db.count_usage(connection, 'p1')[
            'accelerator_requests'] == 2
    arq_db.delete_abandoned(admin_context, NOW - HOUR)
    with database.connect() as connection:
        assert quotas_db.count_usage(connection, 'p1')[
            'accelerator_requests'] == 1
    assert list(_left(database)) == [kept]
