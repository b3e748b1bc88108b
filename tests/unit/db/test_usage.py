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

"""Binding intervals and usage audits, on each database: exactly one
record per bound ARQ per period, whoever audits and whoever dies."""

import datetime
import io
import json
import threading

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.cmd import manage
from cyborg.conductor import inventory as conductor_inventory
from cyborg.conductor import usage_audit
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import usage as usage_db
from cyborg.domain import device_tree
from cyborg.domain import usage

INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
HOUR = 3600


def t(hour: int, minute: int = 0, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2030, 1, 1, hour, minute, second)


class Clock:
    """The time of the code under test (oslo's utcnow override) and of
    the auditors."""

    def __init__(self):
        self.now = t(9)

    def set(self, moment: datetime.datetime) -> None:
        self.now = moment
        timeutils.set_time_override(moment)

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.fixture
def clock():
    clock = Clock()
    clock.set(t(9))
    yield clock
    timeutils.clear_time_override()


class Notifier:
    """Records what it is given; ``fail`` makes it refuse."""

    enabled = True

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.sent: list[dict] = []
        self._lock = threading.Lock()

    def send(self, context, event_type, payload, priority='info'):
        assert event_type == usage.EVENT_TYPE
        if self.fail:
            return False
        with self._lock:
            self.sent.append(payload['cyborg_object.data'])
        return True


@pytest.fixture
def host(database, admin_context, conf):
    """One fake device with 4 PCI handles on host1, and a profile of
    one accelerator: the device's rp uuid."""
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    return hardware.deployable_list(admin_context)[0]['rp_uuid']


def bind(context, rp, count=1):
    """``count`` new ARQs, bound now; their uuids."""
    arqs = [arq_db.arq_create(context, 'one', 'p1')[0]
            for _ in range(count)]
    binding_db.bind(context, {a['uuid']: {
        'hostname': 'host1', 'device_rp_uuid': rp,
        'instance_uuid': INSTANCE} for a in arqs}, None, 'cond1')
    return [a['uuid'] for a in arqs]


def rows(engine, table):
    with engine.connect() as connection:
        return [dict(r._mapping) for r in connection.execute(
            sa.select(table).order_by(table.c.id))]


def auditor(clock, notifier, host='cond1', **kw):
    return usage_audit.UsageAuditor(host, HOUR, notifier, clock=clock, **kw)


def test_bound_at_is_written_with_the_bind(host, admin_context, clock):
    clock.set(t(10, 15))
    [uuid] = bind(admin_context, host)
    assert arq_db.arq_get(admin_context, uuid, None)['bound_at'] == t(10, 15)


def test_unbind_keeps_the_interval_and_what_it_was_bound_to(
        host, admin_context, clock, database):
    clock.set(t(10, 15))
    [uuid] = bind(admin_context, host)
    clock.set(t(10, 45))
    arq_db.arq_unbind(admin_context, [uuid], None)
    # An unbound ARQ unbound again, or deleted: no second interval.
    arq_db.arq_unbind(admin_context, [uuid], None)
    arq_db.arq_delete(admin_context, [uuid], None, None)
    [interval] = rows(database, models.ARQ_USAGE)
    device = hardware.device_list(admin_context, {})[0]
    assert {k: interval[k] for k in (
        'arq_uuid', 'project_id', 'instance_uuid', 'device_profile_name',
        'resource_class', 'vendor', 'model', 'host', 'device_uuid',
        'bound_at', 'unbound_at')} == {
        'arq_uuid': uuid, 'project_id': 'p1', 'instance_uuid': INSTANCE,
        'device_profile_name': 'one', 'resource_class': 'FPGA',
        'vendor': device['vendor'], 'model': device['model'],
        'host': 'host1', 'device_uuid': device['uuid'],
        'bound_at': t(10, 15), 'unbound_at': t(10, 45)}


def test_the_interval_of_a_deleted_arq_survives_it(host, admin_context,
                                                   clock, database):
    clock.set(t(10, 15))
    [uuid] = bind(admin_context, host)
    clock.set(t(10, 50))
    arq_db.arq_delete(admin_context, None, INSTANCE, None)
    assert [(r['arq_uuid'], r['unbound_at'])
            for r in rows(database, models.ARQ_USAGE)] == [(uuid, t(10, 50))]
    clock.set(t(11, 1))
    notifier = Notifier()
    assert auditor(clock, notifier).run(admin_context) == 1
    assert [(r['arq_uuid'], r['bound_seconds']) for r in notifier.sent] == [
        (uuid, 35 * 60)]


def test_one_record_per_bound_arq_per_period(host, admin_context, clock,
                                             database):
    clock.set(t(10, 15))
    a, b = bind(admin_context, host, 2)
    clock.set(t(10, 30))
    arq_db.arq_unbind(admin_context, [b], None)
    clock.set(t(10, 40))
    binding_db.bind(admin_context, {b: {
        'hostname': 'host1', 'device_rp_uuid': host,
        'instance_uuid': INSTANCE}}, None, 'cond1')
    # Never bound: no record.
    arq_db.arq_create(admin_context, 'one', 'p1')
    notifier = Notifier()
    clock.set(t(11, 0, 5))
    assert auditor(clock, notifier).run(admin_context) == 2
    assert sorted((r['arq_uuid'], r['bound_seconds'])
                  for r in notifier.sent) == sorted(
        [(a, 45 * 60), (b, 15 * 60 + 20 * 60)])
    # Nothing more until the next period ends, however often it runs.
    clock.set(t(11, 59))
    assert auditor(clock, notifier).run(admin_context) == 0
    clock.set(t(12, 0, 1))
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 2
    assert [r['bound_seconds'] for r in notifier.sent[2:]] == [HOUR, HOUR]
    assert [(r['period_start'], r['records'])
            for r in rows(database, models.USAGE_AUDITS)] == [
        (t(10), 2), (t(11), 2)]
    assert all(r['sent_at'] is not None and r['claimed_by'] is None
               for r in rows(database, models.USAGE_RECORDS))


def test_a_period_without_bound_arqs_is_audited_once(host, admin_context,
                                                     clock, database):
    clock.set(t(11, 0, 5))
    notifier = Notifier()
    assert auditor(clock, notifier).run(admin_context) == 0
    assert auditor(clock, notifier).run(admin_context) == 0
    assert [r['records'] for r in rows(database, models.USAGE_AUDITS)] == [0]


def test_two_concurrent_auditors_create_the_records_once(
        host, admin_context, clock, database):
    clock.set(t(10, 15))
    uuids = bind(admin_context, host, 3)
    clock.set(t(11, 0, 5))
    notifiers = [Notifier(), Notifier()]
    barrier = threading.Barrier(2)
    errors = []

    def audit(index):
        try:
            barrier.wait(10)
            auditor(clock, notifiers[index],
                    'cond%d' % index).run(admin_context)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=audit, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    sent = notifiers[0].sent + notifiers[1].sent
    assert sorted(r['arq_uuid'] for r in sent) == sorted(uuids)
    assert len(rows(database, models.USAGE_AUDITS)) == 1
    assert len(rows(database, models.USAGE_RECORDS)) == 3


def test_records_whose_sender_died_are_sent_once_its_lease_expired(
        host, admin_context, clock, database):
    clock.set(t(10, 15))
    [uuid] = bind(admin_context, host)
    clock.set(t(11, 0, 5))
    # The records are created and leased to cond1, which dies before
    # sending them.
    leased = usage_db.audit_period(admin_context, t(10), t(11), clock(),
                                   'cond1', clock() + datetime.timedelta(
                                       seconds=300))
    assert [r['arq_uuid'] for r in leased] == [uuid]
    notifier = Notifier()
    clock.set(t(11, 4))
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 0
    clock.set(t(11, 5, 6))
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 1
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 0
    [record] = notifier.sent
    # Sent as created.
    assert record == json.loads(leased[0]['payload'])
    assert record['bound_seconds'] == 45 * 60


def test_a_failed_send_is_retried_by_the_next_run(host, admin_context,
                                                  clock, database):
    clock.set(t(10, 15))
    bind(admin_context, host, 2)
    clock.set(t(11, 0, 5))
    notifier = Notifier(fail=True)
    assert auditor(clock, notifier).run(admin_context) == 0
    records = rows(database, models.USAGE_RECORDS)
    assert [(r['claimed_by'], r['sent_at'], r['attempts'])
            for r in records] == [(None, None, 1), (None, None, 0)]
    notifier.fail = False
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 2
    assert len(notifier.sent) == 2


def test_concurrent_claims_take_disjoint_records(host, admin_context,
                                                 clock, database):
    clock.set(t(10, 15))
    bind(admin_context, host, 4)
    clock.set(t(11, 0, 5))
    lease = clock() + datetime.timedelta(seconds=300)
    usage_db.audit_period(admin_context, t(10), t(11), clock(), 'dead',
                          clock())
    clock.set(t(11, 1))
    claimed = [usage_db.claim_unsent(admin_context, owner, clock(), lease, 3)
               for owner in ('cond1', 'cond2')]
    assert [len(c) for c in claimed] == [3, 1]
    assert not {r['id'] for r in claimed[0]} & {r['id'] for r in claimed[1]}


def _statements(database, action):
    """The INSERT/UPDATE/DELETE statements ``action`` runs, by table."""
    seen = []

    def record(conn, cursor, statement, *args):
        words = statement.split()
        if words[0].upper() in ('INSERT', 'UPDATE', 'DELETE'):
            table = words[2] if words[0].upper() != 'UPDATE' else words[1]
            seen.append((words[0].upper(), table))

    sa.event.listen(database, 'before_cursor_execute', record)
    try:
        action()
    finally:
        sa.event.remove(database, 'before_cursor_execute', record)
    return seen


def test_leaving_bound_costs_one_insert_and_nothing_else_does(
        host, admin_context, clock, database):
    [bound] = bind(admin_context, host)
    never = arq_db.arq_create(admin_context, 'one', 'p1')[0]['uuid']
    assert ('INSERT', 'arq_usage') not in _statements(
        database, lambda: arq_db.arq_delete(admin_context, [never], None,
                                            None))
    assert _statements(database, lambda: arq_db.arq_delete(
        admin_context, [bound], None, None)).count(('INSERT', 'arq_usage')) \
        == 1


# cyborg-manage usage audit ---------------------------------------------------

def _manage_audit(context, start, now):
    out = io.StringIO()
    code = manage.usage_audit_command(context, start, HOUR, now, out=out)
    return code, out.getvalue()


def test_manage_audits_a_period_left_out_for_the_conductors_to_send(
        host, admin_context, clock, database):
    clock.set(t(10, 15))
    [uuid] = bind(admin_context, host)
    clock.set(t(13, 0, 5))
    # The conductors audited 12:00-13:00 only (their first audit).
    assert auditor(clock, Notifier()).run(admin_context) == 1
    code, out = _manage_audit(admin_context, '2030-01-01T10:00:00Z', clock())
    assert (code, out) == (0, 'Created 1 usage records of '
                           '2030-01-01T10:00:00Z to 2030-01-01T11:00:00Z; '
                           'the conductors send them.\n')
    notifier = Notifier()
    assert auditor(clock, notifier, 'cond2').run(admin_context) == 1
    assert [(r['arq_uuid'], r['bound_seconds'],
             r['audit_period_beginning']) for r in notifier.sent] == [
        (uuid, 45 * 60, '2030-01-01T10:00:00Z')]


@pytest.mark.parametrize('start, message', [
    ('yesterday', "'yesterday' is not a time in ISO 8601"),
    ('2030-01-01T10:30:00Z', 'starts no audit period'),
    ('2030-01-01T12:00:00+01:00', 'was audited already'),
    ('2030-01-01T12:00:00Z', 'ends after the last period audited'),
    ('2030-01-01T13:00:00Z', 'has not ended yet'),
])
def test_manage_refuses_what_it_cannot_audit(host, admin_context, clock,
                                             database, start, message):
    clock.set(t(12, 0, 5))
    auditor(clock, Notifier()).run(admin_context)  # audits 11:00-12:00
    clock.set(t(13, 30))
    with pytest.raises(manage.Refused, match=message):
        _manage_audit(admin_context, start, clock())
    assert len(rows(database, models.USAGE_AUDITS)) == 1


def _report_busy(context, conf, busy: float, period: int = HOUR) -> None:
    """host1 reports its (unchanged) tree with ``busy`` percent on every
    device, as the conductor applies it when usage records are sent."""
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conductor_inventory.apply(
        context, 'host1', 'host1', wire, device_tree.tree_digest(wire), [],
        {device['address']: {'gpu_percent': busy} for device in wire},
        usage_period=period)


def test_the_record_has_the_mean_of_the_readings_while_bound(
        host, admin_context, clock, conf, database):
    clock.set(t(10, 5))
    _report_busy(admin_context, conf, 90.0)  # nobody bound: not counted
    [a] = bind(admin_context, host)
    for minute, busy in ((10, 20.0), (20, 40.0), (30, 60.0)):
        clock.set(t(10, minute))
        _report_busy(admin_context, conf, busy)
    clock.set(t(11, 0, 30))
    # A reading of the next period counts in the next record.
    _report_busy(admin_context, conf, 10.0)
    notifier = Notifier()
    assert auditor(clock, notifier).run(admin_context) == 1
    [record] = notifier.sent
    assert (record['arq_uuid'], record['mean_gpu_percent'],
            record['utilization_samples']) == (a, 40.0, 3)
    # What the records took is gone; the next period's readings stay.
    assert [(r['period_start'], r['samples'])
            for r in rows(database, models.ARQ_UTILIZATION)] == [(t(11), 1)]
    clock.set(t(12, 0, 30))
    assert auditor(clock, notifier).run(admin_context) == 1
    assert (notifier.sent[1]['mean_gpu_percent'],
            notifier.sent[1]['utilization_samples']) == (10.0, 1)


def test_no_readings_no_mean(host, admin_context, clock):
    clock.set(t(10, 5))
    bind(admin_context, host)
    notifier = Notifier()
    clock.set(t(11, 0, 30))
    assert auditor(clock, notifier).run(admin_context) == 1
    assert (notifier.sent[0]['mean_gpu_percent'],
            notifier.sent[0]['utilization_samples']) == (None, 0)


def test_readings_are_not_kept_without_usage_records(
        host, admin_context, clock, conf, database):
    clock.set(t(10, 5))
    bind(admin_context, host)
    _report_busy(admin_context, conf, 50.0, period=None)
    assert rows(database, models.ARQ_UTILIZATION) == []
