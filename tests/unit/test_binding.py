"""ARQ creation, binding jobs, unbind and delete on SQLite."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import arq_states as states
from cyborg.common import exception
from cyborg.conductor import binding
from cyborg.conductor import inventory
from cyborg.db import api as db_api
from cyborg.db import arqs as arq_db
from cyborg.db import hardware
from cyborg.db import models

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'


@pytest.fixture
def host(database, admin_context, conf):
    """One fake device with 4 handles on host1; its deployable rp uuid."""
    wire = base.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           base.tree_digest(wire), [])
    db_api.device_profile_create(admin_context, {
        'name': 'two', 'groups': [{'resources:FPGA': '1'},
                                  {'resources:FPGA': '1'}]})
    db_api.device_profile_create(admin_context, {
        'name': 'five', 'groups': [{'resources:FPGA': '5'}]})
    return hardware.deployable_list(admin_context)[0]['rp_uuid']


@pytest.fixture
def binder():
    resolved = []
    prepared = []
    job = binding.Binder('cond1', 2, 60, lambda ctx, c: prepared.append(c),
                         lambda: resolved.append(True))
    job.prepared = prepared
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


def _bind(context, binder, arqs, rp, **kwargs):
    jobs = arq_db.arq_bind_start(context, _bindings(arqs, rp, **kwargs),
                                 None, binder.owner)
    for uuid in jobs:
        binder.run(context, uuid)
    return jobs


def test_create_one_arq_per_accelerator(host, admin_context):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    assert [a['device_profile_group_id'] for a in arqs] == [0, 1]
    assert {a['state'] for a in arqs} == {states.INITIAL}
    assert arqs[0]['project_id'] == 'p1'
    with pytest.raises(exception.DeviceProfileNotFound):
        arq_db.arq_create(admin_context, 'nope', 'p1')


def test_bind_claims_handles_and_queues_events(host, admin_context, binder,
                                               database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, binder, arqs, host)
    bound = [arq_db.arq_get(admin_context, a['uuid'], None) for a in arqs]
    assert [b['state'] for b in bound] == [states.BOUND] * 2
    assert bound[0]['attach_handle_uuid'] != bound[1]['attach_handle_uuid']
    assert bound[0]['attach_handle_info']['bus'] == '10'
    assert _handles_in_use(database) == 2
    assert _events(database) == [(a['uuid'], 'completed') for a in arqs]


def test_rebinding_the_same_way_is_a_no_op(host, admin_context, binder,
                                           database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, binder, arqs, host)
    assert _bind(admin_context, binder, arqs, host) == []
    assert len(_events(database)) == 2
    with pytest.raises(exception.ARQBadState) as error:
        _bind(admin_context, binder, arqs, host,
              instance='11111111-2222-4333-8444-555555555555')
    assert error.value.code == 409


def test_batch_is_all_or_nothing(host, admin_context, binder):
    first = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, binder, first[:1], host)
    second = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQBadState):
        arq_db.arq_bind_start(
            admin_context,
            dict(_bindings(second, host),
                 **_bindings(first[:1], host, instance=second[0]['uuid'])),
            None, 'cond1')
    assert _states(admin_context, second) == [states.INITIAL] * 2


def test_unknown_provider_fails_the_bind(host, admin_context, binder,
                                         database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, binder, arqs,
          'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee')
    failed = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert failed['state'] == states.BIND_FAILED
    assert 'No deployable has resource provider' in failed['bind_error']
    assert {e[1] for e in _events(database)} == {'failed'}


def test_never_more_binds_than_handles(host, admin_context, binder,
                                       database):
    arqs = arq_db.arq_create(admin_context, 'five', 'p1')
    _bind(admin_context, binder, arqs, host)
    assert sorted(_states(admin_context, arqs)) == sorted(
        [states.BOUND] * 4 + [states.BIND_FAILED])
    assert _handles_in_use(database) == 4
    failed = [a for a in arqs if arq_db.arq_get(
        admin_context, a['uuid'], None)['state'] == states.BIND_FAILED]
    assert 'No free attach handle' in arq_db.arq_get(
        admin_context, failed[0]['uuid'], None)['bind_error']


def test_unbind_releases_and_allows_rebind(host, admin_context, binder,
                                           database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, binder, arqs, host)
    arq_db.arq_unbind(admin_context, [a['uuid'] for a in arqs], None)
    assert _states(admin_context, arqs) == [states.UNBOUND] * 2
    assert _handles_in_use(database) == 0
    unbound = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert unbound['instance_uuid'] is None
    assert unbound['project_id'] == 'p1'
    _bind(admin_context, binder, arqs, host)
    assert _states(admin_context, arqs) == [states.BOUND] * 2


def test_unbind_during_binding_leaks_nothing(host, admin_context, binder,
                                             database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    jobs = arq_db.arq_bind_start(admin_context, _bindings(arqs, host), None,
                                 'cond1')
    binding.claim_handle(admin_context, jobs[0])
    arq_db.arq_unbind(admin_context, jobs, None)
    for uuid in jobs:
        binder.run(admin_context, uuid)
    assert _states(admin_context, arqs) == [states.UNBOUND] * 2
    assert _handles_in_use(database) == 0
    assert _events(database) == []


def test_delete_during_binding(host, admin_context, binder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    jobs = arq_db.arq_bind_start(admin_context, _bindings(arqs, host), None,
                                 'cond1')
    binding.claim_handle(admin_context, jobs[0])
    deleting = arq_db.arq_mark_deleting(admin_context, None, INSTANCE, None)
    arq_db.arq_purge(admin_context, deleting)
    for uuid in jobs:
        binder.run(admin_context, uuid)
    assert arq_db.arq_list(admin_context, None) == []
    assert _handles_in_use(database) == 0


def test_delete_by_uuid_needs_every_arq(host, admin_context):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_mark_deleting(
            admin_context,
            [arqs[0]['uuid'], 'aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee'],
            None, None)
    assert _states(admin_context, arqs) == [states.INITIAL] * 2


def test_other_projects_are_invisible(host, admin_context, binder):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_get(admin_context, arqs[0]['uuid'], 'p2')
    with pytest.raises(exception.ARQNotFound):
        arq_db.arq_bind_start(admin_context, _bindings(arqs, host), 'p2',
                              'cond1')
    assert arq_db.arq_list(admin_context, 'p2') == []


def test_sweeper_fails_stale_binds_and_purges_deleting(
        host, admin_context, binder, database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    arq_db.arq_bind_start(admin_context, _bindings(arqs[:1], host), None,
                          'dead-conductor')
    binding.claim_handle(admin_context, arqs[0]['uuid'])
    arq_db.arq_mark_deleting(admin_context, [arqs[1]['uuid']], None, None)
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
    assert [a['uuid'] for a in arq_db.arq_list(admin_context, None)] == [
        arqs[0]['uuid']]


def test_restarted_conductor_resumes_its_jobs(host, admin_context, binder,
                                              database):
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    arq_db.arq_bind_start(admin_context, _bindings(arqs, host), None,
                          'cond1')
    binding.claim_handle(admin_context, arqs[0]['uuid'])  # then "killed"
    binder.resume(admin_context)
    binder.stop()
    assert _states(admin_context, arqs) == [states.BOUND] * 2
    assert _handles_in_use(database) == 2
    assert len(_events(database)) == 2


def test_failed_preparation_fails_the_bind(host, admin_context, database):
    def refuse(context, claim):
        raise RuntimeError('mdev create failed')

    job = binding.Binder('cond1', 1, 60, refuse, lambda: None)
    arqs = arq_db.arq_create(admin_context, 'two', 'p1')
    _bind(admin_context, job, arqs[:1], host)
    job.stop()
    failed = arq_db.arq_get(admin_context, arqs[0]['uuid'], None)
    assert failed['state'] == states.BIND_FAILED
    assert 'mdev create failed' in failed['bind_error']
    assert _handles_in_use(database) == 0
