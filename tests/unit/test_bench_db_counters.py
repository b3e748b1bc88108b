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

"""The database counters of the Nova cycle benchmark (``--durable``)
and the durable database servers it runs."""

import math
import os
import subprocess
import sys

import pytest

from tests.functional import servers
from tools.bench import db_counters

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_per_cycle_is_each_counters_increase_per_cycle():
    before = {'Handler_commit': 10, 'Innodb_data_fsyncs': 4}
    after = {'Handler_commit': 50, 'Innodb_data_fsyncs': 12}
    assert db_counters.per_cycle(before, after, 4) == {
        'Handler_commit': 10.0, 'Innodb_data_fsyncs': 2.0}
    assert db_counters.per_cycle(None, after, 4) == {}


def test_commits_and_fsyncs_of_each_server():
    mariadb = {'Handler_commit': 15.5, 'Innodb_data_fsyncs': 2.25}
    postgresql = {'xact_commit': 7.5, 'wal_sync': 2.5}
    assert db_counters.commits(mariadb) == 15.5
    assert db_counters.fsyncs(mariadb) == 2.25
    assert db_counters.commits(postgresql) == 7.5
    assert db_counters.fsyncs(postgresql) == 2.5
    assert math.isnan(db_counters.fsyncs({}))
    assert db_counters.describe({}) == ''


def _mariadb_counts(**values):
    counts = dict.fromkeys(db_counters.MARIADB_STATUS, 0.0)
    counts.update(values)
    return counts


def test_describe_mariadb_without_the_counters_of_older_versions():
    counts = _mariadb_counts(Questions=16.5, Innodb_row_lock_waits=0.25)
    del counts['Innodb_os_log_fsyncs']  # gone in MariaDB 10.8
    text = db_counters.describe(counts)
    assert text.startswith('16.5 statements')
    assert '0.25 row lock waits' in text
    assert '(nan of the redo log)' in text


def test_a_mariadb_commit_shows_in_its_counters(mariadb_server):
    mariadb_server.create_database('counters')
    try:
        before = db_counters.snapshot(mariadb_server, 'counters')
        connection = mariadb_server._connect('counters')
        try:
            with connection.cursor() as cursor:
                cursor.execute('CREATE TABLE t (id INT PRIMARY KEY) '
                               'ENGINE=InnoDB')
                cursor.execute('BEGIN')
                cursor.execute('INSERT INTO t VALUES (1)')
                cursor.execute('COMMIT')
        finally:
            connection.close()
        spent = db_counters.per_cycle(
            before, db_counters.snapshot(mariadb_server, 'counters'), 1)
    finally:
        mariadb_server.drop_database('counters')
    assert spent['Com_commit'] >= 1
    assert spent['Handler_commit'] >= 1
    assert spent['Questions'] >= 4


def test_postgresql_counters_are_read(postgresql_server):
    counts = db_counters.snapshot(postgresql_server, 'postgres')
    assert set(counts) == {'xact_commit', 'xact_rollback', 'deadlocks',
                           'wal_records', 'wal_fpi', 'wal_bytes',
                           'wal_write', 'wal_sync'}
    assert counts['xact_commit'] > 0


@pytest.mark.parametrize('server_class,unsafe', [
    (servers.PostgreSQLServer, 'fsync=off'),
    (servers.MariaDBServer, '--innodb-flush-log-at-trx-commit=0')])
def test_a_durable_server_keeps_its_production_defaults(server_class,
                                                        unsafe):
    fast, durable = server_class(), server_class(durable=True)
    try:
        assert unsafe in fast._speed_args()
        assert durable._speed_args() == []
    finally:
        fast.cleanup()
        durable.cleanup()


def test_the_benchmark_refuses_an_unknown_durable_database():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'bench',
                                      'nova_cycle.py'),
         '--durable', 'postgresql,sqlite'],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert "--durable: a list of distinct databases among galera, mysql, " \
           "postgresql, not 'postgresql,sqlite'" in result.stderr
