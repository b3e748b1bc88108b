"""The error body every failed request gets.

The wire format is upstream's: ``{"error_message": "<json string>"}`` where
the inner JSON carries ``faultcode`` (``Client`` or ``Server``),
``faultstring`` and ``debuginfo``. Clients (python-cyborgclient,
openstacksdk) parse exactly this.
"""

import json

from webob import exc as webob_exc

from cyborg.common import exception

JSON = 'application/json'


def fault_body(status: int, message: str) -> bytes:
    fault = {'faultcode': 'Client' if status < 500 else 'Server',
             'faultstring': message, 'debuginfo': None}
    return json.dumps({'error_message': json.dumps(fault)}).encode()


def status_and_message(error: Exception) -> tuple[int, str]:
    """Map an exception raised while handling a request to a response."""
    if isinstance(error, exception.CyborgException):
        return error.code, error.message
    if isinstance(error, webob_exc.HTTPException):
        return error.code, error.detail or error.explanation
    return 500, 'An internal error occurred; see the service logs.'


def http_error(status: int, message: str, headers=()) -> webob_exc.HTTPError:
    """A webob error response with the fault body."""
    error_class = webob_exc.status_map[status]
    response = error_class()
    response.body = fault_body(status, message)
    response.content_type = JSON
    for name, value in headers:
        response.headers[name] = value
    return response
