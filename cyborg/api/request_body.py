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

"""Reading and parsing request bodies: one guarded step before routing.

The same step refuses a path or query string that is not UTF-8 once
its percent-escapes are decoded, or that holds a NUL.

Every request that carries a body goes through :class:`BodyGuard` before
pecan sees it (pecan's routing reads ``request.json`` of a JSON request
before any controller runs). The body is read once, bounded by
``[oslo_middleware] max_request_body_size``, and a JSON body is parsed
and checked once: nesting depth, strings that are valid Unicode without
lone surrogates or NUL, integers that fit a 64-bit column and finite
floats. A body that breaks any of these answers 4xx here, with the JSON fault
envelope, and never reaches a controller or the database.
"""

import io
import json
import math
from typing import Any
import urllib.parse

from oslo_log import log as logging

from cyborg.api import errors
from cyborg.common import exception

LOG = logging.getLogger(__name__)

#: Where the parsed body of a JSON request is kept for the controllers.
ENVIRON_KEY = 'cyborg.json_body'
#: Where the error found in a body is kept until an endpoint reads it.
ERROR_KEY = 'cyborg.json_body_error'
#: Deepest nesting of arrays and objects any request of the API needs
#: (a bind PATCH is four levels deep).
MAX_DEPTH = 32
#: Integers must fit the widest integer column of every database.
MAX_INTEGER = 2 ** 63 - 1


class BodyError(exception.Invalid):
    """A body that cannot be read or parsed (400)."""


class BodyTooLarge(exception.CyborgException):
    msg_fmt = ('Request body is larger than the %(limit)d bytes allowed '
               '([oslo_middleware] max_request_body_size)')
    code = 413


def _reject_constant(name: str) -> None:
    raise BodyError(reason='%s is not a valid JSON number' % name)


def _check_string(value: str) -> None:
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        raise BodyError(reason='strings must not contain lone UTF-16 '
                               'surrogates')
    if '\x00' in value:
        # PostgreSQL stores no NUL in text; no field of the API needs one.
        raise BodyError(reason='strings must not contain NUL (\\u0000)')


def _check_scalar(value: Any) -> None:
    if isinstance(value, str):
        _check_string(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not -MAX_INTEGER - 1 <= value <= MAX_INTEGER:
            raise BodyError(reason='integer %s.. is out of range (at most '
                                   '64 bits)' % str(value)[:20])
    elif isinstance(value, float) and not math.isfinite(value):
        raise BodyError(reason='numbers must be finite')


def check_document(document: Any) -> None:
    """Raise BodyError unless every value of ``document`` is within the
    limits above (walked iteratively: no recursion to exhaust)."""
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                raise BodyError(reason='JSON nesting deeper than %d levels'
                                       % MAX_DEPTH)
            for key, item in value.items():
                _check_string(key)
                pending.append((item, depth + 1))
        elif isinstance(value, list):
            if depth > MAX_DEPTH:
                raise BodyError(reason='JSON nesting deeper than %d levels'
                                       % MAX_DEPTH)
            pending.extend((item, depth + 1) for item in value)
        else:
            _check_scalar(value)


def loads(raw: bytes) -> Any:
    """The JSON document ``raw`` holds, checked; BodyError if it is not
    strict UTF-8 JSON within the limits of :func:`check_document`."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
        raise BodyError(reason='the body is not valid UTF-8 (byte %d)'
                               % e.start)
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise BodyError(reason='JSON nesting deeper than %d levels'
                               % MAX_DEPTH)
    except ValueError as e:
        raise exception.InvalidJSON(reason=str(e)[:200])
    check_document(document)
    return document


def media_type(environ: dict) -> str:
    """The request's media type, without parameters, lower-case."""
    return environ.get('CONTENT_TYPE', '').split(';')[0].strip().lower()


def _declared_length(environ: dict) -> int | None:
    value = environ.get('CONTENT_LENGTH') or ''
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise BodyError(reason='Invalid Content-Length header')
    return int(value)


def _has_body(environ: dict) -> bool:
    length = environ.get('CONTENT_LENGTH') or ''
    return (length not in ('', '0')
            or 'chunked' in environ.get('HTTP_TRANSFER_ENCODING', '').lower())


def read(environ: dict, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes; 413 beyond, 400 when the
    client sent less than its Content-Length announced."""
    length = _declared_length(environ)
    if length is not None and length > limit:
        raise BodyTooLarge(limit=limit)
    stream = environ['wsgi.input']
    try:
        if length is None:
            data = stream.read(limit + 1)
            if len(data) > limit:
                raise BodyTooLarge(limit=limit)
            return data
        data = stream.read(length)
    except OSError as e:
        raise BodyError(reason='the request body could not be read (%s)'
                               % type(e).__name__)
    if len(data) < length:
        raise BodyError(reason='the request body is shorter than its '
                               'Content-Length (%d of %d bytes)'
                               % (len(data), length))
    return data


class BodyGuard:
    """Reads, bounds and checks the body of every request that has one.

    A body over the size limit (413) or shorter than its Content-Length
    (400) is answered here. A JSON body (``application/json``, or no
    media type) is parsed and kept in ``environ[ENVIRON_KEY]``. A body
    that is no valid JSON within the limits, or of another media type (no
    endpoint takes one), is replaced by an empty one and its error kept in
    ``environ[ERROR_KEY]``: the endpoint raises it when it reads the body
    (:func:`parsed`), after its policy check, as it would without this
    guard; endpoints that take no body ignore it.
    """

    def __init__(self, app, limit: int):
        self.app = app
        self._limit = limit

    def __call__(self, environ, start_response):
        try:
            check_request_target(environ)
        except exception.CyborgException as e:
            _log_refusal(environ, e)
            return _fault(start_response, e.code, e.message)
        if not _has_body(environ):
            return self.app(environ, start_response)
        try:
            raw = read(environ, self._limit)
        except exception.CyborgException as e:
            _log_refusal(environ, e)
            return _fault(start_response, e.code, e.message)
        try:
            kind = media_type(environ)
            if kind not in ('', errors.JSON):
                raise exception.UnsupportedMediaType(content_type=kind)
            if raw:
                environ[ENVIRON_KEY] = loads(raw)
        except exception.CyborgException as e:
            _log_refusal(environ, e)
            environ[ERROR_KEY] = e
            raw = b''
        environ['wsgi.input'] = io.BytesIO(raw)
        environ['CONTENT_LENGTH'] = str(len(raw))
        environ.pop('HTTP_TRANSFER_ENCODING', None)
        return self.app(environ, start_response)


def parsed(environ: dict) -> tuple[bool, Any]:
    """(True, the document) when :class:`BodyGuard` parsed the body,
    (False, None) when it did not see the request; raises the error it
    found in the body."""
    error = environ.get(ERROR_KEY)
    if error is not None:
        raise error
    if ENVIRON_KEY in environ:
        return True, environ[ENVIRON_KEY]
    return False, None


def check_request_target(environ: dict) -> None:
    """BodyError unless the path and the query string decode as UTF-8
    (webob would fail decoding them during routing)."""
    try:
        # WSGI gives the raw bytes as latin-1 characters; the server has
        # decoded the path's percent-escapes already.
        path = environ.get('PATH_INFO', '').encode('latin-1')
        path.decode('utf-8')
        query = environ.get('QUERY_STRING', '').encode('latin-1')
        if not query.isascii() or b'%' in query:
            query = urllib.parse.unquote_to_bytes(query.replace(b'+', b' '))
            query.decode('utf-8')
    except UnicodeError:
        raise BodyError(reason='the request path or query string is not '
                               'valid UTF-8')
    if b'\x00' in query or b'\x00' in path:
        raise BodyError(reason='the request path or query string contains '
                               'NUL (%00)')


def _log_refusal(environ: dict, error: exception.CyborgException) -> None:
    LOG.info('Refused %s %s: %s',
             errors.loggable(environ.get('REQUEST_METHOD'), 20),
             errors.loggable(environ.get('PATH_INFO')),
             errors.loggable(error.message))


def _fault(start_response, status: int, message: str):
    body = errors.fault_body(status, message)
    reason = errors.reason(status)
    start_response('%d %s' % (status, reason),
                   [('Content-Type', errors.JSON),
                    ('Content-Length', str(len(body)))])
    return [body]
