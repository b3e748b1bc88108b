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

"""What a ``[database] connection`` URL names, without connecting."""

import os


class NotADatabaseURL(ValueError):
    """The connection string is no SQLAlchemy URL."""


def sqlite_path(connection: str) -> str | None:
    """The absolute path of the file a SQLite ``connection`` names; None
    for another database, or SQLite in memory. Raises
    :class:`NotADatabaseURL`."""
    # Imported here: every service checks its options at start, and the
    # agent imports nothing else of SQLAlchemy.
    import sqlalchemy.engine
    try:
        url = sqlalchemy.engine.make_url(connection)
    except Exception as e:  # sqlalchemy raises ArgumentError, ValueError
        raise NotADatabaseURL(str(e)) from e
    if url.get_backend_name() != 'sqlite' or url.database in (
            None, '', ':memory:'):
        return None
    return os.path.abspath(url.database)
