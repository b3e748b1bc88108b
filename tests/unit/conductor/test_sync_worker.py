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

"""The conductor answers first: sync requests recorded with the write,
the Placement work on the sync worker after the answer, and nothing lost
when the sync does not run."""

import threading

import pytest

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.clients import placement as placement_client
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.conductor import sync_worker
from cyborg.db import hardware
from cyborg.db import services as services_db
from cyborg.domain import device_tree
from cyborg.domain import providers
from tests.unit.conductor.test_placement_sync import FakePlacement

HOST = 'host1'


class BlockingPlacement(FakePlacement):
    """A Placement whose compute node lookup waits for ``release``."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def find_provider_by_name(self, name):
        self.entered.set()
        assert self.release.wait(30)
        return super().find_provider_by_name(name)


@pytest.fixture
def wire(conf):
    conf.set_override('num_devices', 1, group='fake_driver')
    yield device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')


def _report(conductor, context, wire):
    return conductor.report_inventory(
        context, HOST, 'host1.example', wire, device_tree.tree_digest(wire),
        [], utilization={})


def _pending(context) -> bool:
    return services_db.sync_pending(context, HOST)


def test_the_report_is_answered_before_the_sync(database, admin_context,
                                                wire):
    """The agent's call returns while Placement is still being written;
    the sync then finishes on the worker."""
    placement = BlockingPlacement()
    syncer = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    conductor = conductor_manager.ConductorManager('c1', syncer)
    try:
        assert _report(conductor, admin_context, wire) == {
            'changed': True, 'synced': False}
        assert placement.entered.wait(30)
        assert _pending(admin_context)
        placement.release.set()
        assert syncer.wait(30)
        assert not _pending(admin_context)
        assert len(placement.providers) == 1
    finally:
        placement.release.set()
        syncer.stop()


def test_a_sync_that_never_ran_is_not_lost(database, admin_context, wire):
    """A conductor that stops between its answer and the sync leaves the
    host pending in the database: another conductor's periodic sync
    writes it."""
    placement = FakePlacement()
    stopped = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    stopped.stop()
    conductor = conductor_manager.ConductorManager('c1', stopped)
    assert _report(conductor, admin_context, wire)['synced'] is False
    assert placement.calls == []
    assert _pending(admin_context)

    other = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    other.sync_pending_hosts(admin_context)
    other.stop()
    assert not _pending(admin_context)
    assert len(placement.providers) == 1


def test_placement_down_leaves_the_host_pending(database, admin_context,
                                                wire):
    placement = FakePlacement()
    placement.unavailable = True
    syncer = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    conductor = conductor_manager.ConductorManager('c1', syncer)
    _report(conductor, admin_context, wire)
    assert syncer.wait(30)
    syncer.stop()
    assert _pending(admin_context)


def test_an_unbuildable_client_is_placement_unavailable():
    def broken():
        raise ValueError('no auth_url')

    sync = placement_sync.PlacementSync(client_factory=broken)
    with pytest.raises(placement_client.PlacementUnavailable,
                       match='no auth_url'):
        assert sync.client is None  # raises first


def test_requests_waiting_for_a_worker_are_folded():
    """Requests of a host whose sync waits for a worker share it; one
    that comes while the sync runs queues another."""
    started, release = threading.Event(), threading.Event()
    runs = []

    class Sync:
        def sync_host(self, context, host):
            runs.append(host)
            started.set()
            assert release.wait(30)
            return True

    worker = sync_worker.SyncWorker(Sync(), context_factory=lambda: None)
    try:
        first = worker.request('a')
        assert started.wait(30)
        second = worker.request('a')
        assert worker.request('a') is second
        assert second is not first
        release.set()
        assert worker.wait(30)
        assert first.result() is second.result() is True
        assert runs == ['a', 'a']
    finally:
        release.set()
        worker.stop()


def test_a_failing_sync_is_logged_and_answers_false():
    class Sync:
        def sync_host(self, context, host):
            raise RuntimeError('boom')

    worker = sync_worker.SyncWorker(Sync(), context_factory=lambda: None)
    assert worker.request('a').result(30) is False
    worker.stop()


def test_wait_synced_waits_for_the_host(database, admin_context, wire):
    placement = FakePlacement()
    syncer = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    syncer.stop()
    _report(conductor_manager.ConductorManager('c1', syncer),
            admin_context, wire)
    assert not sync_worker.wait_synced(admin_context, HOST, 0.1)
    syncer = sync_worker.SyncWorker(placement_sync.PlacementSync(placement))
    syncer.request(HOST)
    assert sync_worker.wait_synced(admin_context, HOST, 30)
    # The sync ends after its commit: let it, before the next test
    # empties the database.
    assert syncer.wait(30)
    syncer.stop()


# The requests recorded with the write ---------------------------------------

def _requested(context) -> int:
    [row] = [row for row in services_db.service_list(context)
             if row['host'] == HOST]
    return row['sync_requested']


@pytest.fixture
def syncer(database):
    """A worker on a fake Placement, its syncs finished and the worker
    stopped before the next test empties the database."""
    worker = sync_worker.SyncWorker(placement_sync.PlacementSync(
        FakePlacement()))
    yield worker
    assert worker.wait(30)
    worker.stop()


def test_a_status_change_requests_a_sync_in_its_transaction(
        database, admin_context, wire, syncer):
    conductor = conductor_manager.ConductorManager('c1', syncer)
    _report(conductor, admin_context, wire)
    [device] = hardware.device_list(admin_context, {})
    before = _requested(admin_context)
    hardware.device_set_status(admin_context, device['uuid'], 'maintaining')
    assert _requested(admin_context) == before + 1
    hardware.device_set_status(admin_context, device['uuid'], 'maintaining')
    assert _requested(admin_context) == before + 1


def test_an_attribute_that_shapes_placement_requests_a_sync(
        database, admin_context, wire, syncer):
    conductor = conductor_manager.ConductorManager('c1', syncer)
    _report(conductor, admin_context, wire)
    [deployable] = hardware.deployable_list(admin_context)
    before = _requested(admin_context)
    plain = hardware.attribute_create(admin_context, {
        'deployable_id': deployable['id'], 'key': 'note', 'value': 'x'})
    hardware.attribute_delete(admin_context, plain['uuid'])
    assert _requested(admin_context) == before
    trait = hardware.attribute_create(admin_context, {
        'deployable_id': deployable['id'],
        'key': providers.TRAIT_KEY_PREFIX + '9', 'value': 'CUSTOM_EXTRA'})
    assert _requested(admin_context) == before + 1
    assert set(hardware.attribute_delete(admin_context, trait['uuid'])) == (
        set(plain))
    assert _requested(admin_context) == before + 2
