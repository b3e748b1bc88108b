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

"""Utilization reports outside the tree, on each database: what they
store and what they cost (cyborg.conductor.inventory, cyborg.db.inventory).
"""

import datetime
import json

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.conductor import inventory
from cyborg.db import inventory as inventory_db
from cyborg.db import models
from cyborg.domain import device_tree
from tests.unit.db import statements as sql_statements

HOST = 'host1'


@pytest.fixture
def tree(conf):
    conf.set_override('num_devices', 3, group='fake_driver')
    devices = fake.FakeDriver(conf).discover()
    for device in devices:
        device.driver = 'fake_driver'
    wire = device_tree.tree_to_wire(devices)
    yield wire, device_tree.tree_digest(wire)
    conf.clear_override('num_devices', group='fake_driver')




def _stored(engine) -> dict:
    devices = models.Device.__table__
    with engine.connect() as connection:
        rows = connection.execute(sa.select(
            devices.c.address, devices.c.utilization,
            devices.c.updated_at)).all()
    return {row.address: (json.loads(row.utilization)
                          if row.utilization else None, row.updated_at)
            for row in rows}


def _apply(context, tree, utilization, failed=()):
    wire, digest = tree
    return inventory.apply(context, HOST, 'node1', wire, digest,
                           list(failed), utilization)


def _addresses(tree):
    return [device['address'] for device in tree[0]]


def test_first_report_stores_the_metrics(database, admin_context, tree):
    first, second, third = _addresses(tree)
    outcome = _apply(admin_context, tree, {
        first: {'gpu_percent': 37, 'memory_used_mib': 1024},
        second: {'vfs_in_use': 2, 'vfs_total': 16, 'bogus': 1},
        'not-a-device-of-the-host': {'gpu_percent': 1}})
    assert outcome.changed
    stored = _stored(database)
    assert stored[first][0]['metrics'] == {'gpu_percent': 37.0,
                                           'memory_used_mib': 1024}
    assert stored[first][0]['reported_at'].endswith('Z')
    assert stored[second][0]['metrics'] == {'vfs_in_use': 2,
                                            'vfs_total': 16}
    assert stored[third][0] is None


def test_unchanged_readings_get_the_latest_reports_time(
        database, admin_context, tree):
    """``reported_at`` is the latest report's, not the first one to carry
    these values: a report with readings costs one write more than the
    read of an unchanged tree, however many devices it measured."""
    first, second, _third = _addresses(tree)
    utilization = {first: {'gpu_percent': 37.0}, second: {'vfs_in_use': 1}}
    timeutils.set_time_override(datetime.datetime(2026, 11, 27, 10, 0, 0))
    try:
        _apply(admin_context, tree, utilization)
        before = _stored(database)
        timeutils.advance_time_seconds(60)
        with sql_statements.StatementCounter(database) as statements:
            outcome = _apply(admin_context, tree, utilization)
    finally:
        timeutils.clear_time_override()
    assert statements.count == 2
    assert not outcome.changed
    after = _stored(database)
    for address in (first, second):
        assert before[address][0]['reported_at'] == '2026-11-27T10:00:00Z'
        assert after[address][0] == dict(before[address][0],
                                         reported_at='2026-11-27T10:01:00Z')
        # A reading is no change of the device.
        assert after[address][1] == before[address][1]


def test_an_unchanged_tree_without_readings_costs_one_statement(
        database, admin_context, tree):
    _apply(admin_context, tree, {})
    with sql_statements.StatementCounter(database) as statements:
        outcome = _apply(admin_context, tree, {})
    assert statements.count == 1
    assert not outcome.changed


def test_changed_utilization_costs_one_more_statement(
        database, admin_context, tree):
    first, second, third = _addresses(tree)
    _apply(admin_context, tree, {first: {'gpu_percent': 37.0},
                                 second: {'vfs_in_use': 1}})
    before = _stored(database)
    with sql_statements.StatementCounter(database) as statements:
        outcome = _apply(admin_context, tree, {
            first: {'gpu_percent': 80.0}, third: {'memory_used_mib': 5}})
    assert statements.count == 2
    assert not outcome.changed  # no diff of the tree
    after = _stored(database)
    assert after[first][0]['metrics'] == {'gpu_percent': 80.0}
    assert after[second][0] is None  # no longer measured
    assert after[third][0]['metrics'] == {'memory_used_mib': 5}
    # A utilization is no change of the device.
    assert {a: v[1] for a, v in after.items()} == {
        a: v[1] for a, v in before.items()}


def test_devices_of_a_failed_driver_keep_their_utilization(
        database, admin_context, tree):
    first = _addresses(tree)[0]
    _apply(admin_context, tree, {first: {'gpu_percent': 37.0}})
    wire, _digest = tree
    failed_tree = (wire, device_tree.tree_digest({'failed': wire}))
    _apply(admin_context, failed_tree, {}, failed=['fake_driver'])
    assert _stored(database)[first][0]['metrics'] == {'gpu_percent': 37.0}


def test_a_report_without_utilization_leaves_it_alone(
        database, admin_context, tree):
    """An agent capped at RPC 1.0 sends none: what was stored stays and
    an unchanged report still costs one statement."""
    first = _addresses(tree)[0]
    _apply(admin_context, tree, {first: {'gpu_percent': 37.0}})
    with sql_statements.StatementCounter(database) as statements:
        _apply(admin_context, tree, None)
    assert statements.count == 1
    assert _stored(database)[first][0]['metrics'] == {'gpu_percent': 37.0}


def test_host_state_reads_a_host_without_devices(database, admin_context):
    inventory.apply(admin_context, HOST, 'node1', [], 'empty', [], {})
    state = inventory_db.host_state(admin_context, HOST)
    assert state.digest == 'empty'
    assert state.devices == {}
    assert inventory_db.host_state(admin_context, 'elsewhere') is None


def test_readings_that_stop_are_cleared_with_one_statement(
        database, admin_context, tree):
    """Only NULLs to write (every reading stopped): still one UPDATE,
    which each database types as text."""
    first, second, _third = _addresses(tree)
    _apply(admin_context, tree, {first: {'gpu_percent': 1.0},
                                 second: {'vfs_total': 2}})
    with sql_statements.StatementCounter(database) as statements:
        _apply(admin_context, tree, {})
    assert statements.count == 2
    assert [value[0] for value in _stored(database).values()] == [None] * 3
