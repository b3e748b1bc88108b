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
"""The online data migrations framework, with fake migrations."""

import pytest

from cyborg.cmd import dbsync
from cyborg.db import online_migrations


class FakeMigration:
    """Migrates ``rows`` rows; ``stuck`` of them never migrate."""

    def __init__(self, name: str, rows: int, stuck: int = 0,
                 error: bool = False):
        self.__name__ = name
        self.left = rows
        self.stuck = stuck
        self.error = error
        self.calls: list[int] = []

    def __call__(self, context, max_count):
        self.calls.append(max_count)
        if self.error:
            raise RuntimeError('broken')
        found = self.left
        done = min(max_count, self.left - self.stuck)
        self.left -= done
        return found, done


def test_no_migration_is_complete():
    outcome = online_migrations.run(None)
    assert outcome.totals == {}
    assert outcome.complete


def test_unlimited_runs_batches_until_none_is_left():
    first = FakeMigration('first', 120)
    second = FakeMigration('second', 7)
    outcome = online_migrations.run(None, None, [first, second])
    assert outcome.complete
    assert first.left == second.left == 0
    assert {name: (t.found, t.done) for name, t in outcome.totals.items()} \
        == {'first': (120, 120), 'second': (7, 7)}
    # Batches of 50 shared by the migrations in turn.
    assert first.calls[:3] == [50, 50, 50]
    assert second.calls[0] == 30


def test_max_count_stops_early_and_reports_rows_left():
    first = FakeMigration('first', 3)
    second = FakeMigration('second', 10)
    outcome = online_migrations.run(None, 5, [first, second])
    assert not outcome.complete
    assert first.calls == [5] and second.calls == [2]
    assert outcome.remaining == 8
    assert (first.left, second.left) == (0, 8)


def test_max_count_used_up_before_the_last_migration_is_not_complete():
    first = FakeMigration('first', 5)
    second = FakeMigration('second', 0)
    outcome = online_migrations.run(None, 5, [first, second])
    assert second.calls == []
    assert outcome.cut_short and not outcome.complete


def test_max_count_that_finishes_everything_is_complete():
    migration = FakeMigration('only', 4)
    assert online_migrations.run(None, 10, [migration]).complete


def test_rows_a_migration_cannot_migrate_leave_it_incomplete():
    migration = FakeMigration('stuck', 10, stuck=2)
    outcome = online_migrations.run(None, None, [migration])
    assert outcome.remaining == 2 and not outcome.complete
    assert outcome.totals['stuck'].done == 8


def test_a_failing_migration_does_not_stop_the_others():
    broken = FakeMigration('broken', 1, error=True)
    fine = FakeMigration('fine', 3)
    outcome = online_migrations.run(None, None, [broken, fine])
    assert outcome.failed == ['broken']
    assert fine.left == 0
    assert not outcome.complete


@pytest.mark.parametrize('migrations,max_count,status,last_line', [
    ([], None, 0, 'All online data migrations are done.'),
    ([], 5, 0, 'All online data migrations are done.'),
    ([FakeMigration('m', 10)], None, 0,
     'All online data migrations are done.'),
    ([FakeMigration('m', 10)], 4, 1,
     'Some migrations have more rows to migrate; run the command again.'),
    ([FakeMigration('m', 1, error=True)], None, 2,
     'Some migrations failed unexpectedly (m); see the log.'),
])
def test_command_exit_status_and_output(migrations, max_count, status,
                                        last_line, capsys):
    assert dbsync.run_online_data_migrations(
        None, max_count, migrations) == status
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == last_line
    if migrations:
        assert '| Migration | Total Needed | Completed |' in lines
    else:
        assert 'No online data migration is defined.' in lines


def test_command_prints_a_row_per_migration(capsys):
    dbsync.run_online_data_migrations(
        None, 4, [FakeMigration('alpha', 10), FakeMigration('beta', 2)])
    lines = capsys.readouterr().out.splitlines()
    assert '| alpha     | 10           | 4         |' in lines
    # Not asked: max_count was used up.
    assert not any('beta' in line for line in lines)
