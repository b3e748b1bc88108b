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

"""What the conductor emits, on each database: every event type once
its transaction committed, each payload valid against its schema
(tests/unit/notifications/test_payloads.py checks the samples against
the same schemas); nothing built or read when notifications are off;
an operation never failed by its notification."""

import datetime
import json

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.common import exception
from cyborg.conductor import binding
from cyborg.conductor import inventory as conductor_inventory
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import notifications
from cyborg.conductor import programming
from cyborg.db import arqs as arq_db
from cyborg.db import hardware
from cyborg.domain import device_tree
from cyborg.notifications import notifier as notifier_mod
from tests.unit.conductor import test_binding
from tests.unit.conductor import test_programming
from tests.unit.conductor.test_binding import host  # noqa: F401
from tests.unit.conductor.test_binding import mdev_host  # noqa: F401
from tests.unit.conductor.test_binding import profiles  # noqa: F401
from tests.unit.conductor.test_programming import region  # noqa: F401
from tests.unit.notifications import test_payloads

INSTANCE = test_binding.INSTANCE


class Recorder(test_payloads.Recording):
    """What was sent, each payload checked against its event's schema
    once through JSON (as a transport carries it)."""

    def _record(self, priority, context, event_type, payload):
        payload = json.loads(json.dumps(payload))
        test_payloads.validator(event_type).validate(payload)
        self.sent.append((priority, event_type, payload))

    def info(self, context, event_type, payload):
        self._record('INFO', context, event_type, payload)

    def error(self, context, event_type, payload):
        self._record('ERROR', context, event_type, payload)

    def events(self):
        return [(event_type, payload['cyborg_object.data'])
                for _priority, event_type, payload in self.sent]

    def take(self):
        events = self.events()
        self.sent.clear()
        return events


class Broken:
    """A transport that fails every send."""

    def info(self, context, event_type, payload):
        raise OSError('broker unreachable')

    error = info


@pytest.fixture
def sent():
    return Recorder()


@pytest.fixture
def agents():
    return test_binding.Recorder()


def _conductor(notifier, agents):
    binder = binding.Binder('cond1', 2, 60, agents, agents.deliver,
                            test_binding.LEASE, notifier=notifier)
    return conductor_manager.ConductorManager('cond1', binder=binder,
                                              notifier=notifier), binder


@pytest.fixture
def conductor(sent, agents):
    manager, binder = _conductor(notifier_mod.Notifier(sent), agents)
    yield manager
    binder.stop()


def _bind(manager, context, arqs, rp, hostname='host1'):
    manager.arq_bind(context, test_binding._bindings(arqs, rp,
                                                     host=hostname))


def _summary(events):
    return [(event_type, data['uuid'], data['state'])
            for event_type, data in events]


def test_the_life_of_arqs_bound_at_once(conductor, sent, host,  # noqa: F811
                                        admin_context):
    arqs = conductor.arq_create(admin_context, 'two')
    a, b = (arq['uuid'] for arq in arqs)
    assert _summary(sent.take()) == [
        ('accelerator_request.create', a, 'Initial'),
        ('accelerator_request.create', b, 'Initial')]
    _bind(conductor, admin_context, arqs, host)
    events = sent.take()
    assert _summary(events) == [
        ('accelerator_request.bind.start', a, 'BindStarted'),
        ('accelerator_request.bind.start', b, 'BindStarted'),
        ('accelerator_request.bind.end', a, 'Bound'),
        ('accelerator_request.bind.end', b, 'Bound')]
    start, end = events[0][1], events[2][1]
    assert (start['instance_uuid'], start['hostname'],
            start['device_rp_uuid']) == (INSTANCE, 'host1', host)
    assert start['attach_handle_type'] is None
    assert end['attach_handle_type'] == 'PCI'
    assert end['attach_handle_info']['bus']
    assert end['device_profile_name'] == 'two'
    conductor.arq_unbind(admin_context, [a])
    # Unbinding again changes nothing, and tells nothing.
    conductor.arq_unbind(admin_context, [a])
    [(event_type, unbound)] = sent.take()
    assert (event_type, unbound['state']) == ('accelerator_request.unbind',
                                              'Unbound')
    # The binding it ended.
    assert (unbound['instance_uuid'], unbound['hostname']) == (INSTANCE,
                                                               'host1')
    conductor.arq_delete(admin_context, instance_uuid=INSTANCE)
    conductor.arq_delete(admin_context, uuids=[a])
    assert _summary(sent.take()) == [
        ('accelerator_request.delete', b, 'Deleting'),
        ('accelerator_request.delete', a, 'Deleting')]


def test_a_bind_job_ends_with_bind_end(conductor, sent, agents,
                                       mdev_host, admin_context):  # noqa
    arqs = conductor.arq_create(admin_context, 'two')
    sent.take()
    _bind(conductor, admin_context, arqs, mdev_host, hostname='host2')
    conductor._binder.stop(cancel=False)
    events = sent.take()
    kinds = [event_type for event_type, _data in events]
    # Each ARQ's start before its end.
    assert kinds[:2] == ['accelerator_request.bind.start'] * 2
    assert sorted(kinds[2:]) == ['accelerator_request.bind.end'] * 2
    assert {data['attach_handle_type'] for _e, data in events[2:]} == {
        'MDEV'}


def test_a_failed_bind_job_is_a_bind_error(sent, mdev_host,  # noqa: F811
                                           admin_context):
    agents = test_binding.Recorder(refuse='no mdev left')
    manager, binder = _conductor(notifier_mod.Notifier(sent), agents)
    [arq, _other] = manager.arq_create(admin_context, 'two')
    _bind(manager, admin_context, [arq], mdev_host, hostname='host2')
    binder.stop(cancel=False)
    [_create, _create2, start, (priority, event_type, payload)] = sent.sent
    assert start[1] == 'accelerator_request.bind.start'
    assert (priority, event_type) == ('ERROR',
                                      'accelerator_request.bind.error')
    data = payload['cyborg_object.data']
    assert data['state'] == 'BindFailing'
    assert 'no mdev left' in data['bind_error']
    assert data['uuid'] == arq['uuid']


def test_a_bind_refused_at_once_is_a_bind_error(conductor, sent,
                                                host,  # noqa: F811
                                                admin_context):
    arqs = conductor.arq_create(admin_context, 'five')
    sent.take()
    # Five ARQs for a device of four handles: 409, nothing changes.
    with pytest.raises(messaging.ExpectedException) as raised:
        _bind(conductor, admin_context, arqs, host)
    assert isinstance(raised.value.exc_info[1], exception.CyborgException)
    events = sent.take()
    assert [e for e, _data in events] == [
        'accelerator_request.bind.error'] * 5
    assert {data['state'] for _e, data in events} == {'Initial'}
    assert all(data['bind_error'] for _e, data in events)


def test_the_sweeper_fails_a_late_job_with_bind_error(
        sent, agents, mdev_host, admin_context):  # noqa: F811
    binder = binding.Binder('cond1', 1, 0, agents, agents.deliver,
                            notifier=notifier_mod.Notifier(sent))
    [arq, _other] = arq_db.arq_create(admin_context, 'two', 'p1')
    test_binding._bind(admin_context, [arq], mdev_host, host='host2')
    binder.sweep(admin_context)
    binder.stop()
    [(event_type, data)] = sent.take()
    assert event_type == 'accelerator_request.bind.error'
    assert (data['state'], data['uuid']) == ('BindFailed', arq['uuid'])


def _wire(conf, health='healthy'):
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    for device in wire:
        device['health'] = health
    return wire


def _report(context, wire, notifier, hostname='host9'):
    return conductor_inventory.apply(
        context, hostname, hostname, wire, device_tree.tree_digest(wire), [],
        notifier=notifier)


def test_inventory_changes_are_device_notifications(sent, database,
                                                    admin_context, conf):
    notifier = notifier_mod.Notifier(sent)
    wire = _wire(conf)
    _report(admin_context, wire, notifier)
    [(event_type, created)] = sent.take()
    assert event_type == 'device.create'
    assert (created['hostname'], created['address'], created['status'],
            created['health']) == ('host9', wire[0]['address'], 'enabled',
                                   'healthy')
    [device] = hardware.device_list(admin_context, {})
    assert created['uuid'] == device['uuid']
    # The same report again: no change, nothing sent.
    _report(admin_context, wire, notifier)
    assert sent.take() == []
    _report(admin_context, _wire(conf, 'unhealthy'), notifier)
    [(event_type, changed)] = sent.take()
    assert (event_type, changed['uuid'], changed['health']) == (
        'device.health_change', device['uuid'], 'unhealthy')
    _report(admin_context, [], notifier)
    [(event_type, deleted)] = sent.take()
    assert (event_type, deleted['uuid']) == ('device.delete',
                                             device['uuid'])


def test_status_changes_are_enable_and_disable(conductor, sent,
                                               host,  # noqa: F811
                                               admin_context):
    [device] = hardware.device_list(admin_context, {})
    conductor.device_set_status(admin_context, device['uuid'], 'maintaining')
    conductor.device_set_status(admin_context, device['uuid'], 'maintaining')
    conductor.device_set_status(admin_context, device['uuid'], 'enabled')
    assert [(e, d['uuid'], d['status']) for e, d in sent.take()] == [
        ('device.disable', device['uuid'], 'maintaining'),
        ('device.enable', device['uuid'], 'enabled')]


def test_programming_is_program_end_or_error(sent, region,  # noqa: F811
                                             admin_context):
    glance = test_programming.FakeGlance(test_programming._image())
    programmer = programming.RegionProgrammer(
        programming.GlanceBitstreams(lambda: glance),
        test_programming.Agent(), notifier=notifier_mod.Notifier(sent))
    programmer.program_deployable(admin_context, region['uuid'],
                                  test_programming.IMAGE)
    [(priority, event_type, payload)] = sent.sent
    data = payload['cyborg_object.data']
    assert (priority, event_type) == ('INFO', 'deployable.program.end')
    assert (data['uuid'], data['name'], data['host'], data['bitstream_id'],
            data['error']) == (region['uuid'], 'region0', 'host1',
                               test_programming.IMAGE, None)
    [device] = hardware.device_list(admin_context, {})
    assert data['device_uuid'] == device['uuid']
    sent.sent.clear()
    failing = programming.RegionProgrammer(
        programming.GlanceBitstreams(lambda: glance),
        test_programming.Agent(refuse=RuntimeError('the region is stuck')),
        notifier=notifier_mod.Notifier(sent))
    with pytest.raises(exception.ProgramFailed):
        failing.program_deployable(admin_context, region['uuid'],
                                   test_programming.IMAGE)
    [(priority, event_type, payload)] = sent.sent
    assert (priority, event_type) == ('ERROR', 'deployable.program.error')
    assert 'the region is stuck' in payload['cyborg_object.data']['error']


def test_nothing_is_read_or_built_when_notifications_are_off(
        monkeypatch, agents, host, admin_context, conf):  # noqa: F811
    def forbidden(*args, **kwargs):
        raise AssertionError('notifications are off')

    monkeypatch.setattr(notifications, 'read_arqs', forbidden)
    monkeypatch.setattr(notifications.payloads, 'arq_values', forbidden)
    monkeypatch.setattr(notifications.payloads, 'device_values', forbidden)
    manager, binder = _conductor(notifications.disabled(), agents)
    try:
        arqs = manager.arq_create(admin_context, 'two')
        _bind(manager, admin_context, arqs, host)
        manager.arq_unbind(admin_context, [arqs[0]['uuid']])
        manager.arq_delete(admin_context, uuids=[a['uuid'] for a in arqs])
        [device] = hardware.device_list(admin_context, {})
        manager.device_set_status(admin_context, device['uuid'],
                                  'maintaining')
        _report(admin_context, _wire(conf), notifications.disabled())
    finally:
        binder.stop()


def test_a_broken_transport_never_fails_the_operation(agents, host,  # noqa
                                                      admin_context):
    manager, binder = _conductor(notifier_mod.Notifier(Broken()), agents)
    try:
        arqs = manager.arq_create(admin_context, 'two')
        _bind(manager, admin_context, arqs, host)
        assert {a['state'] for a in arq_db.arq_list(
            admin_context, None)} == {'Bound'}
        manager.arq_delete(admin_context, uuids=[a['uuid'] for a in arqs])
    finally:
        binder.stop()
    assert arq_db.arq_list(admin_context, None) == []


def test_an_arq_that_cannot_be_described_is_dropped_not_raised(sent):
    notifications.emit_arqs(notifier_mod.Notifier(sent), None,
                            notifications.ARQ_CREATE, [{'uuid': 'u'}])
    assert sent.sent == []


def test_an_abandoned_arq_is_told_deleted(sent, agents, host,  # noqa: F811
                                         admin_context, database):
    binder = binding.Binder('cond1', 1, 60, agents, agents.deliver,
                            test_binding.LEASE,
                            notifier=notifier_mod.Notifier(sent),
                            abandoned_timeout=60)
    manager = conductor_manager.ConductorManager('cond1', binder=binder,
                                                 notifier=binder._notifier)
    arqs = manager.arq_create(admin_context, 'two')
    sent.take()
    test_binding._created_at(database, arqs[1], datetime.datetime(2020, 1, 1))
    binder.sweep(admin_context)
    binder.stop()
    assert _summary(sent.take()) == [
        ('accelerator_request.delete', arqs[1]['uuid'], 'Deleting')]
