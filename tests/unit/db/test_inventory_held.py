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

"""The inventory diff while ARQs hold what a report changes, through the
conductor's ``report_inventory`` (with its early return on an unchanged
report) and a fake Placement, on each database."""

import copy
import json

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import constants
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import arq_states as states
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit import fakes
from tests.unit.conductor.test_placement_sync import FakePlacement

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
KEPT = '0000:10:00.0'    # always reported
HELD = '0000:11:00.0'    # the device an ARQ holds a handle of


@pytest.fixture
def full(conf):
    """The host's whole tree: two devices of one deployable and two PCI
    handles each."""
    conf.set_override('num_devices', 2, group='fake_driver')
    conf.set_override('accelerators_per_device', 2, group='fake_driver')
    yield device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')
    conf.clear_override('accelerators_per_device', group='fake_driver')


@pytest.fixture
def placement():
    return FakePlacement()


@pytest.fixture
def conductor(database, placement, admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    return conductor_manager.ConductorManager(
        'c1', fakes.inline_syncer(placement))


def _report(conductor, context, wire):
    return conductor.report_inventory(context, 'host1', 'host1.example',
                                      wire, device_tree.tree_digest(wire), [])


def _rp(address):
    return providers.provider_uuid('host1', address,
                                   address.replace(':', '_').replace('.',
                                                                     '_'))


def _bind_one(context, address):
    """An ARQ Bound to a handle of the device at ``address``; its uuid."""
    arq = arq_db.arq_create(context, 'one', 'p1')[0]
    binding_db.bind(context, {arq['uuid']: {
        'hostname': 'host1', 'device_rp_uuid': _rp(address),
        'instance_uuid': INSTANCE}}, None, 'c1')
    assert arq_db.arq_get(context, arq['uuid'], None)['state'] == (
        states.BOUND)
    return arq['uuid']


def _rows(engine):
    """(device address, missing) -> {deployable name: [(handle bus and
    function, in use)]} of every row of host1."""
    devices, deployables, handles = (
        models.Device.__table__, models.Deployable.__table__,
        models.AttachHandle.__table__)
    query = (sa.select(devices.c.address, devices.c.missing,
                       deployables.c.name, handles.c.attach_info,
                       handles.c.in_use)
             .select_from(devices)
             .outerjoin(deployables, deployables.c.device_id == devices.c.id)
             .outerjoin(handles, handles.c.deployable_id == deployables.c.id)
             .where(devices.c.hostname == 'host1'))
    tree = {}
    with engine.connect() as connection:
        for row in connection.execute(query):
            deps = tree.setdefault((row.address, row.missing), {})
            if row.name is None:
                continue
            held = deps.setdefault(row.name, [])
            if row.attach_info is not None:
                info = json.loads(row.attach_info)
                held.append((info['bus'] + '.' + info['function'],
                             bool(row.in_use)))
    return {key: {name: sorted(value) for name, value in deps.items()}
            for key, deps in tree.items()}


FREE_10 = {'0000_10_00_0': [('10.1', False), ('10.2', False)]}


@pytest.mark.parametrize('release', ['unbind', 'delete'])
def test_a_missing_device_goes_once_released_even_if_unchanged(
        conductor, placement, admin_context, database, full, release):
    """Report -> an ARQ binds a handle -> the device vanishes (kept,
    missing) -> the same report again -> the handle is released -> the
    next report, unchanged, removes the device, its deployable and
    handles, and its Placement provider."""
    assert _report(conductor, admin_context, full) == {
        'changed': True, 'synced': True}
    assert set(placement.providers) == {_rp(KEPT), _rp(HELD)}
    arq = _bind_one(admin_context, HELD)
    partial = copy.deepcopy(full[:1])
    assert _report(conductor, admin_context, partial)['changed'] is True
    held_tree = {(KEPT, False): FREE_10, (HELD, True): {
        '0000_11_00_0': [('11.1', True), ('11.2', False)]}}
    assert _rows(database) == held_tree
    # Kept in Placement, its whole inventory reserved.
    assert placement.providers[_rp(HELD)]['inventories']['FPGA'][
        'reserved'] == 2
    placement.calls.clear()
    assert _report(conductor, admin_context, partial) == {
        'changed': False, 'synced': True}
    assert _rows(database) == held_tree
    assert placement.calls == []

    if release == 'unbind':
        arq_db.arq_unbind(admin_context, [arq], None)
    else:
        arq_db.arq_delete(admin_context, [arq], None, None)
    assert _report(conductor, admin_context, partial) == {
        'changed': True, 'synced': True}
    assert _rows(database) == {(KEPT, False): FREE_10}
    assert placement.kinds() == ['delete']
    assert set(placement.providers) == {_rp(KEPT)}
    assert inventory.report_state(admin_context, 'host1') == (
        device_tree.tree_digest(partial), False)
    # Back to the steady state: nothing applied, nothing sent.
    placement.calls.clear()
    assert _report(conductor, admin_context, partial) == {
        'changed': False, 'synced': True}
    assert placement.calls == []


def _report_with_readings(conductor, context, wire, load):
    """A report as every agent since RPC 1.2 sends it: each device with
    a utilization reading."""
    readings = {device['address']: {'gpu_percent': float(load)}
                for device in wire}
    return conductor.report_inventory(
        context, 'host1', 'host1.example', wire,
        device_tree.tree_digest(wire), [], utilization=readings)


@pytest.mark.parametrize('release', ['unbind', 'delete'])
def test_a_missing_device_goes_once_released_with_utilization(
        conductor, placement, admin_context, database, full, release):
    """The path agents take today (reports carry utilization): once the
    handle of a device that vanished while bound is released, the next
    report, unchanged and with the same readings, still removes the
    device and its provider (a report that returned early on the stored
    digest would keep it, its provider fully reserved)."""
    assert _report_with_readings(conductor, admin_context, full, 10) == {
        'changed': True, 'synced': True}
    arq = _bind_one(admin_context, HELD)
    partial = copy.deepcopy(full[:1])
    assert _report_with_readings(conductor, admin_context, partial,
                                 10)['changed'] is True
    assert placement.providers[_rp(HELD)]['inventories']['FPGA'][
        'reserved'] == 2
    assert _report_with_readings(conductor, admin_context, partial,
                                 10) == {'changed': False, 'synced': True}
    assert (HELD, True) in _rows(database)

    if release == 'unbind':
        arq_db.arq_unbind(admin_context, [arq], None)
    else:
        arq_db.arq_delete(admin_context, [arq], None, None)
    assert _report_with_readings(conductor, admin_context, partial, 10) == {
        'changed': True, 'synced': True}
    assert _rows(database) == {(KEPT, False): FREE_10}
    assert set(placement.providers) == {_rp(KEPT)}
    # The readings of the device left are kept through the removal.
    state = inventory.host_state(admin_context, 'host1')
    assert list(state.devices) == [KEPT]
    assert json.loads(state.devices[KEPT][1])['metrics'] == {
        'gpu_percent': 10.0}


def test_a_missing_device_still_held_is_not_applied_again(
        conductor, placement, admin_context, database, full):
    """While the handle stays in use an unchanged report costs nothing,
    even with a free handle on the missing device."""
    _report(conductor, admin_context, full)
    _bind_one(admin_context, HELD)
    partial = copy.deepcopy(full[:1])
    _report(conductor, admin_context, partial)
    assert inventory.report_state(admin_context, 'host1') == (
        device_tree.tree_digest(partial), False)
    assert inventory.apply_report(admin_context, 'host1', 'host1.example',
                                  partial, device_tree.tree_digest(partial),
                                  []) is None


def test_a_missing_device_that_comes_back_keeps_its_binding(
        conductor, placement, admin_context, database, full):
    _report(conductor, admin_context, full)
    arq = _bind_one(admin_context, HELD)
    handle = arq_db.arq_get(admin_context, arq, None)['attach_handle_uuid']
    _report(conductor, admin_context, copy.deepcopy(full[:1]))
    assert (HELD, True) in _rows(database)
    assert _report(conductor, admin_context, full)['changed'] is True
    assert _rows(database) == {(KEPT, False): FREE_10, (HELD, False): {
        '0000_11_00_0': [('11.1', True), ('11.2', False)]}}
    assert placement.providers[_rp(HELD)]['inventories']['FPGA'][
        'reserved'] == 0
    stored = arq_db.arq_get(admin_context, arq, None)
    assert (stored['state'], stored['attach_handle_uuid']) == (
        states.BOUND, handle)
    # Released, the device stays: it is reported.
    arq_db.arq_unbind(admin_context, [arq], None)
    assert _report(conductor, admin_context, full)['changed'] is False
    assert (HELD, False) in _rows(database)


def test_a_held_deployable_and_handle_stay_until_released(
        conductor, placement, admin_context, database, full):
    """A deployable, or a handle, the report drops while an ARQ holds it
    is kept (its device is reported: not missing; the deployable keeps
    only the handle in use); the next changed report after the release
    removes it."""
    _report(conductor, admin_context, full)
    on_held = _bind_one(admin_context, HELD)
    on_kept = _bind_one(admin_context, KEPT)
    changed = copy.deepcopy(full)
    changed[1]['deployables'] = []          # the held deployable goes
    held_handle = arq_db.arq_get(admin_context, on_kept, None)[
        'attach_handle_info']
    changed[0]['deployables'][0]['attach_handles'] = [
        h for h in changed[0]['deployables'][0]['attach_handles']
        if h['attach_info'] != held_handle] + [{   # the held handle goes
            'attach_type': 'TEST_PCI', 'attach_info': {
                'domain': '0000', 'bus': '10', 'device': '00',
                'function': '3'}}]              # and one is added
    assert _report(conductor, admin_context, changed)['changed'] is True
    assert _rows(database) == {
        (KEPT, False): {'0000_10_00_0': [
            ('10.1', True), ('10.2', False), ('10.3', False)]},
        (HELD, False): {'0000_11_00_0': [('11.1', True)]}}
    arq_db.arq_unbind(admin_context, [on_held], None)
    arq_db.arq_delete(admin_context, [on_kept], None, None)
    changed[0]['health'] = 'degraded'
    assert _report(conductor, admin_context, changed)['changed'] is True
    assert _rows(database) == {
        (KEPT, False): {'0000_10_00_0': [('10.2', False), ('10.3', False)]},
        (HELD, False): {}}
    assert set(placement.providers) == {_rp(KEPT)}


@pytest.fixture
def agent_api(conductor):
    """The conductor's RPC API as an agent uses it, over the in-process
    transport (the real client and its 1.3 digest-only protocol)."""
    transport = rpc.LocalTransport()
    server = rpc.get_server(transport, constants.CONDUCTOR_TOPIC, 'c1',
                            conductor)
    server.start()
    yield conductor_rpcapi.ConductorAPI(transport)
    server.stop()
    rpc.cleanup(transport)


class _Agent:
    """Reports as :class:`cyborg.agent.discovery.Discovery` does: the
    digest alone once the conductor answered a report of that tree."""

    def __init__(self, api, context):
        self.api, self.context = api, context
        self.acknowledged = None
        self.sent_trees = 0

    def report(self, wire):
        digest = device_tree.tree_digest(wire)
        acknowledged = digest == self.acknowledged
        answer = self.api.report_inventory(
            self.context, 'host1', 'host1.example', wire, digest, [],
            utilization={device['address']: {'gpu_percent': 10.0}
                         for device in wire},
            acknowledged=acknowledged)
        self.acknowledged = digest
        return answer


@pytest.mark.parametrize('release', ['unbind', 'delete'])
def test_a_missing_device_goes_once_released_with_digest_only_reports(
        agent_api, placement, admin_context, database, full, release,
        monkeypatch):
    """The path agents take from RPC 1.3: an unchanged tree is sent as
    its digest alone. While a removal waits (the handle of a vanished
    device was released), the conductor asks for the tree, and the
    device goes."""
    sent = []
    original = conductor_manager.ConductorManager.report_inventory

    def recording(self, context, host, rp_name, devices, *args, **kwargs):
        sent.append(devices is not None)
        return original(self, context, host, rp_name, devices, *args,
                        **kwargs)
    monkeypatch.setattr(conductor_manager.ConductorManager,
                        'report_inventory', recording)
    agent = _Agent(agent_api, admin_context)
    assert agent.report(full)['changed'] is True
    arq = _bind_one(admin_context, HELD)
    partial = copy.deepcopy(full[:1])
    assert agent.report(partial)['changed'] is True
    assert agent.report(partial) == {'changed': False, 'synced': True}
    # Two trees, then a digest alone.
    assert sent == [True, True, False]
    assert (HELD, True) in _rows(database)

    if release == 'unbind':
        arq_db.arq_unbind(admin_context, [arq], None)
    else:
        arq_db.arq_delete(admin_context, [arq], None, None)
    sent.clear()
    assert agent.report(partial) == {'changed': True, 'synced': True}
    # The digest, refused (a removal waits), then the tree.
    assert sent == [False, True]
    assert _rows(database) == {(KEPT, False): FREE_10}
    assert set(placement.providers) == {_rp(KEPT)}
    sent.clear()
    assert agent.report(partial) == {'changed': False, 'synced': True}
    assert sent == [False]


def test_a_digest_only_report_of_another_tree_writes_nothing(
        agent_api, admin_context, database, full):
    """A digest the host's row does not hold (here: its row was changed
    behind the agent's back) writes nothing and asks for the tree, which
    the client sends at once."""
    agent = _Agent(agent_api, admin_context)
    agent.report(full)
    with database.begin() as connection:
        connection.execute(sa.update(models.Service.__table__).where(
            models.Service.__table__.c.host == 'host1').values(
            report_hash='0' * 64))
    assert inventory.host_state(admin_context, 'host1').digest == '0' * 64
    assert agent.report(full) == {'changed': True, 'synced': True}
    assert inventory.host_state(admin_context, 'host1').digest == (
        device_tree.tree_digest(full))
