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

"""The standalone servers' limits: slow clients and too many
connections cannot hold them."""

import json
import logging
import socket
import time

import pytest

from cyborg.api import hooks
from cyborg.api import wsgi_server
from tests.unit import fakes


def _app(environ, start_response):
    body = environ['wsgi.input'].read(int(environ.get('CONTENT_LENGTH')
                                          or 0))
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'ok:' + body]


def _links_app(environ, start_response):
    """The server's name and port, as the API's links are built."""
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [hooks.server_url(environ).encode()]


@pytest.fixture
def server():
    server = wsgi_server.WSGIServer(_app, '127.0.0.1', 0,
                                    client_timeout=0.6, max_connections=3)
    server.start()
    yield server
    server.stop()


def _connect(server) -> socket.socket:
    connection = socket.create_connection(('127.0.0.1', server.port),
                                          timeout=10)
    return connection


def _response(connection) -> bytes:
    chunks = []
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)


def _get(server) -> bytes:
    with _connect(server) as connection:
        connection.sendall(b'GET / HTTP/1.0\r\nHost: x\r\n\r\n')
        return _response(connection)


def test_a_request_is_served_without_naming_the_software(server):
    response = _get(server)
    head, _, body = response.partition(b'\r\n\r\n')
    assert head.startswith(b'HTTP/1.0 200') and body == b'ok:'
    assert b'\r\nserver:' not in head.lower()
    assert b'python' not in head.lower()


def test_a_half_sent_header_is_cut_off_after_the_timeout(server):
    with _connect(server) as connection:
        connection.sendall(b'GET / HTTP/1.0\r\nHost: x\r\n')
        started = time.monotonic()
        assert _response(connection) == b''
        assert time.monotonic() - started < 3


def test_a_header_trickled_byte_by_byte_is_cut_off(server):
    with _connect(server) as connection:
        started = time.monotonic()
        closed = False
        for byte in b'GET / HTTP/1.0\r\nX-Slow: ' + b'a' * 100:
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            if time.monotonic() - started > 5:
                break
        if not closed:
            connection.settimeout(3)
            assert _response(connection) == b''
        # Each byte came well within the timeout; the whole head did not.
        assert time.monotonic() - started < 4


def test_a_body_shorter_than_announced_times_out(server):
    with _connect(server) as connection:
        connection.sendall(b'POST / HTTP/1.0\r\nContent-Length: 10\r\n\r\n'
                           b'abc')
        started = time.monotonic()
        _response(connection)
        assert time.monotonic() - started < 3


def test_a_body_trickled_byte_by_byte_is_cut_off(server):
    with _connect(server) as connection:
        connection.sendall(b'POST / HTTP/1.0\r\nContent-Length: 100\r\n'
                           b'\r\n')
        started = time.monotonic()
        for _ in range(100):
            try:
                connection.sendall(b'a')
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - started > 5:
                break
        connection.settimeout(3)
        try:
            response = _response(connection)
        except OSError:
            response = b''
        # Each byte came well within the timeout; the whole body did not.
        assert time.monotonic() - started < 4
        assert b'ok:' + b'a' * 100 not in response


def test_connections_beyond_the_limit_get_503_then_slots_free(server):
    idle = [_connect(server) for _ in range(3)]
    try:
        time.sleep(0.1)
        response = _get(server)
        head, _, body = response.partition(b'\r\n\r\n')
        assert head.startswith(b'HTTP/1.0 503')
        assert b'Retry-After: 1' in head
        assert b'x-openstack-request-id: req-' in head
        assert b'OpenStack-API-Maximum-Version: ' in head
        fault = json.loads(json.loads(body)['error_message'])
        assert fault['faultstring'] == 'Too many connections; retry later.'
    finally:
        for connection in idle:
            connection.close()
    deadline = time.monotonic() + 5
    while _get(server).startswith(b'HTTP/1.0 503'):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _get(server).startswith(b'HTTP/1.0 200')


@pytest.fixture
def records():
    handler = fakes.LogRecords()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize('request_bytes,status', [
    (b'GET /v2/' + b'a' * 70000 + b' HTTP/1.1\r\nHost: x\r\n\r\n', 414),
    (b'GET / HTTP/1.1\r\nX-Big: ' + b'a' * 70000 + b'\r\n\r\n', 431),
    (b'GET / HTTP/1.1\r\n' + b''.join(b'X-%d: a\r\n' % i
                                      for i in range(150)) + b'\r\n', 431),
    (b'GARBAGE\r\n\r\n', 400),
    (b'GARBAGE GARBAGE GARBAGE GARBAGE\r\n\r\n', 400),
    (b'GET / HTTP/9.9\r\n\r\n', 400),
    (b'GET / HTTP/2.0\r\n\r\n', 400),
    (b'GET / HTTP/1.x\r\n\r\n', 400),
    (b'GET / FOO\r\n\r\n', 400),
])
def test_the_servers_own_refusals_are_api_faults(server, records,
                                                 request_bytes, status):
    """Requests the server refuses before any application sees them get
    the API's fault body, a request id and the version headers, with one
    INFO line in the log: never an HTML page, a 5xx or a Server header."""
    with _connect(server) as connection:
        connection.sendall(request_bytes)
        response = _response(connection)
    head, _, body = response.partition(b'\r\n\r\n')
    lines = head.decode('latin-1').split('\r\n')
    assert lines[0].startswith('HTTP/1.0 %d ' % status), lines[0]
    headers = dict(line.split(': ', 1) for line in lines[1:])
    assert headers['Content-Type'] == 'application/json'
    assert int(headers['Content-Length']) == len(body)
    assert headers['x-openstack-request-id'].startswith('req-')
    assert headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert headers['OpenStack-API-Minimum-Version'] == '2.0'
    assert 'OpenStack-API-Maximum-Version' in headers
    assert 'Server' not in headers
    fault = json.loads(json.loads(body)['error_message'])
    assert fault['faultcode'] == 'Client' and fault['faultstring']
    assert len(fault['faultstring']) <= 200
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.INFO
    assert records[0].exc_info is None


def test_links_name_the_server_never_the_host_header():
    server = wsgi_server.WSGIServer(_links_app, '127.0.0.1', 0)
    server.start()
    try:
        with _connect(server) as connection:
            connection.sendall(b'GET / HTTP/1.0\r\n'
                               b'Host: evil.example.com\r\n\r\n')
            body = _response(connection).partition(b'\r\n\r\n')[2]
    finally:
        server.stop()
    assert body == b'http://127.0.0.1:%d' % server.port


class _Hello(wsgi_server.LoopbackApp):
    def _app(self, environ, start_response):
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'hello']


def _get_root(port: int) -> bytes:
    with socket.create_connection(('127.0.0.1', port), timeout=5) as conn:
        conn.sendall(b'GET / HTTP/1.0\r\nHost: x\r\n\r\n')
        return conn.makefile('rb').read()


def test_loopback_app_keeps_its_port_across_stop_and_start():
    with _Hello() as app:
        port = app.port
        assert port != 0
        assert _get_root(port).endswith(b'hello')
        assert app.start() is app  # already listening: nothing changes
        app.stop()
        with pytest.raises(OSError):
            _get_root(port)
        app.start()
        assert app.port == port
        assert _get_root(port).endswith(b'hello')
    with pytest.raises(OSError):
        _get_root(port)
