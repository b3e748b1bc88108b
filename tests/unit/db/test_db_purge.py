# Copyright 2026 The Cyborg Authors.
#
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
"""Purging finished records (``cyborg-dbsync purge``) on each database."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.cmd import dbsync
from cyborg.db import models
from cyborg.db import nova_events
from cyborg.db import purge
from tests import factories

EVENTS = models.NovaEvent.__table__
SERVICES = models.Service.__table__
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0)
OLD = NOW - datetime.timedelta(days=40)
RECENT = NOW - datetime.timedelta(days=2)
#: Nothing deleted from any table.
NONE = {'nova_events': 0, 'services': 0, 'usage_records': 0, 'arq_usage': 0,
        'usage_audits': 0}


def _cutoff(before, down_since=NOW - datetime.timedelta(minutes=1)):
    return purge.Cutoff(before=before, down_since=down_since)


def _event(engine, number: int, sent_at=None, repeat_until=None,
           claimed_until=None, last_error=None) -> int:
    return factories.create_test_nova_event(
        engine, arq_uuid='00000000-0000-4000-8000-%012d' % number,
        instance_uuid='10000000-0000-4000-8000-%012d' % number,
        status='completed', attempts=1, next_attempt_at=OLD,
        created_at=OLD, sent_at=sent_at, repeat_until=repeat_until,
        claimed_by='c1' if claimed_until else None,
        claimed_until=claimed_until, last_error=last_error)['id']


@pytest.fixture
def events(database):
    """Finished and unfinished events, old and recent; name: id."""
    return {
        'delivered_old': _event(database, 1, sent_at=OLD),
        'rejected_old': _event(database, 2, sent_at=OLD,
                               last_error=nova_events.REJECTED_PREFIX + 'x'),
        'delivered_recent': _event(database, 3, sent_at=RECENT),
        'pending_old': _event(database, 4),
        'repeating_old': _event(database, 5, repeat_until=NOW),
        'leased_old': _event(database, 6, claimed_until=NOW),
    }


def _remaining(engine) -> set[int]:
    with engine.connect() as connection:
        return set(connection.execute(sa.select(EVENTS.c.id)).scalars())


def test_purge_deletes_only_finished_rows_older_than_the_cutoff(
        database, admin_context, events):
    cutoff = _cutoff(NOW - datetime.timedelta(days=30))
    assert purge.count(admin_context, cutoff) == dict(NONE, nova_events=2)
    assert purge.purge(admin_context, cutoff, batch_size=1000) == dict(
        NONE, nova_events=2)
    assert _remaining(database) == {
        events[name] for name in ('delivered_recent', 'pending_old',
                                  'repeating_old', 'leased_old')}


def test_unfinished_rows_are_never_purged_whatever_their_age(
        database, admin_context, events):
    purge.purge(admin_context, _cutoff(NOW + datetime.timedelta(days=1)),
                1000)
    assert _remaining(database) == {
        events[name] for name in ('pending_old', 'repeating_old',
                                  'leased_old')}


@pytest.mark.parametrize('batch_size', [1, 2, 3])
def test_purge_goes_batch_by_batch(database, admin_context, batch_size,
                                   monkeypatch):
    for number in range(5):
        _event(database, number, sent_at=OLD)
    calls = []
    real = purge.delete_batch

    def counting(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(purge, 'delete_batch', counting)
    deleted = purge.purge(admin_context, _cutoff(NOW), batch_size)
    assert deleted == dict(NONE, nova_events=5)
    assert all(done <= batch_size for done in calls)
    # The batches of the events, then one (empty) of each other table.
    assert len(calls) == 5 // batch_size + 1 + len(NONE) - 1
    assert _remaining(database) == set()


def test_dry_run_prints_counts_and_deletes_nothing(
        database, admin_context, events, capsys):
    status = dbsync.run_purge(admin_context, 30, dry_run=True,
                              batch_size=10, now=NOW)
    assert status == 0
    out = capsys.readouterr().out
    assert 'nova_events: 2 would be deleted (dry run)' in out
    assert 'before 2026-05-02 12:00:00 UTC' in out
    assert _remaining(database) == set(events.values())


def test_oldest_cutoff_is_usable(database, admin_context, events, capsys):
    assert dbsync.run_purge(admin_context, dbsync.MAX_DAYS, dry_run=False,
                            batch_size=10, now=NOW) == 0
    assert 'nova_events: 0 deleted' in capsys.readouterr().out


def test_purge_prints_what_it_deleted(database, admin_context, events,
                                      capsys):
    assert dbsync.run_purge(admin_context, 0, dry_run=False, batch_size=10,
                            now=NOW) == 0
    assert 'nova_events: 3 deleted' in capsys.readouterr().out
    assert events['delivered_recent'] not in _remaining(database)


def _service(engine, host, binary, last_seen_up):
    factories.create_test_service(engine, host=host, binary=binary,
                                  last_seen_up=last_seen_up,
                                  sync_requested=0, sync_done=0)


def _hosts(engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(sa.select(SERVICES.c.host)).scalars())


def test_purge_deletes_only_conductors_gone_that_long(database,
                                                      admin_context):
    _service(database, 'gone', 'cyborg-conductor', OLD)
    _service(database, 'recent', 'cyborg-conductor', RECENT)
    _service(database, 'agent', 'cyborg-agent', OLD)
    deleted = purge.purge(admin_context,
                          _cutoff(NOW - datetime.timedelta(days=30)), 10)
    assert deleted == dict(NONE, services=1)
    assert _hosts(database) == {'recent', 'agent'}


def test_purge_keeps_conductors_that_are_up_whatever_the_age(
        database, admin_context):
    # --older-than 0: a conductor that sent a heartbeat a second ago is
    # up, not finished.
    _service(database, 'up', 'cyborg-conductor',
             NOW - datetime.timedelta(seconds=1))
    _service(database, 'down', 'cyborg-conductor',
             NOW - datetime.timedelta(minutes=5))
    cutoff = _cutoff(NOW, down_since=NOW - datetime.timedelta(minutes=1))
    assert purge.purge(admin_context, cutoff, 10)['services'] == 1
    assert _hosts(database) == {'up'}


def test_command_counts_down_time_from_the_configuration(
        database, admin_context, conf, capsys):
    conf.set_override('service_down_time', 600)
    _service(database, 'silent-5-min', 'cyborg-conductor',
             NOW - datetime.timedelta(minutes=5))
    dbsync.run_purge(admin_context, 0, dry_run=False, batch_size=10,
                     now=NOW)
    assert 'services: 0 deleted' in capsys.readouterr().out
    conf.set_override('service_down_time', 60)
    dbsync.run_purge(admin_context, 0, dry_run=False, batch_size=10,
                     now=NOW)
    assert 'services: 1 deleted' in capsys.readouterr().out
    conf.clear_override('service_down_time')


@pytest.mark.parametrize('value,minimum,maximum,expected', [
    ('0', 0, None, 0), ('30', 0, None, 30), (' 7 ', 0, None, 7),
    ('1', 1, None, 1), ('36500', 0, 36500, 36500)])
def test_integer_arguments(value, minimum, maximum, expected):
    assert dbsync.integer_arg('--x', value, minimum, maximum) == expected


@pytest.mark.parametrize('value,minimum,maximum', [
    ('-1', 0, None), ('1.5', 0, None), ('ten', 0, None), ('', 0, None),
    (None, 0, None), ('0', 1, None), ('1e3', 0, None),
    ('36501', 0, 36500), ('99999999999', 0, 36500)])
def test_bad_integer_arguments_are_one_line_errors(value, minimum, maximum):
    with pytest.raises(dbsync.UsageError) as error:
        dbsync.integer_arg('--older-than', value, minimum, maximum)
    message = str(error.value)
    assert '\n' not in message
    assert message.startswith('--older-than must be ')
    assert repr(value) in message


def _usage_rows(engine):
    """Usage rows around the 30-day cutoff: sent and unsent records,
    intervals that ended before and after, three audits."""
    hour = datetime.timedelta(hours=1)
    with engine.begin() as c:
        for name, sent_at in (('old-sent', OLD), ('recent-sent', RECENT),
                              ('old-unsent', None)):
            c.execute(sa.insert(models.USAGE_RECORDS).values(
                arq_uuid=name, period_start=OLD, period_end=OLD + hour,
                payload='{}', sent_at=sent_at, attempts=0))
        for name, end in (('old', OLD), ('recent', RECENT)):
            c.execute(sa.insert(models.ARQ_USAGE).values(
                arq_uuid=name, bound_at=end - hour, unbound_at=end))
        for start in (OLD - hour, OLD, OLD + hour):
            c.execute(sa.insert(models.USAGE_AUDITS).values(
                period_start=start, period_end=start + hour, records=0))


def _column(engine, table, column):
    with engine.connect() as connection:
        return sorted(connection.execute(sa.select(table.c[column]))
                      .scalars())


def test_purge_deletes_sent_records_ended_intervals_and_old_audits(
        database, admin_context):
    _usage_rows(database)
    deleted = purge.purge(admin_context,
                          _cutoff(NOW - datetime.timedelta(days=30)), 10)
    assert deleted == dict(NONE, usage_records=1, arq_usage=1,
                           usage_audits=2)
    assert _column(database, models.USAGE_RECORDS, 'arq_uuid') == [
        'old-unsent', 'recent-sent']
    assert _column(database, models.ARQ_USAGE, 'arq_uuid') == ['recent']
    # The latest audit stays, however old: the next audits follow it.
    assert _column(database, models.USAGE_AUDITS, 'period_start') == [
        OLD + datetime.timedelta(hours=1)]
