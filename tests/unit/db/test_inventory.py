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

"""The conductor's diff of reported device trees, on each database."""

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit.db import statements as sql_statements

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'


@pytest.fixture
def fake_conf(conf):
    conf.set_override('num_devices', 2, group='fake_driver')
    conf.set_override('accelerators_per_device', 3, group='fake_driver')
    yield conf
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('accelerators_per_device', group='fake_driver')


def _report(conf):
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    return wire, device_tree.tree_digest(wire)


def _count(engine, model, **filters):
    query = sa.select(sa.func.count()).select_from(model.__table__)
    for key, value in filters.items():
        query = query.where(getattr(model, key) == value)
    with engine.connect() as connection:
        return connection.execute(query).scalar()


def _apply(context, wire, digest, failed=()):
    return inventory.apply_report(
        context, 'host1', 'host1.example', wire, digest, list(failed)
    )


def test_first_report_creates_the_tree(database, admin_context, fake_conf):
    wire, digest = _report(fake_conf)
    summary = _apply(admin_context, wire, digest)
    assert summary.added == 2
    assert _count(database, models.Device) == 2
    assert _count(database, models.Deployable) == 2
    assert _count(database, models.AttachHandle) == 6
    assert _count(database, models.ControlpathID) == 2
    assert _count(database, models.Attribute, key='rc') == 2
    assert inventory.report_state(admin_context, 'host1') == (digest, True)


def test_same_digest_is_not_applied_again(database, admin_context, fake_conf):
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    assert _apply(admin_context, wire, digest) is None


def test_changes_are_diffed(database, admin_context, fake_conf):
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    fake_conf.set_override('accelerators_per_device', 5, group='fake_driver')
    fake_conf.set_override(
        'traits', ['CUSTOM_B', 'CUSTOM_A'], group='fake_driver'
    )
    wire, digest = _report(fake_conf)
    summary = _apply(admin_context, wire, digest)
    assert (summary.added, summary.updated, summary.removed) == (0, 2, 0)
    assert _count(database, models.AttachHandle) == 10
    assert (
        _count(database, models.Attribute, key='trait1', value='CUSTOM_B') == 2
    )
    fake_conf.clear_override('traits', group='fake_driver')


def test_removed_device_is_deleted_unless_in_use(
    database, admin_context, fake_conf
):
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    # An ARQ holds a handle of the first device.
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    arq = arq_db.arq_create(admin_context, 'one', 'p1')[0]
    binding_db.bind(admin_context, {arq['uuid']: {
        'hostname': 'host1', 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            'host1', wire[0]['address'], wire[0]['deployables'][0]['name'])}},
        None, 'c1')
    assert _count(database, models.AttachHandle, in_use=True) == 1
    summary = _apply(admin_context, [], device_tree.tree_digest([]))
    assert (summary.removed, summary.kept_missing) == (1, 1)
    assert _count(database, models.Device, missing=True) == 1
    assert _count(database, models.AttachHandle) == 3


def test_failed_driver_keeps_its_devices(database, admin_context, fake_conf):
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    summary = _apply(admin_context, [], 'other', failed=['fake_driver'])
    assert not summary.changed
    assert _count(database, models.Device) == 2




def _statements_to_add(database, context, conf, devices: int) -> int:
    conf.set_override('num_devices', devices, group='fake_driver')
    wire, digest = _report(conf)
    with sql_statements.StatementCounter(database) as statements:
        summary = inventory.apply_report(
            context, 'host-%d' % devices, 'node', wire, digest, [])
    assert summary.added == devices
    return statements.count


def test_new_devices_cost_a_bounded_number_of_statements(
    database, admin_context, fake_conf
):
    """Rows of new devices are inserted with one or two statements per
    table, whatever their number."""
    one = _statements_to_add(database, admin_context, fake_conf, 1)
    many = _statements_to_add(database, admin_context, fake_conf, 12)
    assert many == one
    assert many <= 20
    assert _count(database, models.Device, hostname='host-12') == 12
    assert _count(database, models.Deployable) == 13
    assert _count(database, models.AttachHandle) == 13 * 3
    assert _count(database, models.ControlpathID) == 13
    assert _count(database, models.Attribute, key='rc') == 13


def test_new_rows_are_linked_to_their_parents(
    database, admin_context, fake_conf
):
    fake_conf.set_override('num_devices', 5, group='fake_driver')
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    devices = models.Device.__table__
    deployables = models.Deployable.__table__
    handles = models.AttachHandle.__table__
    cpids = models.ControlpathID.__table__
    with database.connect() as connection:
        rows = connection.execute(
            sa.select(devices.c.address, deployables.c.rp_uuid,
                      deployables.c.name, handles.c.attach_info,
                      cpids.c.cpid_info)
            .join(deployables, deployables.c.device_id == devices.c.id)
            .join(handles, handles.c.deployable_id == deployables.c.id)
            .join(cpids, cpids.c.id == handles.c.cpid_id)
        ).all()
    assert len(rows) == 5 * 3
    for row in rows:
        # Every handle and control path belongs to its own device.
        bus = row.address.split(':')[1]
        assert '"bus":"%s"' % bus in row.attach_info
        assert '"bus":"%s"' % bus in row.cpid_info
        assert row.rp_uuid == providers.provider_uuid(
            'host1', row.address, row.name)


def test_new_deployables_of_a_known_device_are_added(
    database, admin_context, fake_conf
):
    wire, digest = _report(fake_conf)
    _apply(admin_context, wire, digest)
    for device in wire:
        extra = dict(device['deployables'][0], name='extra')
        device['deployables'].append(extra)
    summary = _apply(admin_context, wire, 'with-extra')
    assert (summary.added, summary.updated) == (0, 2)
    assert _count(database, models.Deployable, name='extra') == 2
    assert _count(database, models.AttachHandle) == 12


def _preparations(engine) -> list[str]:
    table = models.Deployable.__table__
    with engine.connect() as connection:
        return [row.preparation for row in connection.execute(
            sa.select(table.c.preparation).order_by(table.c.name))]


def test_preparation_is_recorded_and_follows_the_report(
        database, admin_context, fake_conf):
    """A deployable's preparation is the declared one, or the default of
    its handles (reports of agents that declare none)."""
    fake_conf.set_override('handle_type', 'MDEV', group='fake_driver')
    _apply(admin_context, *_report(fake_conf))
    assert _preparations(database) == ['mdev', 'mdev']
    fake_conf.set_override('handle_type', 'PCI', group='fake_driver')
    fake_conf.set_override('preparation', 'vf', group='fake_driver')
    assert _apply(admin_context, *_report(fake_conf)).updated == 2
    assert _preparations(database) == ['vf', 'vf']
    fake_conf.clear_override('preparation', group='fake_driver')
    assert _apply(admin_context, *_report(fake_conf)).updated == 2
    assert _preparations(database) == ['none', 'none']
