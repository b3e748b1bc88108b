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

"""The guarded body step: reading, bounding and parsing request bodies."""

import io
import json

import pytest

from cyborg.api import request_body
from cyborg.common import exception


def _nested(depth: int) -> bytes:
    return b'[' * depth + b']' * depth


@pytest.mark.parametrize('raw', [
    _nested(request_body.MAX_DEPTH + 1),
    _nested(100000),
    b'{"a": ' * 40 + b'1' + b'}' * 40,
    b'"\\ud800"',
    b'{"\\udfff": 1}',
    b'[' + str(2 ** 63).encode() + b']',
    b'[-' + str(2 ** 63 + 1).encode() + b']',
    b'1' * 5000,
    b'1e400',
    b'NaN',
    b'[Infinity]',
    b'"\xff"',
])
def test_hostile_documents_are_refused(raw):
    with pytest.raises(exception.Invalid):
        request_body.loads(raw)


@pytest.mark.parametrize('document', [
    {'a': [{'b': 'c'}]},
    [2 ** 63 - 1, -2 ** 63, 1.5, 1e308, True, None, ''],
    json.loads(_nested(request_body.MAX_DEPTH)),
    'caf\u00e9 \U0001f600',
])
def test_documents_within_the_limits_are_parsed(document):
    raw = json.dumps(document).encode()
    assert request_body.loads(raw) == document


def test_invalid_json_is_invalid_json():
    with pytest.raises(exception.InvalidJSON):
        request_body.loads(b'{not json')


def _environ(body: bytes, length: str | None = None, **extra) -> dict:
    environ = {'REQUEST_METHOD': 'POST', 'PATH_INFO': '/v2/x',
               'wsgi.input': io.BytesIO(body),
               'CONTENT_TYPE': 'application/json'}
    environ['CONTENT_LENGTH'] = str(len(body)) if length is None else length
    environ.update(extra)
    return environ


def test_read_refuses_a_body_shorter_than_its_length():
    with pytest.raises(request_body.BodyError, match='shorter'):
        request_body.read(_environ(b'{}', length='10'), 100)


def test_read_refuses_a_declared_length_over_the_limit_unread():
    environ = _environ(b'x' * 10, length='101')
    with pytest.raises(request_body.BodyTooLarge):
        request_body.read(environ, 100)
    assert environ['wsgi.input'].tell() == 0


def test_read_bounds_a_body_of_unknown_length():
    environ = _environ(b'x' * 101, length='',
                       HTTP_TRANSFER_ENCODING='chunked')
    with pytest.raises(request_body.BodyTooLarge):
        request_body.read(environ, 100)
    environ = _environ(b'x' * 100, length='',
                       HTTP_TRANSFER_ENCODING='chunked')
    assert request_body.read(environ, 100) == b'x' * 100


@pytest.mark.parametrize('length', ['-1', '1e3', '\u0661', '9' * 30])
def test_read_refuses_a_bad_content_length(length):
    with pytest.raises(request_body.BodyError):
        request_body.read(_environ(b'{}', length=length), 100)


class _Recorder:
    def __init__(self):
        self.environ = None

    def __call__(self, environ, start_response):
        self.environ = environ
        start_response('200 OK', [])
        return [environ['wsgi.input'].read()]


def _call(guard, environ):
    statuses = []
    body = b''.join(guard(environ, lambda s, h, e=None: statuses.append(s)))
    return statuses[0], body


def test_guard_keeps_the_parsed_body_and_the_bytes():
    app = _Recorder()
    status, body = _call(request_body.BodyGuard(app, 100),
                         _environ(b'{"a": 1}'))
    assert status == '200 OK' and body == b'{"a": 1}'
    assert app.environ[request_body.ENVIRON_KEY] == {'a': 1}
    assert request_body.parsed(app.environ) == (True, {'a': 1})


def test_guard_defers_a_bad_document_to_the_endpoint():
    app = _Recorder()
    status, body = _call(request_body.BodyGuard(app, 1000),
                         _environ(_nested(50)))
    # The application sees no body: nothing can parse the hostile one.
    assert status == '200 OK' and body == b''
    with pytest.raises(request_body.BodyError, match='nesting'):
        request_body.parsed(app.environ)


def test_guard_defers_another_media_type():
    app = _Recorder()
    _call(request_body.BodyGuard(app, 1000),
          _environ(b'a=b', CONTENT_TYPE='application/x-www-form-urlencoded'))
    with pytest.raises(exception.UnsupportedMediaType):
        request_body.parsed(app.environ)


@pytest.mark.parametrize('environ,status', [
    (_environ(b'{}', length='9'), '400 Bad Request'),
    (_environ(b'[]' * 60), '413 Request Entity Too Large'),
])
def test_guard_answers_what_it_cannot_read(environ, status):
    app = _Recorder()
    answer, body = _call(request_body.BodyGuard(app, 100), environ)
    assert answer == status
    assert app.environ is None
    fault = json.loads(json.loads(body)['error_message'])
    assert fault['faultcode'] == 'Client'


def test_guard_passes_requests_without_a_body():
    app = _Recorder()
    environ = _environ(b'', length='')
    _call(request_body.BodyGuard(app, 100), environ)
    assert request_body.parsed(app.environ) == (False, None)


@pytest.mark.parametrize('query', ['a=%FF', 'a=%ED%A0%80', 'a=\u0100',
                                   'a=%C3'])
def test_a_query_string_that_is_no_utf8_is_refused(query):
    with pytest.raises(request_body.BodyError, match='query string'):
        request_body.check_request_target({'QUERY_STRING': query})


@pytest.mark.parametrize('path', ['/v2/\xff', '/v2/\xed\xa0\x80',
                                  '/v2/\u0100'])
def test_a_path_that_is_no_utf8_is_refused(path):
    with pytest.raises(request_body.BodyError, match='path'):
        request_body.check_request_target({'PATH_INFO': path})


@pytest.mark.parametrize('query', ['', 'a=b&c=d', 'a=%C3%A9', 'a=\xc3\xa9',
                                   'a=%2B+b'])
def test_a_utf8_query_string_passes(query):
    request_body.check_request_target({'QUERY_STRING': query,
                                       'PATH_INFO': '/v2/caf\xc3\xa9'})
