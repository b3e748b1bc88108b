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

"""The outbox's UPDATEs on MySQL/MariaDB find their rows through the
primary key.

On a small table InnoDB's optimizer scans the whole table for
``UPDATE ... WHERE id IN (...)``, and an UPDATE keeps a lock on every row
it scanned until the transaction ends: a lease would lock every event and
a concurrent claimer (``FOR UPDATE SKIP LOCKED``) would find none. The
behaviour itself is proven on MariaDB by
``tests/functional/test_notifier.py::test_claims_skip_rows_locked_by_
another_conductor``; here, the SQL each dialect gets.
"""

import datetime

from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.db import nova_events

NOW = datetime.datetime(2026, 1, 1)
HINTED = 'UPDATE nova_events FORCE INDEX (PRIMARY) SET'


class _Recorder:
    """A connection that records the statements run on it."""

    def __init__(self, dialect):
        self.dialect = dialect
        self.statements = []

    def execute(self, statement, *args):
        self.statements.append(statement)
        return _Result()


class _Result:
    rowcount = 2

    def __iter__(self):
        return iter(())


def _sql(statement, dialect) -> str:
    return str(statement.compile(dialect=dialect))


def test_lease_update_uses_the_primary_key_on_mysql():
    connection = _Recorder(mysql.dialect())
    nova_events._lease(connection, [1, 2], 'conductor-a', NOW,
                       NOW + datetime.timedelta(seconds=30),
                       nova_events._claimable(NOW))
    update = connection.statements[0]
    assert _sql(update, mysql.dialect()).startswith(HINTED)


def test_finish_update_uses_the_primary_key_on_mysql():
    for attempt in (True, False):
        statement = nova_events._finish_statement(('sent_at',), attempt)
        assert _sql(statement, mysql.dialect()).startswith(HINTED)


def test_other_databases_get_no_hint():
    statement = nova_events._finish_statement(('sent_at',), True)
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        sql = _sql(statement, dialect)
        assert sql.startswith('UPDATE nova_events SET'), sql
        assert 'FORCE' not in sql
