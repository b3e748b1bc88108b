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

"""Slow clients cannot hold the real servers: cyborg-api and
cyborg-all-in-one, each a process of its own with ``[api]
client_timeout`` and ``max_connections`` set low.

300 half-sent requests held every thread of these servers for as long as
the clients liked; now each server answers the connections beyond its
limit 503 at once, cuts the rest off after the timeout, and serves
normally afterwards.
"""

import os
import socket
import time

import pytest
import requests

from tests.functional import conftest
from tests.functional import servers

CLIENT_TIMEOUT = 1.0
MAX_CONNECTIONS = 10
SLOW_CLIENTS = 60


def _api(directory: str, port: int) -> servers.CyborgProcess:
    # Never read (the version documents need no database), but the API
    # refuses to start on a database it cannot open.
    os.makedirs(directory, exist_ok=True)
    database = os.path.join(directory, 'cyborg.sqlite')
    open(database, 'a').close()
    return servers.CyborgProcess('cyborg-api', {
        'DEFAULT': {'host': 'slow-clients',
                    # Never used: the version documents need no conductor.
                    'transport_url': 'rabbit://guest:guest@127.0.0.1:9/'},
        'database': {'connection': 'sqlite:///' + database},
        'api': {'auth_strategy': 'noauth', 'host_ip': servers.LOOPBACK,
                'port': port, 'client_timeout': CLIENT_TIMEOUT,
                'max_connections': MAX_CONNECTIONS},
    }, directory)


def _allinone(directory: str, port: int) -> servers.CyborgProcess:
    return servers.CyborgProcess(
        'cyborg-all-in-one', {
            'DEFAULT': {'host': 'slow-clients-aio'},
            'api': {'client_timeout': CLIENT_TIMEOUT,
                    'max_connections': MAX_CONNECTIONS}},
        directory, args=['--host', servers.LOOPBACK, '--port', str(port),
                         '--placement-port', '0',
                         '--state-dir', os.path.join(directory, 'state')])


@pytest.fixture(params=['cyborg-api', 'cyborg-all-in-one'])
def server(request, work_dir):
    directory = os.path.join(work_dir, 'slow-' + request.param)
    port = servers.free_port()
    make = _api if request.param == 'cyborg-api' else _allinone
    process = make(directory, port)
    try:
        process.start()
        url = 'http://%s:%d' % (servers.LOOPBACK, port)
        process.wait_http(url + '/', conftest.START_TIMEOUT)
        yield url, port, process
    finally:
        process.stop()


def _half_request(port: int) -> socket.socket:
    connection = socket.create_connection((servers.LOOPBACK, port),
                                          timeout=10)
    connection.sendall(b'GET /v2 HTTP/1.1\r\nHost: x\r\nX-Slow: ')
    return connection


def _answer(connection: socket.socket) -> bytes:
    """What the server sent before it closed the connection."""
    chunks = []
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)


def test_slow_clients_are_refused_then_cut_off(server):
    url, port, process = server
    started = time.monotonic()
    connections = [_half_request(port) for _ in range(SLOW_CLIENTS)]
    try:
        answers = [_answer(c) for c in connections]
        elapsed = time.monotonic() - started
    finally:
        for connection in connections:
            connection.close()
    busy = [a for a in answers if a.startswith(b'HTTP/1.0 503')]
    cut = [a for a in answers if a == b'']
    # Every connection ended: the limit's refusals at once, the rest
    # when their time was up (the watchdog looks twice a second).
    assert len(busy) + len(cut) == SLOW_CLIENTS, answers
    assert len(busy) >= SLOW_CLIENTS - MAX_CONNECTIONS
    assert elapsed < CLIENT_TIMEOUT + 5, elapsed
    assert process.running()
    response = requests.get(url + '/v2', timeout=10)
    assert response.status_code == 200
    # No header names the software or its version.
    assert 'Server' not in response.headers


def test_a_trickled_body_is_cut_off(server):
    """Each byte of the body within the timeout of a read, the whole
    body not within the client timeout: the server stops waiting."""
    url, port, process = server
    connection = socket.create_connection((servers.LOOPBACK, port),
                                          timeout=10)
    try:
        connection.sendall(b'POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
                           b'Content-Type: application/json\r\n'
                           b'Content-Length: 200\r\n\r\n')
        started = time.monotonic()
        for _ in range(200):
            try:
                connection.sendall(b' ')
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - started > CLIENT_TIMEOUT + 5:
                break
        try:
            _answer(connection)
        except OSError:
            pass
    finally:
        connection.close()
    assert time.monotonic() - started < CLIENT_TIMEOUT + 4
    assert process.running()
    assert requests.get(url + '/v2', timeout=10).status_code == 200


@pytest.mark.parametrize('head,status', [
    (b'GET /v2/' + b'a' * 70000 + b' HTTP/1.1\r\nHost: x\r\n\r\n', 414),
    (b'GET /v2 HTTP/1.1\r\nX-Big: ' + b'a' * 70000 + b'\r\n\r\n', 431),
    (b'GET /v2 HTTP/9.9\r\n\r\n', 400),
])
def test_the_servers_own_refusals_are_api_faults(server, head, status):
    url, port, process = server
    connection = socket.create_connection((servers.LOOPBACK, port),
                                          timeout=10)
    try:
        connection.sendall(head)
        answer = _answer(connection)
    finally:
        connection.close()
    head, _, body = answer.partition(b'\r\n\r\n')
    assert head.startswith(b'HTTP/1.0 %d ' % status), head
    assert b'\r\nContent-Type: application/json' in head
    assert b'\r\nx-openstack-request-id: req-' in head
    assert b'\r\nOpenStack-API-Version: accelerator 2.0' in head
    assert b'\r\nServer:' not in head
    assert b'"faultcode\\": \\"Client\\"' in body


def test_links_never_follow_the_host_header(server):
    url, port, process = server
    response = requests.get(url + '/v2', timeout=10,
                            headers={'Host': 'evil.example.com'})
    assert response.status_code == 200
    assert response.json()['links'][0]['href'] == url + '/v2/'
