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

"""ARQ creation, binding (in one transaction, or by a job for handles to
prepare), unbind and delete, on each database."""

import datetime
import time
from unittest import mock

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import exception
from cyborg.conductor import binding
from cyborg.conductor import service as conductor_service
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.domain import arq_states as states
from cyborg.domain import device_tree

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
OTHER_INSTANCE = '11111111-2222-4333-8444-555555555555'
LEASE = binding_db.Lease('cond1', 30)


def _report(context, conf, host, handle_type, preparation=None):
    conf.set_override('handle_type', handle_type, group='fake_driver')
    conf.set_override('preparation', preparation, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])
    return next(d['rp_uuid'] for d in hardware.deployable_list(context)
                if hardware.deployable_host(context, d['id']) == host)


@pytest.fixture
def profiles(database, admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'two', 'groups': [{'resources:FPGA': '1'},
                                  {'resources:FPGA': '1'}]})
    profiles_db.device_profile_create(admin_context, {
        'name': 'five', 'groups': [{'resources:FPGA': '5'}]})


@pytest.fixture
def host(profiles, admin_context, conf):
    """One fake device with 4 PCI handles on host1: its rp uuid."""
    return _report(admin_context, conf, 'host1', 'PCI')


@pytest.fixture
def mdev_host(profiles, admin_context, conf):
    """One fake device with 4 MDEV handles on host2: its rp uuid."""
    return _report(admin_context, conf, 'host2', 'MDEV')


@pytest.fixture
def vgpu_host(profiles, admin_context, conf):
    """One fake device with 4 PCI handles on host3 whose deployable
    declares the ``vgpu_type`` preparation: its rp uuid."""
    return _report(admin_context, conf, 'host3', 'PCI', 'vgpu_type')


class Recorder:
    """A Binder's collaborators: what was prepared, released and
    delivered."""

    def __init__(self, refuse=None, refuse_release=None):
        self.prepared = []
        self.delivered = []
        self.refuse = refuse
        self.released = []
        self.refuse_release = refuse_release

    def prepare(self, context, claim):
        if self.refuse:
            raise RuntimeError(self.refuse)
        self.prepared.append(claim)

    def release(self, context, handle):
        if self.refuse_release:
            raise RuntimeError(self.refuse_release)
        self.released.append(handle)

    def deliver(self, rows):
        self.delivered.extend(rows)


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def binder(recorder):
    job = binding.Binder('cond1', 2, 60, recorder, recorder.deliver,
                         LEASE)
    yield job
    job.stop()


def _bindings(arqs, rp, instance=INSTANCE, host='host1'):
    return {a['uuid']: {'hostname': host, 'device_rp_uuid': rp,
                        'instance_uuid': instance} for a in arqs}


def _states(context, arqs):
    return [arq_db.arq_get(context, a['uuid'], None)['state'] for a in arqs]


def _events(engine):
    with engine.connect() as connection:
        return [(r.arq_uuid, r.status) for r in connection.execute(
            sa.select(models.NovaEvent.__table__).order_by(
                models.NovaEvent.id))]


def _handles_in_use(engine):
    with engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use == sa.true())).scalar()


def _bind(context, arqs, rp, **kwargs):
    return binding_db.bind(context, _bindings(arqs, rp, **kwargs), None,
                           'cond1', LEASE)


def _run_jobs(context, binder, outcome):
    for uuid in outcome.jobs:
        binder.run(context, uuid)


def test_create_one_arq_per_accelerator(host, admin_context):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    assert [a['device_profile_group_id'] for a in arqs] == [0, 1]
    assert {a['state'] for a in arqs} == {states.INITIAL}
    assert arqs[0]['project_id'] == 'p1'
    assert arqs[0]['device_profile_name'] == 'two'
    stored = arq_db.arq_list(admin_context, 'p1')
    assert [(a['uuid'], a['state'], a['created_at']) for a in arqs] == [
        (a['uuid'], a['state'], a['created_at']) for a in stored]
    with pytest.raises(exception.DeviceProfileNotFound):
        arq_db.arq_create(admin_context, 'nope', 'p1')


def test_create_refuses_more_arqs_than_one_request_may_make(
        profiles, admin_context):
    with pytest.raises(exception.LimitExceeded, match='5, more than the 4'):
        arq_db.arq_create(admin_context, 'five', 'p1', max_arqs=4)
    assert arq_db.arq_list(admin_context, None) == []
    assert len(arq_db.arq_create(admin_context, 'five', 'p1',
                                 max_arqs=5)) == 5


def test_create_refuses_more_arqs_than_a_project_may_hold(
        profiles, admin_context):
    arq_db.arq_create(admin_context, 'two', 'p1', max_project_arqs=7)
    arq_db.arq_create(admin_context, 'five', 'p1', max_project_arqs=7)
    with pytest.raises(exception.ProjectLimitExceeded) as caught:
        arq_db.arq_create(admin_context, 'two', 'p1', max_project_arqs=8)
    assert caught.value.code == 403
    assert len(arq_db.arq_list(admin_context, 'p1')) == 7
    # Other projects' ARQs do not count.
    assert len(arq_db.arq_create(admin_context, 'two', 'p2',
                                 max_project_arqs=2)) == 2


def test_bind_without_preparation_is_one_transaction(host, admin_context,
                                                     database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, host)
    assert outcome.jobs == []
    bound = [arq_db.arq_get(admin_context, a['uuid'], None) for a in arqs]
    assert [b['state'] for b in bound] == [states.BOUND] * 2
    assert {b['bind_owner'] for b in bound} == {'cond1'}
    assert bound[0]['attach_handle_uuid'] != bound[1]['attach_handle_uuid']
    assert bound[0]['attach_handle_type'] == 'PCI'
    assert bound[0]['attach_handle_info']['bus'] == '10'
    assert _handles_in_use(database) == 2
    assert _events(database) == [(a['uuid'], 'completed') for a in arqs]
    # The events come back leased to the conductor, ready to send.
    assert [(e['arq_uuid'], e['claimed_by']) for e in outcome.events] == [
        (a['uuid'], 'cond1') for a in arqs]
    assert all(e['claimed_until'] > datetime.datetime.utcnow()
               for e in outcome.events)


def test_events_without_a_lease_are_due_for_anyone(host, admin_context,
                                                   database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = binding_db.bind(admin_context, _bindings(arqs, host), None,
                              'cond1')
    assert [e['claimed_by'] for e in outcome.events] == [None, None]


def test_rebinding_the_same_way_is_a_no_op(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, arqs, host)
    outcome = _bind(admin_context, arqs, host)
    assert (outcome.jobs, outcome.events) == ([], [])
    assert len(_events(database)) == 2
    with pytest.raises(exception.ARQBadState) as error:
        _bind(admin_context, arqs, host, instance=OTHER_INSTANCE)
    assert error.value.code == 409


def test_batch_is_all_or_nothing(host, admin_context, database):
    first = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, first[:1], host)
    second = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQBadState):
        binding_db.bind(admin_context,
                        dict(_bindings(second, host),
                             **_bindings(first[:1], host,
                                         instance=OTHER_INSTANCE)),
                        None, 'cond1')
    assert _states(admin_context, second) == [states.INITIAL] * 2
    assert _handles_in_use(database) == 1
    assert len(_events(database)) == 1


def _unchanged(context, database, arqs) -> None:
    """Nothing a refused bind could have written is there."""
    assert _states(context, arqs) == [states.INITIAL] * len(arqs)
    assert _handles_in_use(database) == 0
    assert _events(database) == []
    stored = arq_db.arq_get(context, arqs[0]['uuid'], None)
    assert (stored['hostname'], stored['instance_uuid'],
            stored['bind_owner']) == (None, None, None)


def test_unknown_provider_is_refused(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    unknown = 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee'
    with pytest.raises(exception.DeployableNotFound) as error:
        _bind(admin_context, arqs, unknown)
    assert error.value.code == 404
    assert str(error.value) == (
        'Deployable not found with resource provider uuid=%s' % unknown)
    _unchanged(admin_context, database, arqs)


def test_a_provider_of_another_host_is_refused(host, admin_context,
                                               database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.DeployableNotOnHost) as error:
        _bind(admin_context, arqs, host, host='host9')
    assert error.value.code == 400
    assert 'is a deployable of host host1, not of host9' in str(error.value)
    _unchanged(admin_context, database, arqs)


def _profile(context, name, group):
    profiles_db.device_profile_create(context, {'name': name,
                                                'groups': [group]})
    return name


@pytest.mark.parametrize('group, reason', [
    ({'resources:PGPU': '1'}, 'it offers resource class FPGA, not PGPU'),
    ({'resources:FPGA': '1', 'trait:CUSTOM_OTHER': 'required'},
     'it lacks required trait CUSTOM_OTHER'),
    ({'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'forbidden'},
     'it has forbidden trait CUSTOM_FAKE_DEVICE'),
    ({'resources:FPGA': '1', 'trait:OWNER_CYBORG': 'forbidden'},
     'it has forbidden trait OWNER_CYBORG'),
    ({'resources:PGPU': '1', 'trait:CUSTOM_OTHER': 'required'},
     'it offers resource class FPGA, not PGPU; it lacks required trait '
     'CUSTOM_OTHER'),
])
def test_a_provider_that_does_not_satisfy_the_group_is_refused(
        host, admin_context, database, group, reason):
    name = _profile(admin_context, 'mismatch', group)
    arqs = arq_db.arq_create(admin_context, name, 'p1')
    with pytest.raises(exception.DeployableMismatch) as error:
        _bind(admin_context, arqs, host)
    assert error.value.code == 400
    assert str(error.value) == (
        'Resource provider %s does not satisfy group 0 of the device '
        'profile of ARQ %s: %s' % (host, arqs[0]['uuid'], reason))
    _unchanged(admin_context, database, arqs)


def test_a_group_satisfied_by_the_provider_binds(host, admin_context,
                                                 database):
    """Required traits it has, forbidden ones it lacks, OWNER_CYBORG
    (which Placement has on every provider of ours) required."""
    name = _profile(admin_context, 'fits', {
        'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required',
        'trait:OWNER_CYBORG': 'required',
        'trait:CUSTOM_OTHER': 'forbidden'})
    arqs = arq_db.arq_create(admin_context, name, 'p1')
    _bind(admin_context, arqs, host)
    assert _states(admin_context, arqs) == [states.BOUND]


def test_one_arq_that_does_not_fit_refuses_the_whole_batch(
        host, admin_context, database):
    fits = arq_db.arq_create(admin_context, 'two', 'p1')
    name = _profile(admin_context, 'pgpu', {'resources:PGPU': '1'})
    misfit = arq_db.arq_create(admin_context, name, 'p1')
    with pytest.raises(exception.DeployableMismatch) as error:
        _bind(admin_context, fits + misfit, host)
    assert misfit[0]['uuid'] in str(error.value)
    _unchanged(admin_context, database, fits + misfit)


def test_a_mismatch_is_told_before_too_few_handles(host, admin_context,
                                                   database):
    """A provider that cannot satisfy the group is refused for that,
    not for having no free handle left."""
    _bind(admin_context, arq_db.arq_create(admin_context, 'five', 'p1')[:4],
          host)
    name = _profile(admin_context, 'pgpu', {'resources:PGPU': '1'})
    arqs = arq_db.arq_create(admin_context, name, 'p1')
    with pytest.raises(exception.DeployableMismatch):
        _bind(admin_context, arqs, host, instance=OTHER_INSTANCE)
    assert _handles_in_use(database) == 4


def test_the_compute_node_name_is_the_host_too(profiles, admin_context,
                                               conf, database):
    """Nova binds to its node name, which may differ from the agent's
    host: the compute node provider the agent reports under."""
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(admin_context, 'host3', 'node3.example', wire,
                           device_tree.tree_digest(wire), [])
    rp = hardware.deployable_list(admin_context)[0]['rp_uuid']
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, arqs, rp, host='node3.example')
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    with pytest.raises(exception.DeployableNotOnHost):
        _bind(admin_context, arq_db.arq_create(admin_context, 'two', 'p1'),
              rp, host='node4.example')


def test_too_few_free_handles_is_refused(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'five', 'p1')
    with pytest.raises(exception.NoFreeAttachHandles) as error:
        _bind(admin_context, arqs, host)
    assert error.value.code == 409
    assert str(error.value) == (
        'Resource provider %s has 4 free attach handle(s); 5 ARQ(s) asked '
        'for one' % host)
    _unchanged(admin_context, database, arqs)
    # Four fit; then none is left for a fifth.
    _bind(admin_context, arqs[:4], host)
    assert _handles_in_use(database) == 4
    with pytest.raises(exception.NoFreeAttachHandles) as error:
        _bind(admin_context, arqs[4:], host, instance=OTHER_INSTANCE)
    assert 'has 0 free attach handle(s); 1 ARQ(s)' in str(error.value)
    assert _states(admin_context, arqs[4:]) == [states.INITIAL]


def test_one_refused_provider_refuses_the_whole_request(
        host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    bindings = _bindings(arqs[:1], host)
    bindings.update(_bindings(arqs[1:], 'aaaaaaaa-bbbb-4ccc-8ddd-'
                                        'eeeeeeeeeeee'))
    with pytest.raises(exception.DeployableNotFound):
        binding_db.bind(admin_context, bindings, None, 'cond1', LEASE)
    _unchanged(admin_context, database, arqs)


def test_a_pci_bind_writes_each_arq_once(host, admin_context, database):
    """Lock the ARQs, claim handles of the deployable on that host (SELECT
    and UPDATE), one UPDATE per ARQ to Bound, and one INSERT of the
    events: BindStarted is never written on its own, and the checks cost
    no statement while they pass."""
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    statements = []

    def record(conn, cursor, statement, *args):
        verb = statement.split()[0].upper()
        if verb in ('SELECT', 'INSERT', 'UPDATE', 'DELETE'):
            statements.append(verb)

    sa.event.listen(database, 'before_cursor_execute', record)
    try:
        _bind(admin_context, arqs, host)
    finally:
        sa.event.remove(database, 'before_cursor_execute', record)
    assert statements == ['SELECT', 'SELECT', 'UPDATE', 'UPDATE', 'UPDATE',
                          'INSERT']
    assert _states(admin_context, arqs) == [states.BOUND] * 2


class _HandlesTakenFirst:
    """A writer that takes every free handle between a claim's SELECT and
    its UPDATE of the handles it chose (a race SQLite, which has no row
    locks, can lose), the first ``times`` times: the claim's UPDATE then
    finds them taken, for real, in the database."""

    def __init__(self, engine, times):
        self.engine = engine
        self.times = times
        self.claims = 0

    def _take(self, conn, cursor, statement, *args):
        if (statement.startswith('UPDATE attach_handles ')
                and ' SET in_use' in statement):
            self.claims += 1
            if self.claims <= self.times:
                cursor.execute('UPDATE attach_handles SET in_use = true '
                               'WHERE in_use = false')

    def __enter__(self):
        sa.event.listen(self.engine, 'before_cursor_execute', self._take)
        return self

    def __exit__(self, *exc):
        sa.event.remove(self.engine, 'before_cursor_execute', self._take)


def test_a_lost_claim_race_starts_the_transaction_again(
        host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with _HandlesTakenFirst(database, 1) as race:
        _bind(admin_context, arqs, host)
    assert race.claims == 2
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    # The first transaction, and what the racing writer did in it, is
    # undone: only the two handles of the second are in use.
    assert _handles_in_use(database) == 2
    assert len(_events(database)) == 2


def test_handles_only_locked_by_another_bind_start_again(host,
                                                         admin_context):
    """The claim skipped free handles (SKIP LOCKED: another bind holds
    them and may give them back): the transaction is started again, and
    ends in the 409 if it never gets them; really too few is a 409."""
    with db_api.main_context_manager.writer.using(admin_context) as session:
        connection = session.connection()
        again = binding_db._too_few(connection, host, 'host1', 2, 0)
        assert isinstance(again, db_api.RetryRequest)
        assert isinstance(again.inner_exc, exception.NoFreeAttachHandles)
        refused = binding_db._too_few(connection, host, 'host1', 5, 3)
        assert isinstance(refused, exception.NoFreeAttachHandles)
        assert 'has 3 free attach handle(s); 5 ARQ(s)' in str(refused)


def test_a_race_lost_every_time_ends_in_its_conflict(host, admin_context,
                                                     database):
    """A transaction that keeps losing the claim race ends in the 409 it
    asked for, never in a 500."""
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with _HandlesTakenFirst(database, 100) as race:
        with pytest.raises(exception.NoFreeAttachHandles) as error:
            _bind(admin_context, arqs, host)
    assert race.claims == db_api.MAX_RETRIES + 1
    assert error.value.code == 409
    _unchanged(admin_context, database, arqs)


def test_unbind_releases_and_allows_rebind(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, arqs, host)
    arq_db.arq_unbind(admin_context, [a['uuid'] for a in arqs], None)
    assert _states(admin_context, arqs) == [states.UNBOUND] * 2
    assert _handles_in_use(database) == 0
    unbound = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert unbound['instance_uuid'] is None
    assert unbound['project_id'] == 'p1'
    _bind(admin_context, arqs, host)
    assert _states(admin_context, arqs) == [states.BOUND] * 2


def test_delete_releases_handles(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'five', 'p1')
    _bind(admin_context, arqs[:2], host)
    _bind(admin_context, arqs[2:4], host, instance=OTHER_INSTANCE)
    assert arq_db.arq_delete(admin_context, None, INSTANCE, None) == []
    assert [a['uuid'] for a in arq_db.arq_list(admin_context, None)] == [
        a['uuid'] for a in arqs[2:]]
    assert _handles_in_use(database) == 2
    assert arq_db.arq_delete(admin_context, None, INSTANCE, None) == []
    arq_db.arq_delete(admin_context, [a['uuid'] for a in arqs[2:]], None,
                      None)
    assert arq_db.arq_list(admin_context, None) == []
    assert _handles_in_use(database) == 0


def test_delete_by_uuid_needs_every_arq(host, admin_context):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_delete(
            admin_context,
            [arqs[0]['uuid'], 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee'],
            None, None)
    assert _states(admin_context, arqs) == [states.INITIAL] * 2


def test_other_projects_are_invisible(host, admin_context):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_get(admin_context, arqs[0]['uuid'], 'p2')
    with pytest.raises(exception.ARQNotFound):
        binding_db.bind(admin_context, _bindings(arqs, host), 'p2', 'cond1')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_unbind(admin_context, [arqs[0]['uuid']], 'p2')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_delete(admin_context, [arqs[0]['uuid']], None, 'p2')
    assert arq_db.arq_delete(admin_context, None, INSTANCE, 'p2') == []
    assert arq_db.arq_list(admin_context, 'p2') == []
    assert _states(admin_context, arqs) == [states.INITIAL] * 2


# Handles the agent prepares: a job per ARQ ------------------------------

def test_handles_to_prepare_are_claimed_then_prepared_by_a_job(
        mdev_host, admin_context, binder, recorder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    assert outcome.jobs == [a['uuid'] for a in arqs]
    assert outcome.events == []
    assert _states(admin_context, arqs) == [states.BIND_STARTED] * 2
    assert _handles_in_use(database) == 2
    _run_jobs(admin_context, binder, outcome)
    assert [c.attach_type for c in recorder.prepared] == ['MDEV', 'MDEV']
    assert {c.device_host for c in recorder.prepared} == {'host2'}
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    assert [(e['arq_uuid'], e['status'], e['claimed_by'])
            for e in recorder.delivered] == [
        (a['uuid'], 'completed', 'cond1') for a in arqs]


def test_binder_binds_delivers_and_submits(mdev_host, host, admin_context,
                                           binder, recorder, database):
    pci = arq_db.arq_create(admin_context, 'two', 'p1')
    mdev = arq_db.arq_create(admin_context, 'two', 'p1')
    binder.bind(admin_context, _bindings(pci, host), None)
    assert [e['arq_uuid'] for e in recorder.delivered] == [
        a['uuid'] for a in pci]
    binder.bind(admin_context, _bindings(mdev, mdev_host, host='host2',
                                         instance=OTHER_INSTANCE), None)
    binder.stop()  # waits for the jobs
    assert _states(admin_context, pci + mdev) == [states.BOUND] * 4
    assert len(recorder.prepared) == 2
    assert len(recorder.delivered) == 4


def test_unbind_during_a_job_leaks_nothing(mdev_host, admin_context,
                                           binder, recorder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    binder.unbind(admin_context, outcome.jobs, None)
    _run_jobs(admin_context, binder, outcome)
    binder.stop(cancel=False)  # waits for the releases
    assert _states(admin_context, arqs) == [states.UNBOUND] * 2
    assert _handles_in_use(database) == 0
    assert _events(database) == []
    assert recorder.prepared == []
    assert len(recorder.released) == 2


def test_delete_during_a_job(mdev_host, admin_context, binder, recorder,
                             database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    binder.delete(admin_context, None, INSTANCE, None)
    _run_jobs(admin_context, binder, outcome)
    binder.stop(cancel=False)
    assert arq_db.arq_list(admin_context, None) == []
    assert _handles_in_use(database) == 0
    assert _events(database) == []


# Prepared handles are released by their agent before they are free ------

def test_prepared_handles_stay_in_use_until_released(
        mdev_host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    for uuid in outcome.jobs:
        binding_db.finish(admin_context, uuid)
    held = arq_db.arq_unbind(admin_context, [arqs[0]['uuid']], None)
    assert [(h.attach_type, h.host, h.driver, h.preparation)
            for h in held] == [('MDEV', 'host2', 'fake_driver', 'mdev')]
    assert held[0].attach_info['asked_type'] == 'fake-mdev-1'
    assert _handles_in_use(database) == 2  # one bound, one to release
    held += arq_db.arq_delete(admin_context, [arqs[1]['uuid']], None, None)
    assert len({h.uuid for h in held}) == 2
    assert _handles_in_use(database) == 2
    arq_db.free_prepared(admin_context, [h.id for h in held])
    assert _handles_in_use(database) == 0


def test_declared_preparation_prepares_pci_handles(
        vgpu_host, admin_context, binder, recorder, database):
    """PCI handles of a deployable declaring a preparation are prepared
    by a job at bind, and released by their agent at unbind."""
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, vgpu_host, host='host3')
    assert outcome.jobs == [a['uuid'] for a in arqs]
    _run_jobs(admin_context, binder, outcome)
    assert [(c.attach_type, c.preparation, c.device_host)
            for c in recorder.prepared] == [('PCI', 'vgpu_type', 'host3')] * 2
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    held = arq_db.arq_unbind(admin_context, [a['uuid'] for a in arqs], None)
    assert sorted(h.uuid for h in held) == sorted(
        c.handle_uuid for c in recorder.prepared)
    assert {(h.attach_type, h.host, h.preparation) for h in held} == {
        ('PCI', 'host3', 'vgpu_type')}
    assert _handles_in_use(database) == 2  # until their agent released them
    binder.release(admin_context, held)
    assert len(recorder.released) == 2
    assert _handles_in_use(database) == 0


def test_mdev_handles_declared_unprepared_bind_at_once(
        profiles, admin_context, conf, database):
    rp = _report(admin_context, conf, 'host2', 'MDEV', 'none')
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, rp, host='host2')
    assert outcome.jobs == []
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    assert arq_db.arq_unbind(admin_context, [a['uuid'] for a in arqs],
                             None) == []
    assert _handles_in_use(database) == 0


def test_agent_handles_ask_the_agent_per_declared_preparation():
    """The conductor asks the agent to prepare a claim whose deployable
    declares a preparation, whatever its handle type, and only then."""
    with mock.patch.object(conductor_service.agent_rpcapi,
                           'AgentAPI') as api:
        handles = conductor_service.AgentHandles(object(), 7)
    agent = api.return_value
    context = object()
    for preparation in ('vgpu_type', 'none'):
        handles.prepare(context, binding_db.Claim(
            'a', 'h', 'PCI', {'bus': '01'}, 'host3', 'fake_driver',
            preparation))
    # The agent is told the preparation (agent RPC API 1.3).
    agent.prepare_attach_handle.assert_called_once_with(
        context, 'host3', 'fake_driver', 'PCI', {'bus': '01'}, 'h',
        'vgpu_type')
    handles.release(context, arq_db.PreparedHandle(
        1, 'h', 'PCI', {'bus': '01'}, 'host3', 'fake_driver', 'vgpu_type'))
    agent.release_attach_handle.assert_called_once_with(
        context, 'host3', 'fake_driver', 'PCI', {'bus': '01'}, 'h',
        'vgpu_type')


def test_pci_handles_are_freed_at_once(host, admin_context, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, arqs, host)
    assert arq_db.arq_unbind(admin_context, [arqs[0]['uuid']], None) == []
    assert arq_db.arq_delete(admin_context, None, INSTANCE, None) == []
    assert _handles_in_use(database) == 0


def test_binder_releases_after_unbind_and_delete(mdev_host, admin_context,
                                                 binder, recorder,
                                                 database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _run_jobs(admin_context, binder,
              _bind(admin_context, arqs, mdev_host, host='host2'))
    binder.unbind(admin_context, [arqs[0]['uuid']], None)
    binder.delete(admin_context, [arqs[1]['uuid']], None, None)
    binder.stop(cancel=False)
    assert sorted(h.uuid for h in recorder.released) == sorted(
        c.handle_uuid for c in recorder.prepared)
    assert _handles_in_use(database) == 0


def test_failed_release_is_retried_by_the_sweeper(mdev_host, admin_context,
                                                  database):
    refusing = Recorder(refuse_release='agent down')
    job = binding.Binder('cond1', 1, 60, refusing, refusing.deliver)
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _run_jobs(admin_context, job,
              _bind(admin_context, arqs, mdev_host, host='host2'))
    job.release(admin_context,
                arq_db.arq_delete(admin_context, None, INSTANCE, None))
    assert _handles_in_use(database) == 2  # not released: not free
    job.sweep(admin_context)  # too recent to try again
    assert _handles_in_use(database) == 2
    old = datetime.datetime(2020, 1, 1)
    with database.begin() as connection:
        connection.execute(sa.update(models.AttachHandle.__table__).values(
            updated_at=old))
    refusing.refuse_release = None
    job.sweep(admin_context)
    job.stop(cancel=False)
    assert len(refusing.released) == 2
    assert _handles_in_use(database) == 0


def test_a_handle_bound_again_is_not_freed(mdev_host, admin_context,
                                           database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs[:1], mdev_host, host='host2')
    handle_id = arq_db.arq_get(admin_context, arqs[0]['uuid'],
                               None)['attach_handle_id']
    arq_db.free_prepared(admin_context, [handle_id])  # a stale release
    assert outcome.jobs and _handles_in_use(database) == 1


def _fail_preparing(context, arqs, rp) -> Recorder:
    """Bind ``arqs`` on host2 and run their jobs with an agent that cannot
    create the mdevs (bind timeout 60 s); the agent's recorder."""
    recorder = Recorder(refuse='mdev create failed')
    job = binding.Binder('cond1', 1, 60, recorder, recorder.deliver)
    _run_jobs(context, job, _bind(context, arqs, rp, host='host2'))
    job.stop()
    return recorder


def _repeats(engine):
    with engine.connect() as connection:
        return [(r.arq_uuid, r.status, r.repeat_until) for r in
                connection.execute(sa.select(models.NovaEvent.__table__)
                                   .order_by(models.NovaEvent.id))]


def test_failed_preparation_is_reported_until_nova_acts(
        mdev_host, admin_context, database):
    """The ARQ is BindFailing (not resolved for Nova), its handle free,
    and its failed event repeated until the bind timeout."""
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    recorder = _fail_preparing(admin_context, arqs[:1], mdev_host)
    failed = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert failed['state'] == states.BIND_FAILING
    assert not states.resolved(failed['state'])
    assert 'mdev create failed' in failed['bind_error']
    assert _handles_in_use(database) == 0
    assert len(recorder.released) == 1  # whatever was half prepared
    assert [e['status'] for e in recorder.delivered] == ['failed']
    [(arq, status, repeat_until)] = _repeats(database)
    assert (arq, status) == (arqs[0]['uuid'], 'failed')
    assert repeat_until == failed['bind_started_at'] + datetime.timedelta(
        seconds=60)


def test_a_failure_reason_carries_no_remote_traceback():
    import oslo_messaging as messaging
    remote = messaging.RemoteError(
        'PrepareFailed', 'mdev type nvidia-35 has no instances left',
        ['Traceback (most recent call last):\n', '  File "x.py"\n'])
    assert binding.failure_reason(remote) == (
        'PrepareFailed: mdev type nvidia-35 has no instances left')
    assert binding.failure_reason(RuntimeError('one\ntwo')) == 'one'
    assert binding.failure_reason(TimeoutError()) == 'TimeoutError'
    long = binding.failure_reason(RuntimeError('x' * 2000))
    assert len(long) == 500 and long.endswith('...')


def test_nova_acting_on_a_failure_stops_its_repeats(mdev_host,
                                                    admin_context,
                                                    database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    for arq in arqs:
        _fail_preparing(admin_context, [arq], mdev_host)
    assert _states(admin_context, arqs) == [states.BIND_FAILING] * 2
    arq_db.arq_unbind(admin_context, [arqs[0]['uuid']], None)
    assert [r[0] for r in _repeats(database)] == [arqs[1]['uuid']]
    arq_db.arq_delete(admin_context, None, INSTANCE, None)
    assert _repeats(database) == []
    assert _states(admin_context, arqs[:1]) == [states.UNBOUND]


def test_a_failure_after_the_bind_timeout_is_final(mdev_host, admin_context,
                                                   database):
    recorder = Recorder(refuse='mdev create failed')
    job = binding.Binder('cond1', 1, 60, recorder, recorder.deliver)
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs[:1], mdev_host, host='host2')
    old = datetime.datetime(2020, 1, 1)
    with database.begin() as connection:
        connection.execute(sa.update(models.ExtendedAcceleratorRequest
                                     .__table__).values(bind_started_at=old))
    _run_jobs(admin_context, job, outcome)
    job.stop()
    assert _states(admin_context, arqs[:1]) == [states.BIND_FAILED]
    assert [(r[1], r[2]) for r in _repeats(database)] == [('failed', None)]


def test_sweeper_ends_failures_nova_did_not_act_on(mdev_host, admin_context,
                                                   binder, recorder,
                                                   database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _fail_preparing(admin_context, arqs[:1], mdev_host)
    binder.sweep(admin_context)  # not yet timed out
    assert _states(admin_context, arqs[:1]) == [states.BIND_FAILING]
    old = datetime.datetime(2020, 1, 1)
    with database.begin() as connection:
        connection.execute(sa.update(models.ExtendedAcceleratorRequest
                                     .__table__).values(bind_started_at=old))
    binder.sweep(admin_context)
    ended = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert ended['state'] == states.BIND_FAILED
    assert 'mdev create failed' in ended['bind_error']
    assert recorder.delivered == []  # no event beyond the repeated one


def test_sweeper_fails_stale_jobs(mdev_host, admin_context, binder,
                                  recorder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    binding_db.bind(admin_context,
                    _bindings(arqs[:1], mdev_host, host='host2'),
                    None, 'dead-conductor')
    old = datetime.datetime(2020, 1, 1)
    with database.begin() as connection:
        connection.execute(sa.update(models.ExtendedAcceleratorRequest
                                     .__table__).values(
            bind_started_at=old, updated_at=old))
    binder.sweep(admin_context)
    swept = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert swept['state'] == states.BIND_FAILED
    assert 'did not finish within 60 seconds' in swept['bind_error']
    assert _handles_in_use(database) == 0
    assert [e['status'] for e in recorder.delivered] == ['failed']
    assert _states(admin_context, arqs[1:]) == [states.INITIAL]


def _created_at(engine, arq, at):
    with engine.begin() as connection:
        connection.execute(sa.update(models.ExtendedAcceleratorRequest
                                     .__table__)
                           .where(models.ExtendedAcceleratorRequest.uuid
                                  == arq['uuid']).values(created_at=at))


def test_sweeper_deletes_abandoned_arqs_only_with_a_timeout(
        host, admin_context, recorder, database, caplog):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _created_at(database, arqs[0],
                timeutils.utcnow() - datetime.timedelta(seconds=3700))
    keeping = binding.Binder('cond1', 1, 60, recorder, recorder.deliver,
                             LEASE)
    keeping.sweep(admin_context)
    keeping.stop()
    assert _states(admin_context, arqs) == [states.INITIAL] * 2
    caplog.set_level('WARNING', logger='cyborg.conductor.binding')
    deleting = binding.Binder('cond1', 1, 60, recorder, recorder.deliver,
                              LEASE, abandoned_timeout=3600)
    deleting.sweep(admin_context)
    deleting.stop()
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert _states(admin_context, arqs[1:]) == [states.INITIAL]
    assert [r.getMessage() for r in caplog.records
            if r.levelname == 'WARNING'] == [
        'Deleted 1 ARQs never bound within 3600s of their creation (the '
        'answer to their creation was lost, or their creator gave up): %s'
        % arqs[0]['uuid']]
    # Nova never heard of it: no event.
    assert recorder.delivered == []


def test_restarted_conductor_resumes_its_jobs(mdev_host, admin_context,
                                              binder, recorder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, arqs, mdev_host, host='host2')  # then "killed"
    binder.resume(admin_context)
    binder.stop()
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    assert _handles_in_use(database) == 2
    assert len(_events(database)) == 2
    assert len(recorder.prepared) == 2


def test_a_job_without_a_claimed_handle_fails(host, admin_context, binder,
                                              recorder):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with db_api.main_context_manager.writer.using(admin_context) as session:
        rows = arq_db.lock(session, [arqs[0]['uuid']], None)
        for row, values in binding_db.binds_to_start(
                rows, _bindings(arqs[:1], host), 'cond1',
                timeutils.utcnow()):
            arq_db.swap(session, row, states.BIND_STARTED, values)
    binder.run(admin_context, arqs[0]['uuid'])
    failed = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert failed['state'] == states.BIND_FAILING
    assert 'no claimed attach handle' in failed['bind_error']


def _info(caplog, logger='cyborg.conductor.binding') -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == logger and r.levelname == 'INFO']


def test_binder_logs_binds_unbinds_and_deletes(mdev_host, host,
                                               admin_context, binder,
                                               recorder, database, caplog):
    caplog.set_level('INFO', logger='cyborg.conductor.binding')
    pci = arq_db.arq_create(admin_context, 'two', 'p1')
    mdev = arq_db.arq_create(admin_context, 'five', 'p1')[:1]
    binder.bind(admin_context, _bindings(pci, host), None)
    assert _info(caplog) == [
        'Bound ARQ %s of instance %s to provider %s on host1'
        % (arq['uuid'], INSTANCE, host) for arq in pci]
    caplog.clear()
    outcome = _bind(admin_context, mdev, mdev_host, host='host2',
                    instance=OTHER_INSTANCE)
    _run_jobs(admin_context, binder, outcome)
    [claim] = recorder.prepared
    assert _info(caplog) == ['Bound ARQ %s: attach handle %s prepared on '
                             'host2' % (mdev[0]['uuid'], claim.handle_uuid)]
    caplog.clear()
    binder.unbind(admin_context, [pci[0]['uuid']], None)
    binder.delete(admin_context, [pci[1]['uuid']], None, None)
    binder.delete(admin_context, None, OTHER_INSTANCE, None)
    binder.stop(cancel=False)
    assert _info(caplog) == [
        'Unbound ARQs %s (0 prepared attach handles to release)'
        % pci[0]['uuid'],
        'Deleted ARQs %s (0 prepared attach handles to release)'
        % pci[1]['uuid'],
        'Deleted the ARQs of instance %s (1 prepared attach handles to '
        'release)' % OTHER_INSTANCE]


def test_binder_logs_a_bind_left_to_the_agent(mdev_host, admin_context,
                                              binder, database, caplog):
    caplog.set_level('INFO', logger='cyborg.conductor.binding')
    [arq] = arq_db.arq_create(admin_context, 'five', 'p1')[:1]
    with mock.patch.object(binder, 'submit'):
        binder.bind(admin_context, _bindings([arq], mdev_host, host='host2'),
                    None)
    assert _info(caplog) == [
        'Binding ARQ %s of instance %s to provider %s on host2: its agent '
        'prepares the attach handle' % (arq['uuid'], INSTANCE, mdev_host)]


def _failing_then_real(monkeypatch, name, failures):
    """``binding_db.<name>`` raising DBConnectionError ``failures``
    times, then the real one."""
    from oslo_db import exception as db_exc
    real = getattr(binding_db, name)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) <= failures:
            raise db_exc.DBConnectionError('database gone')
        return real(*args, **kwargs)
    monkeypatch.setattr(binding_db, name, flaky)
    monkeypatch.setattr(binding, 'DATABASE_RETRY_INTERVAL', 0.01)
    return calls


@pytest.mark.parametrize('step', ['job_claim', 'finish'])
def test_a_job_waits_for_the_database_and_binds(
        mdev_host, admin_context, binder, recorder, database, monkeypatch,
        step):
    """A database outage during a bind job: the step runs again once
    the database answers, the ARQ is Bound and its event delivered (it
    was left to the sweeper, for the bind timeout)."""
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    calls = _failing_then_real(monkeypatch, step, 2)
    for uuid in outcome.jobs:
        assert binder.run(admin_context, uuid) == 'bound'
    assert len(calls) == 2 + len(outcome.jobs)
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    assert len(recorder.delivered) == 2


def test_a_job_gives_up_on_the_database_at_the_bind_timeout(
        mdev_host, admin_context, binder, database, monkeypatch):
    from oslo_db import exception as db_exc
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    outcome = _bind(admin_context, arqs, mdev_host, host='host2')
    calls = _failing_then_real(monkeypatch, 'job_claim', 1000)
    with pytest.raises(db_exc.DBConnectionError):
        # Submitted 59.95 s ago: the bind timeout (60 s) is near.
        binder.run(admin_context, outcome.jobs[0],
                   time.monotonic() - 59.95)
    assert 1 <= len(calls) <= 4
    assert _states(admin_context, arqs) == [states.BIND_STARTED] * 2
