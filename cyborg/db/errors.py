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

"""Database errors as the rest of cyborg sees them.

Code outside :mod:`cyborg.db` never names oslo.db's or SQLAlchemy's
exceptions: it catches :data:`DATABASE_ERRORS` and asks the predicates
here what kind of failure one is, or turns it into the CyborgException a
caller is answered with (:func:`answer`).
"""

from oslo_db import exception as db_exc
import sqlalchemy.exc as sa_exc

from cyborg.common import exception
from cyborg.db import api as db_api

#: What the database layer raises besides CyborgExceptions: oslo.db's
#: errors and the SQLAlchemy errors oslo.db passes through.
DATABASE_ERRORS = (db_exc.DBError, sa_exc.SQLAlchemyError)

# What the caller is told when the database failed (after the write was
# retried; see cyborg.db.api): the write did not happen.
DB_UNAVAILABLE = 'the database is unavailable, retry later'
DB_CONFLICT = ('the request conflicts with a concurrent change of the same '
               'rows (%s); nothing was changed, retry')


def is_database_error(error: BaseException) -> bool:
    """Whether ``error`` is one of :data:`DATABASE_ERRORS`."""
    return isinstance(error, DATABASE_ERRORS)


def is_conflict(error: BaseException) -> bool:
    """Whether ``error`` is a race lost to a concurrent request: a
    duplicate, or a referenced row removed meanwhile."""
    return isinstance(error, (db_exc.DBDuplicateEntry,
                              db_exc.DBReferenceError))


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot serve now: a lost or
    refused connection, or a deadlock or lock wait left after the
    retries (see :func:`cyborg.db.api.is_transient`)."""
    return isinstance(error, (db_exc.DBDeadlock, db_exc.DBConnectionError)
                      ) or db_api.is_transient(error)


def answer(error: BaseException) -> exception.CyborgException | None:
    """The CyborgException a database error crosses RPC as (None if
    ``error`` is no database error).

    A duplicate or a foreign key that vanished meanwhile is a 409 (a
    concurrent request won the race); everything else, a deadlock or
    lock wait timeout left after the retries, a lost or refused
    connection, is a 503.
    """
    if isinstance(error, db_exc.DBDuplicateEntry):
        columns = ', '.join(error.columns or []) or 'a unique key'
        return exception.Conflict(reason=DB_CONFLICT % (
            'duplicate ' + columns))
    if isinstance(error, db_exc.DBReferenceError):
        return exception.Conflict(reason=DB_CONFLICT % (
            'a referenced row was removed'))
    if is_database_error(error):
        return exception.ServiceUnavailable(reason=DB_UNAVAILABLE)
    return None
