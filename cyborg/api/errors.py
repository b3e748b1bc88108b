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

"""The error body every failed request gets.

The wire format is upstream's: ``{"error_message": "<json string>"}`` where
the inner JSON carries ``faultcode`` (``Client`` or ``Server``),
``faultstring`` and ``debuginfo``. Clients (python-cyborgclient,
openstacksdk) parse exactly this.
"""

import http
import json

import oslo_messaging as messaging
from webob import exc as webob_exc

from cyborg.common import exception
from cyborg.db import errors as db_errors

#: The one media type the API answers and reads (every layer of the
#: API, and the WSGI server's fault pages, use this constant).
JSON = 'application/json'

#: Seconds a client is told to wait (``Retry-After``) before it retries a
#: request answered 503 because the database or every conductor was
#: unavailable.
RETRY_AFTER = 5

INTERNAL_ERROR = 'An internal error occurred; see the service logs.'
DB_UNAVAILABLE = 'The database is unavailable; retry later.'
NO_CONDUCTOR = 'No conductor answered within %d s; retry later.'
CONDUCTOR_UNREACHABLE = ('The conductor could not be reached (%s); nothing '
                         'was changed, retry later.')
# The exception types of a conductor that does not map its database errors
# (an older one during an upgrade), as a RemoteError names them.
_REMOTE_DB_CONFLICTS = ('DBDuplicateEntry', 'DBReferenceError')
_REMOTE_DB_ERRORS = ('DBError', 'DBDeadlock', 'DBConnectionError',
                     'DBNotSupportedError', 'OperationalError',
                     'DBDataError', 'DBConstraintError',
                     'DBInvalidUnicodeParameter', 'DBNonExistentTable',
                     'DBNonExistentDatabase', 'DBNonExistentConstraint')


#: Characters of a client's value that an error message echoes.
MAX_ECHO = 200
#: Characters of an error message (one that echoes several values).
MAX_MESSAGE = 2000


def shorten(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how long
    it was: a 20 KB bad value is not sent back in full."""
    if len(text) <= limit:
        return text
    return '%s...(%d characters)' % (text[:limit], len(text))


def fault_body(status: int, message: str) -> bytes:
    fault = {'faultcode': 'Client' if status < 500 else 'Server',
             'faultstring': shorten(message, MAX_MESSAGE),
             'debuginfo': None}
    return json.dumps({'error_message': json.dumps(fault)}).encode()


def loggable(text, limit: int = 200) -> str:
    """``text`` from a client, fit for one log line: at most ``limit``
    characters, control and non-ASCII characters escaped (a path with
    ``%0A`` must not forge a second line)."""
    text = str(text)
    cut = len(text) > limit
    text = text[:limit].encode('unicode_escape').decode('ascii')
    return text + '...' if cut else text


def reason(status: int) -> str:
    """The reason phrase of HTTP ``status``."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return 'Error'


def status_and_message(error: Exception, conductor_timeout: float | None = None
                       ) -> tuple[int, str]:
    """Map an exception raised while handling a request to a response.

    Database errors of the API's own reads, and a conductor that did not
    answer (``conductor_timeout``: the seconds the API waited) or could
    not be reached, are 503s: the client retries (see
    :func:`retry_after`).
    """
    if isinstance(error, exception.CyborgException):
        return error.code, error.message
    if isinstance(error, webob_exc.HTTPException):
        return error.code, error.detail or error.explanation
    if db_errors.is_database_error(error):
        return 503, DB_UNAVAILABLE
    if isinstance(error, messaging.MessagingTimeout):
        return 503, NO_CONDUCTOR % round(conductor_timeout or 0)
    if isinstance(error, messaging.RemoteError):
        if error.exc_type in _REMOTE_DB_CONFLICTS:
            return 409, ('Conflict: the request conflicts with a '
                         'concurrent change; nothing was changed, retry.')
        if error.exc_type in _REMOTE_DB_ERRORS:
            return 503, DB_UNAVAILABLE
    elif isinstance(error, messaging.MessagingException):
        # MessageDeliveryFailure, a transport (RabbitMQ) connection
        # that failed, a conductor that vanished mid-call.
        return 503, CONDUCTOR_UNREACHABLE % type(error).__name__
    return 500, INTERNAL_ERROR


def retry_after(status: int) -> tuple[tuple[str, str], ...]:
    """The headers of an error response with ``status``: ``Retry-After``
    on a 503."""
    return (('Retry-After', str(RETRY_AFTER)),) if status == 503 else ()


def http_error(status: int, message: str, headers=()) -> webob_exc.HTTPError:
    """A webob error response with the fault body."""
    error_class = webob_exc.status_map[status]
    response = error_class()
    response.body = fault_body(status, message)
    response.content_type = JSON
    for name, value in headers:
        response.headers[name] = value
    return response
