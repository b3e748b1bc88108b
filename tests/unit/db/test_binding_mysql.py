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

"""The handle claim on MySQL/MariaDB takes free handles unordered.

Ordered by id, InnoDB reads and locks every free handle of the
deployable to sort them before the LIMIT, so a concurrent bind to the
same deployable skips them all (SKIP LOCKED) and, once its retries are
spent, answers 409 although handles are free. Unordered, the scan stops
at the handles it takes. The statement each dialect gets is checked
here; the behaviour on MariaDB by
``tests/functional/test_arq_faults.py::
test_handle_claims_skip_only_the_handles_taken`` (which fails on MariaDB
with the ordered claim: the second claim finds no free handle).
"""

from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.db import binding as binding_db


class _Handle:
    def __init__(self, id_):
        self.id = id_


class _Result(list):
    rowcount = 1


class _Recorder:
    """A connection that records its statements and finds one handle."""

    def __init__(self, dialect):
        self.dialect = dialect
        self.statements = []

    def execute(self, statement, params=None):
        self.statements.append(statement)
        return _Result([_Handle(7)])


def _claim_sql(dialect) -> str:
    connection = _Recorder(dialect)
    handles = binding_db._claim_free(connection, 'rp', 'host', 1)
    assert [h.id for h in handles] == [7]
    return str(connection.statements[0].compile(dialect=dialect))


def test_mysql_claims_unordered_with_skip_locked():
    sql = _claim_sql(mysql.dialect())
    assert 'ORDER BY' not in sql
    assert 'LIMIT' in sql and sql.endswith('FOR UPDATE SKIP LOCKED')


def test_other_databases_claim_the_lowest_ids():
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        assert 'ORDER BY attach_handles.id' in _claim_sql(dialect)


def _take_sql(dialect) -> str:
    connection = _Recorder(dialect)
    binding_db._claim_free(connection, 'rp', 'host', 1)
    return str(connection.statements[1].compile(dialect=dialect))


def test_mysql_takes_the_claimed_handles_by_primary_key():
    """On a small table InnoDB would scan (and lock, until the bind
    commits) every handle for the UPDATE; a concurrent bind's SKIP LOCKED
    claim would then find none."""
    assert _take_sql(mysql.dialect()).startswith(
        'UPDATE attach_handles FORCE INDEX (PRIMARY) SET')
    for dialect in (postgresql.dialect(), sqlite.dialect()):
        assert 'FORCE INDEX' not in _take_sql(dialect)
