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

EVENTS = models.NovaEvent.__table__
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0)
OLD = NOW - datetime.timedelta(days=40)
RECENT = NOW - datetime.timedelta(days=2)


def _event(engine, number: int, sent_at=None, repeat_until=None,
           claimed_until=None, last_error=None) -> int:
    with engine.begin() as connection:
        return connection.execute(sa.insert(EVENTS).values(
            arq_uuid='00000000-0000-4000-8000-%012d' % number,
            instance_uuid='10000000-0000-4000-8000-%012d' % number,
            status='completed', attempts=1, next_attempt_at=OLD,
            created_at=OLD, sent_at=sent_at, repeat_until=repeat_until,
            claimed_by='c1' if claimed_until else None,
            claimed_until=claimed_until, last_error=last_error
        )).inserted_primary_key[0]


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
    before = NOW - datetime.timedelta(days=30)
    assert purge.count(admin_context, before) == {'nova_events': 2}
    assert purge.purge(admin_context, before, batch_size=1000) == {
        'nova_events': 2}
    assert _remaining(database) == {
        events[name] for name in ('delivered_recent', 'pending_old',
                                  'repeating_old', 'leased_old')}


def test_unfinished_rows_are_never_purged_whatever_their_age(
        database, admin_context, events):
    purge.purge(admin_context, NOW + datetime.timedelta(days=1), 1000)
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
    deleted = purge.purge(admin_context, NOW, batch_size)
    assert deleted == {'nova_events': 5}
    assert all(done <= batch_size for done in calls)
    assert len(calls) == 5 // batch_size + 1
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


def test_purge_prints_what_it_deleted(database, admin_context, events,
                                      capsys):
    assert dbsync.run_purge(admin_context, 0, dry_run=False, batch_size=10,
                            now=NOW) == 0
    assert 'nova_events: 3 deleted' in capsys.readouterr().out
    assert events['delivered_recent'] not in _remaining(database)


@pytest.mark.parametrize('value,minimum,expected', [
    ('0', 0, 0), ('30', 0, 30), (' 7 ', 0, 7), ('1', 1, 1)])
def test_integer_arguments(value, minimum, expected):
    assert dbsync.integer_arg('--x', value, minimum) == expected


@pytest.mark.parametrize('value,minimum', [
    ('-1', 0), ('1.5', 0), ('ten', 0), ('', 0), (None, 0), ('0', 1),
    ('1e3', 0)])
def test_bad_integer_arguments_are_one_line_errors(value, minimum):
    with pytest.raises(dbsync.UsageError) as error:
        dbsync.integer_arg('--older-than', value, minimum)
    message = str(error.value)
    assert '\n' not in message
    assert message.startswith('--older-than must be ')
    assert repr(value) in message
