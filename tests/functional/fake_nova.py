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

"""A fake Nova that serves only POST /os-server-external-events.

A real HTTP server (threaded, one request per connection) on a free
loopback port, started in this process::

    with FakeNova() as nova:
        client = NovaClient.for_endpoint(nova.url)
        ...
        nova.wait_for(3, timeout=5)

It checks what real Nova checks for this call: compute microversion 2.82
or later (``X-OpenStack-Nova-API-Version: 2.82`` or ``OpenStack-API-Version:
compute 2.82``), an ``X-Auth-Token`` and a well-formed body; and it answers
like Nova: 200 when every event was accepted, 207 with a ``code`` per event
(404: instance not found, 422: instance not on a host) when some were not,
404 when none was (as Nova: "No instances found for any event").
Instances exist unless named with :meth:`FakeNova.set_missing` (or
:meth:`FakeNova.set_unhosted`).

:meth:`FakeNova.down` makes it answer 503 (``refuse=True``: close the
listening socket, so connections are refused) until :meth:`FakeNova.up`.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any

import pytest

from cyborg.api import wsgi_server

LOOPBACK = '127.0.0.1'
PREFIX = '/v2.1'
EVENTS_PATH = PREFIX + '/os-server-external-events'
MIN_MICROVERSION = (2, 82)
EVENT_NAMES = ('network-changed', 'network-vif-plugged',
               'network-vif-unplugged', 'network-vif-deleted',
               'volume-extended', 'power-update',
               'accelerator-request-bound')
EVENT_STATUSES = ('failed', 'completed', 'in-progress')


def _microversion(environ) -> tuple[int, int] | None:
    value = environ.get('HTTP_X_OPENSTACK_NOVA_API_VERSION')
    if value is None:
        header = environ.get('HTTP_OPENSTACK_API_VERSION', '')
        parts = header.split()
        if len(parts) == 2 and parts[0].lower() == 'compute':
            value = parts[1]
    try:
        major, minor = (value or '').split('.')
        return int(major), int(minor)
    except ValueError:
        return None


def _valid_event(event: Any) -> bool:
    return (isinstance(event, dict)
            and event.get('name') in EVENT_NAMES
            and isinstance(event.get('server_uuid'), str)
            and event.get('status', 'completed') in EVENT_STATUSES
            and isinstance(event.get('tag', ''), str))


class FakeNova(wsgi_server.LoopbackApp):
    """See the module docstring.

    ``events`` lists every event received (also refused ones), in arrival
    order, each a copy of the posted event plus ``code`` (what Nova
    answered for it) and ``arrived`` (``time.monotonic()``). ``requests``
    lists every request that reached the app: ``status``, ``headers``,
    ``events`` and ``arrived``.
    """

    def __init__(self, port: int = 0):
        super().__init__(port)
        self._lock = threading.Condition()
        self.events: list[dict[str, Any]] = []
        # tag -> arrival of its latest accepted event (wait_tags' index).
        self._accepted_at: dict[str, float] = {}
        self.requests: list[dict[str, Any]] = []
        self.missing: set[str] = set()
        self.unhosted: set[str] = set()
        self.delay = 0.0
        self._answer_503 = False

    # Life cycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        """The compute endpoint, e.g. ``http://127.0.0.1:PORT/v2.1``."""
        return 'http://%s:%d%s' % (LOOPBACK, self._port, PREFIX)

    def down(self, refuse: bool = False) -> None:
        """Answer 503 from now on, or (``refuse``) refuse connections."""
        with self._lock:
            self._answer_503 = not refuse
        if refuse:
            self.stop()

    def up(self) -> None:
        """Accept events again (on the same port)."""
        with self._lock:
            self._answer_503 = False
        self.start()

    # Behaviour and observations ---------------------------------------------

    def set_missing(self, *server_uuids: str) -> None:
        """These instances do not exist (per-event code 404)."""
        with self._lock:
            self.missing.update(server_uuids)

    def set_unhosted(self, *server_uuids: str) -> None:
        """These instances are not on a host (per-event code 422)."""
        with self._lock:
            self.unhosted.update(server_uuids)

    def accepted(self) -> list[dict[str, Any]]:
        """The events answered with code 200."""
        with self._lock:
            return [e for e in self.events if e['code'] == 200]

    def tag_counts(self, accepted_only: bool = True) -> collections.Counter:
        """How many times each tag was received (accepted only, default)."""
        with self._lock:
            return collections.Counter(
                e['tag'] for e in self.events
                if not accepted_only or e['code'] == 200)

    def wait_for(self, n: int, timeout: float = 10.0,
                 accepted_only: bool = False) -> list[dict[str, Any]]:
        """Wait until ``n`` events arrived; a copy of ``events``.

        Raises AssertionError after ``timeout`` seconds.
        """
        def count():
            if accepted_only:
                return sum(1 for e in self.events if e['code'] == 200)
            return len(self.events)

        with self._lock:
            if not self._lock.wait_for(lambda: count() >= n, timeout):
                raise AssertionError(
                    'FakeNova got %d event(s) after %ss, expected %d'
                    % (count(), timeout, n))
            return list(self.events)

    def wait_tags(self, tags, timeout: float = 10.0) -> dict[str, float]:
        """Wait until an accepted event arrived for every tag in ``tags``;
        their arrival times (``time.monotonic()``)."""
        wanted = set(tags)

        def arrivals():
            return {tag: self._accepted_at[tag] for tag in wanted
                    if tag in self._accepted_at}

        with self._lock:
            if not self._lock.wait_for(
                    lambda: len(arrivals()) == len(wanted), timeout):
                raise AssertionError('FakeNova got events for %d of %d tags '
                                     'after %ss' % (len(arrivals()),
                                                    len(wanted), timeout))
            return arrivals()

    # The WSGI application ----------------------------------------------------

    def _app(self, environ, start_response):
        arrived = time.monotonic()
        if self.delay:
            time.sleep(self.delay)
        status, body = self._handle(environ, arrived)
        payload = json.dumps(body).encode()
        start_response('%d %s' % (status, _REASONS.get(status, 'Status')), [
            ('Content-Type', 'application/json'),
            ('Content-Length', str(len(payload))),
            ('X-OpenStack-Nova-API-Version', '2.82'),
            ('OpenStack-API-Version', 'compute 2.82')])
        return [payload]

    def _handle(self, environ, arrived: float) -> tuple[int, Any]:
        headers = {key[5:].replace('_', '-').lower(): value
                   for key, value in environ.items()
                   if key.startswith('HTTP_')}
        request: dict[str, Any] = {'headers': headers, 'arrived': arrived,
                                   'events': [], 'status': None}
        with self._lock:
            self.requests.append(request)
            answer_503 = self._answer_503
        status, body = self._respond(environ, request, answer_503)
        request['status'] = status
        return status, body

    def _respond(self, environ, request, answer_503: bool
                 ) -> tuple[int, Any]:
        if answer_503:
            return 503, _fault(503, 'computeFault', 'Nova is down (fake)')
        if environ['PATH_INFO'] != EVENTS_PATH:
            return 404, {'message': 'no such path: %s' % environ['PATH_INFO']}
        if environ['REQUEST_METHOD'] != 'POST':
            return 405, _fault(405, 'badMethod', 'Method not allowed')
        if not request['headers'].get('x-auth-token'):
            return 401, {'error': {'code': 401, 'message': 'no token'}}
        version = _microversion(environ)
        if version is None or version < MIN_MICROVERSION:
            return 400, _fault(400, 'badRequest',
                               'accelerator-request-bound needs compute '
                               'microversion 2.82, got %r' % (version,))
        try:
            length = int(environ.get('CONTENT_LENGTH') or 0)
            body = json.loads(environ['wsgi.input'].read(length))
            events = body['events']
        except (ValueError, KeyError, TypeError) as e:
            return 400, _fault(400, 'badRequest', 'bad body: %s' % e)
        if (not isinstance(events, list) or not events
                or not all(_valid_event(e) for e in events)):
            return 400, _fault(400, 'badRequest', 'invalid events')
        request['events'] = events
        answers = []
        with self._lock:
            for event in events:
                server = event['server_uuid']
                if server in self.missing:
                    code = 404
                elif server in self.unhosted:
                    code = 422
                else:
                    code = 200
                answer = dict(event, code=code)
                answer.setdefault('status', 'completed')
                answers.append(answer)
                self.events.append(dict(answer, arrived=request['arrived']))
                if code == 200:
                    self._accepted_at[event['tag']] = request['arrived']
            self._lock.notify_all()
        codes = {a['code'] for a in answers}
        if codes == {200}:
            return 200, {'events': answers}
        if 200 not in codes:
            # Like Nova: no event accepted (even if only unhosted) is 404.
            return 404, _fault(404, 'itemNotFound',
                               'No instances found for any event')
        return 207, {'events': answers}


_REASONS = {200: 'OK', 207: 'Multi-Status', 400: 'Bad Request',
            401: 'Unauthorized', 404: 'Not Found',
            405: 'Method Not Allowed', 503: 'Service Unavailable'}


def _fault(code: int, kind: str, message: str) -> dict[str, Any]:
    return {kind: {'code': code, 'message': message}}


@pytest.fixture
def fake_nova():
    """A started :class:`FakeNova`, stopped after the test."""
    with FakeNova() as nova:
        yield nova
