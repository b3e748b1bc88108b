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

"""The conductor's flow code against fakes of the DB API: what an
inventory report reads and writes in which order, what a sync builds
from the rows it reads and when it records its outcome. The database
side of each step is tested in test_inventory.py and
test_placement_sync.py."""

import concurrent.futures
import logging
import types

import pytest

from cyborg.conductor import inventory
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.db import inventory as inventory_db
from cyborg.db import providers as providers_db
from tests.unit import fakes

CONTEXT = object()
COMPUTE_RP = 'c0ffee00-0000-4000-8000-000000000001'


class FakeInventoryDB:
    """host_state answers ``states`` in turn (each a (digest, sync
    pending) pair or None); apply_report answers ``summary``; every call
    is recorded."""

    def __init__(self, states, summary=None):
        self.states = list(states)
        self.summary = summary
        self.calls = []

    def host_state(self, context, host):
        self.calls.append(('host_state', host))
        state = self.states.pop(0)
        if state is None:
            return None
        return inventory_db.HostState(state[0], state[1], {})

    def apply_report(self, context, host, rp_name, devices, digest,
                     failed_drivers, utilization=None, readings=None):
        self.calls.append(('apply_report', host, rp_name, digest,
                           tuple(failed_drivers)))
        return self.summary


@pytest.fixture
def records():
    handler = fakes.LogRecords()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(level)


def _use(monkeypatch, fake):
    monkeypatch.setattr(inventory_db, 'host_state', fake.host_state)
    monkeypatch.setattr(inventory_db, 'apply_report', fake.apply_report)


def test_unchanged_report_costs_one_read(monkeypatch, records):
    fake = FakeInventoryDB([('d1', False)])
    _use(monkeypatch, fake)
    outcome = inventory.apply(CONTEXT, 'h1', 'h1.example', [], 'd1', [])
    assert outcome == inventory.ReportOutcome(changed=False,
                                              sync_pending=False)
    assert fake.calls == [('host_state', 'h1')]
    assert not records


def test_digest_only_report_of_the_applied_tree_costs_one_read(monkeypatch):
    """RPC 1.3: a report without devices whose digest is the host's."""
    fake = FakeInventoryDB([('d1', False)])
    _use(monkeypatch, fake)
    outcome = inventory.apply(CONTEXT, 'h1', 'h1', None, 'd1', [])
    assert outcome == inventory.ReportOutcome(changed=False,
                                              sync_pending=False)
    assert fake.calls == [('host_state', 'h1')]


@pytest.mark.parametrize('state', [None, ('d0', True), (None, False)])
def test_digest_only_report_of_another_tree_asks_for_it(monkeypatch, state):
    """A host never applied, another digest, or a removal waiting for the
    next tree (digest None): nothing is applied, the agent must send its
    tree."""
    fake = FakeInventoryDB([state])
    _use(monkeypatch, fake)
    outcome = inventory.apply(CONTEXT, 'h1', 'h1', None, 'd1', [],
                              utilization={'0000:3b:00.0': {
                                  'gpu_percent': 5.0}})
    assert outcome.resend and not outcome.changed
    assert fake.calls == [('host_state', 'h1')]


def test_manager_answers_resend(monkeypatch):
    _use(monkeypatch, FakeInventoryDB([('d0', False)]))
    manager = conductor_manager.ConductorManager('c1', None)
    assert manager.report_inventory(CONTEXT, 'h1', 'h1', None, 'd1', []) == {
        'changed': False, 'synced': False, 'resend': True}


def test_unchanged_report_tells_a_pending_sync(monkeypatch):
    _use(monkeypatch, FakeInventoryDB([('d1', True)]))
    assert inventory.apply(CONTEXT, 'h1', 'h1', [], 'd1', []).sync_pending


@pytest.mark.parametrize('state', [None, ('d0', False), (None, False)])
def test_changed_report_is_applied_without_a_second_read(monkeypatch,
                                                         records, state):
    """A new host (no state), a new digest, or a released missing device
    waiting for removal (digest None): the report is applied, and its
    transaction counted a sync request, so the host is pending without
    reading its row again."""
    summary = inventory_db.DiffSummary(added=2, removed=1)
    fake = FakeInventoryDB([state], summary)
    _use(monkeypatch, fake)
    outcome = inventory.apply(CONTEXT, 'h1', 'h1.example', [], 'd1',
                              ['broken'])
    assert outcome == inventory.ReportOutcome(changed=True,
                                              sync_pending=True)
    assert fake.calls == [
        ('host_state', 'h1'),
        ('apply_report', 'h1', 'h1.example', 'd1', ('broken',))]
    assert [r.getMessage() for r in records] == [
        'Inventory of h1: 2 added, 0 updated, 1 removed, 0 kept while in '
        'use']


def test_report_applied_without_change_logs_nothing(monkeypatch, records):
    fake = FakeInventoryDB([('d0', False)], inventory_db.DiffSummary())
    _use(monkeypatch, fake)
    assert inventory.apply(CONTEXT, 'h1', 'h1', [], 'd1', []).changed
    assert not records


def test_report_applied_meanwhile_is_not_changed(monkeypatch):
    """Another conductor applied the same report between the read and
    the write: apply_report answers None, and the state is read again."""
    fake = FakeInventoryDB([('d0', False), ('d1', False)])
    _use(monkeypatch, fake)
    assert inventory.apply(CONTEXT, 'h1', 'h1', [], 'd1', []) == (
        inventory.ReportOutcome(changed=False, sync_pending=False))
    assert [call[0] for call in fake.calls] == [
        'host_state', 'apply_report', 'host_state']


class FakeSyncer:
    """Records the hosts handed to it; their syncs answer ``synced``
    (None: still running)."""

    def __init__(self, synced):
        self.synced = synced
        self.requested = []

    def request(self, host):
        self.requested.append(host)
        future = concurrent.futures.Future()
        if self.synced is not None:
            future.set_result(self.synced)
        return future


@pytest.mark.parametrize('pending, synced, expected', [
    (False, None, True), (True, True, True), (True, False, False),
    (True, None, False)])
def test_report_requests_a_sync_only_when_pending(monkeypatch, pending,
                                                  synced, expected):
    """The answer does not wait for the sync: ``synced`` tells whether it
    was done when the conductor answered."""
    monkeypatch.setattr(inventory, 'apply', lambda *args: (
        inventory.ReportOutcome(changed=True, sync_pending=pending)))
    syncer = FakeSyncer(synced)
    manager = conductor_manager.ConductorManager('c1', syncer)
    answer = manager.report_inventory(CONTEXT, 'h1', 'h1', [], 'd1', [])
    assert answer == {'changed': True, 'synced': expected}
    assert syncer.requested == (['h1'] if pending else [])


def test_report_without_placement_leaves_the_host_pending(monkeypatch):
    monkeypatch.setattr(inventory, 'apply', lambda *args: (
        inventory.ReportOutcome(changed=True, sync_pending=True)))
    manager = conductor_manager.ConductorManager('c1')
    assert manager.report_inventory(CONTEXT, 'h1', 'h1', [], 'd1', []) == {
        'changed': True, 'synced': False}


# Placement sync


def _deployable(id_, name, status='enabled', health='healthy',
                missing=False, num=4, parent_id=None):
    return types.SimpleNamespace(
        id=id_, name=name, rp_uuid='rp-%s' % name, num_accelerators=num,
        status=status, health=health, missing=missing, parent_id=parent_id,
        device_id=1, retained=False)


def _host_rows(deployables, attributes, compute_rp=None, known=None):
    service = types.SimpleNamespace(id=7, sync_requested=3, sync_done=1,
                                    sync_epoch=5, rp_name='h1.example',
                                    compute_rp_uuid=compute_rp)
    return providers_db.HostRows(service, deployables, attributes,
                                 known or {})


def test_children_hang_under_their_parents_provider(monkeypatch):
    """A child's provider is under its parent's, listed after it; only
    top providers move under the compute node once it is found."""
    rows = _host_rows(
        [_deployable(3, 'vf', parent_id=1), _deployable(1, 'pf')],
        {1: {'rc': 'FPGA'}, 3: {'rc': 'FPGA'}})
    monkeypatch.setattr(providers_db, 'host_rows',
                        lambda context, host: rows)
    state = placement_sync.load_host_state(CONTEXT, 'h1')
    assert list(state.desired) == ['rp-pf', 'rp-vf']
    state.set_compute_rp(COMPUTE_RP)
    assert [spec.parent_uuid for spec in state.desired.values()] == [
        COMPUTE_RP, 'rp-pf']


def test_host_state_is_built_from_the_rows(monkeypatch):
    rows = _host_rows(
        [_deployable(1, 'a'), _deployable(2, 'b', status='maintaining'),
         _deployable(3, 'no-rc')],
        {1: {'rc': 'FPGA', 'trait1': 'CUSTOM_B', 'trait0': 'CUSTOM_A',
             'other': 'x'},
         2: {'rc': 'PGPU'}},
        compute_rp=COMPUTE_RP, known={'rp-a': 'row'})
    asked = []
    monkeypatch.setattr(providers_db, 'host_rows',
                        lambda context, host: asked.append(host) or rows)
    state = placement_sync.load_host_state(CONTEXT, 'h1')
    assert asked == ['h1']
    assert (state.service_id, state.sync_requested, state.sync_done,
            state.rp_name, state.compute_rp_uuid, state.sync_epoch) == (
        7, 3, 1, 'h1.example', COMPUTE_RP, 5)
    assert state.known == {'rp-a': 'row'}
    assert sorted(state.desired) == ['rp-a', 'rp-b']
    a, b = state.desired['rp-a'], state.desired['rp-b']
    assert (a.name, a.parent_uuid) == ('h1_a', COMPUTE_RP)
    assert a.traits == ['CUSTOM_A', 'CUSTOM_B', 'OWNER_CYBORG']
    assert a.inventories['FPGA']['reserved'] == 0
    # A device not enabled reserves its whole inventory.
    assert b.inventories['PGPU']['reserved'] == 4
    assert b.traits == ['OWNER_CYBORG']


def test_host_without_agent_has_no_state(monkeypatch):
    monkeypatch.setattr(providers_db, 'host_rows', lambda context, host: None)
    assert placement_sync.load_host_state(CONTEXT, 'h1') is None


def _state(requested=3, done=1):
    return placement_sync.HostState(7, requested, done, 'h1.example',
                                    COMPUTE_RP, {}, {})


def _write(uuid, known, changed=True):
    spec = placement_sync.ProviderSpec(uuid, 'h1_' + uuid, COMPUTE_RP,
                                       {}, [])
    write = placement_sync._Write(spec, known, True, 5, COMPUTE_RP, None,
                                  None)
    write.changed = changed
    return write


@pytest.fixture
def saved(monkeypatch):
    calls = []
    monkeypatch.setattr(
        providers_db, 'save_sync',
        lambda context, service_id, record: calls.append(
            (service_id, record)))
    return calls


def test_sync_records_only_what_changed(saved):
    writes = [_write('a', known=True), _write('b', known=False),
              _write('c', known=True, changed=False)]
    placement_sync._record(CONTEXT, 'h1', _state(), None, writes, ['old'],
                           complete=True)
    [(service_id, record)] = saved
    assert service_id == 7
    assert [row['uuid'] for row in record.providers] == ['a', 'b']
    assert record.providers[0] == dict(
        uuid='a', host='h1', name='h1_a', parent_uuid=COMPUTE_RP,
        generation=5, inventory_hash=None, traits_hash=None, adopted=False)
    assert record.recorded == {'a'}
    assert record.forgotten == ['old']
    assert record.compute_rp_uuid is None
    assert record.seen == 3


def test_incomplete_sync_marks_nothing_synced(saved):
    placement_sync._record(CONTEXT, 'h1', _state(), COMPUTE_RP, [], [],
                           complete=False)
    [(_id, record)] = saved
    assert (record.compute_rp_uuid, record.seen) == (COMPUTE_RP, None)


def test_sync_with_nothing_to_record_writes_nothing(saved):
    placement_sync._record(CONTEXT, 'h1', _state(requested=2, done=2),
                           None, [_write('a', True, changed=False)], [],
                           complete=True)
    assert saved == []
