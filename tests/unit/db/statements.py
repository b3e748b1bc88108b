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


"""Counting the SQL statements a piece of code runs."""

import sqlalchemy as sa


class StatementCounter:
    """Counts the statements an engine runs inside ``with``, as the
    benchmarks do: SQLite's explicit BEGIN is transaction control, not a
    statement (PostgreSQL and MariaDB begin implicitly)."""

    def __init__(self, engine: sa.engine.Engine):
        self.engine = engine
        self.count = 0

    def _count(self, _connection, _cursor, statement, *_args) -> None:
        if statement.strip().upper() != 'BEGIN':
            self.count += 1

    def __enter__(self) -> 'StatementCounter':
        sa.event.listen(self.engine, 'before_cursor_execute', self._count)
        return self

    def __exit__(self, *_exc) -> None:
        sa.event.remove(self.engine, 'before_cursor_execute', self._count)
