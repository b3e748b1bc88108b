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

"""Nova's accelerator cycle as a load, for outage tests.

:class:`NovaLoad` runs Nova's cycle for one new instance after another
in a few client threads against a :class:`nova_flow.NovaFlowDeployment`
until stopped::

    GET    /v2/device_profiles?name=P      (read)
    POST   /v2/accelerator_requests        (write: create one ARQ)
    PATCH  /v2/accelerator_requests        (write: bind; 202)
    GET    /v2/accelerator_requests?instance=I   until resolved (read)
    DELETE /v2/accelerator_requests?arqs=U       (write; 204)

It records every answer. A step answered 503 fails the cycle as it
fails Nova's build; the cycle's ARQ, when one was created, is deleted
later (:meth:`NovaLoad.finish`), as Nova deletes the ARQs of a failed
build. :class:`LoadResult` says what an outage may not cause: an answer
other than the flow's own and 503, a 503 without ``Retry-After`` or
later than the bound, an ARQ that never resolved after its bind was
accepted.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from typing import Any
import uuid as uuid_lib

import requests

from tests.functional import nova_flow

#: What each step answers when it works.
OK = {'profile': 200, 'create': 201, 'bind': 202, 'poll': 200,
      'delete': 204}
READS = ('profile', 'poll')
REQUEST_TIMEOUT = 60


@dataclasses.dataclass
class Answer:
    step: str
    status: int  # 0: no HTTP answer (connection error)
    elapsed: float
    at: float  # time.monotonic() when sent
    retry_after: str | None
    text: str


@dataclasses.dataclass
class LoadResult:
    answers: list[Answer]
    cycles_ok: int
    cycles_failed: int
    #: ARQs whose bind was accepted (202) and that did not resolve in
    #: time, by uuid.
    stuck: list[str]
    #: ARQs whose bind was accepted (202): Nova hears of each once.
    bound: list[str]
    #: ARQs whose bind answered 503: Nova hears of each at most once.
    bind_unknown: list[str]
    #: Every ARQ whose creation was answered 201.
    created: list[str] = dataclasses.field(default_factory=list)

    def count(self, status: int | None = None, steps=None, since=None,
              until=None) -> int:
        return len(self.select(status, steps, since, until))

    def select(self, status: int | None = None, steps=None, since=None,
               until=None) -> list[Answer]:
        return [a for a in self.answers
                if (status is None or a.status == status)
                and (steps is None or a.step in steps)
                and (since is None or a.at >= since)
                and (until is None or a.at < until)]

    def unexpected(self) -> list[Answer]:
        """Answers that are neither the step's success nor a 503."""
        return [a for a in self.answers
                if a.status not in (OK[a.step], 503)]

    def bad_503s(self, bound: float) -> list[Answer]:
        """503s without ``Retry-After`` or slower than ``bound`` s."""
        return [a for a in self.answers if a.status == 503
                and (not a.retry_after or a.elapsed > bound)]

    def summary(self) -> dict[str, Any]:
        statuses = collections.Counter('%s %s' % (a.step, a.status)
                                       for a in self.answers)
        return {'cycles_ok': self.cycles_ok,
                'cycles_failed': self.cycles_failed,
                'stuck': len(self.stuck), 'answers': dict(statuses),
                'max_503_s': max((a.elapsed for a in self.answers
                                  if a.status == 503), default=0.0)}


class NovaLoad:
    """``clients`` threads repeating Nova's cycle on ``flow``'s devices
    of ``host`` with device profile ``profile``; a context manager
    (stops the threads on exit, without cleaning up)."""

    def __init__(self, flow: nova_flow.NovaFlowDeployment, profile: str,
                 host: str, clients: int = 4, resolve_timeout: float = 30,
                 pause: float = 0.0):
        self.flow = flow
        self.profile = profile
        self.host = host
        self.clients = clients
        self.resolve_timeout = resolve_timeout
        self.pause = pause
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._answers: list[Answer] = []
        self._threads: list[threading.Thread] = []
        self._rps = itertools.cycle(d.rp_uuid for d in flow.devices[host])
        self._ok = 0
        self._failed = 0
        self._stuck: list[str] = []
        self._bound: list[str] = []
        self._bind_unknown: list[str] = []
        self._created: list[str] = []
        #: ARQs to delete at the end (their cycle failed).
        self._leftover: list[str] = []
        self._session = threading.local()

    # Life cycle -----------------------------------------------------------

    def start(self) -> NovaLoad:
        for number in range(self.clients):
            thread = threading.Thread(target=self._run, daemon=True,
                                      name='nova-load-%d' % number)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT + self.resolve_timeout + 10)
        self._threads = []

    def __enter__(self) -> NovaLoad:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def wait_cycles(self, cycles: int, timeout: float = 60) -> None:
        """Until ``cycles`` more cycles completed."""
        target = self._ok + cycles
        nova_flow.wait_until(lambda: self._ok >= target, timeout,
                             '%d more Nova cycles' % cycles)

    def finish(self, timeout: float = 60) -> LoadResult:
        """Stop, delete the ARQs of failed cycles (retrying while the
        service still answers 503), and say what happened."""
        self.stop()
        leftover = list(self._leftover)
        last: list[str] = []

        def deleted():
            # One by one: a delete by uuids deletes none when one is gone
            # (404), and a delete answered 503 may have been done.
            while leftover:
                response = self.flow.request(
                    'DELETE', '/v2/accelerator_requests', service=True,
                    params={'arqs': leftover[0]}, timeout=30)
                last[:] = ['%s %s' % (response.status_code,
                                      response.text[:300])]
                if response.status_code not in (204, 404):
                    return False
                leftover.pop(0)
            return True
        try:
            nova_flow.wait_until(deleted, timeout, 'the ARQs of failed '
                                 'cycles deleted', interval=1)
        except AssertionError as e:
            raise AssertionError('%s; last answer: %s; left: %s\n%s' % (
                e, last, leftover, self.flow.logs(60)))
        return LoadResult(list(self._answers), self._ok, self._failed,
                          list(self._stuck), list(self._bound),
                          list(self._bind_unknown), list(self._created))

    # One client -------------------------------------------------------------

    def _http(self) -> requests.Session:
        session = getattr(self._session, 'session', None)
        if session is None:
            session = self._session.session = requests.Session()
        return session

    def _call(self, step: str, method: str, path: str, **kwargs
              ) -> requests.Response | None:
        headers = dict(kwargs.pop('headers', {}))
        if step in ('bind', 'delete'):
            headers.update(nova_flow.SERVICE)
        started = time.monotonic()
        try:
            response = self._http().request(
                method, self.flow.url + path, headers=headers,
                timeout=REQUEST_TIMEOUT, **kwargs)
        except requests.RequestException as e:
            self._record(Answer(step, 0, time.monotonic() - started,
                                started, None, repr(e)))
            return None
        self._record(Answer(step, response.status_code,
                            time.monotonic() - started, started,
                            response.headers.get('Retry-After'),
                            response.text[:300]))
        return response

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self._answers.append(answer)

    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self._cycle()
            with self._lock:
                if ok:
                    self._ok += 1
                else:
                    self._failed += 1
            if not ok or self.pause:
                # A failed build is not retried at once by Nova either.
                self._stop.wait(max(self.pause, 0.5 if not ok else 0))

    def _cycle(self) -> bool:
        response = self._call('profile', 'GET', '/v2/device_profiles',
                              params={'name': self.profile})
        if response is None or response.status_code != 200:
            return False
        response = self._call('create', 'POST', '/v2/accelerator_requests',
                              json={'device_profile_name': self.profile})
        if response is None or response.status_code != 201:
            return False
        (arq,) = response.json()['arqs']
        uuid = arq['uuid']
        with self._lock:
            self._created.append(uuid)
        instance = str(uuid_lib.uuid4())
        with self._lock:
            rp = next(self._rps)
        response = self._call('bind', 'PATCH', '/v2/accelerator_requests',
                              json={uuid: [
                                  {'op': 'add', 'path': '/hostname',
                                   'value': self.host},
                                  {'op': 'add', 'path': '/device_rp_uuid',
                                   'value': rp},
                                  {'op': 'add', 'path': '/instance_uuid',
                                   'value': instance}]})
        if response is None or response.status_code != 202:
            with self._lock:
                if response is not None and response.status_code == 503:
                    self._bind_unknown.append(uuid)
                self._leftover.append(uuid)
            return False
        with self._lock:
            self._bound.append(uuid)
        if not self._wait_resolved(uuid, instance):
            with self._lock:
                self._leftover.append(uuid)
            return False
        response = self._call('delete', 'DELETE', '/v2/accelerator_requests',
                              params={'arqs': uuid})
        if response is None or response.status_code != 204:
            with self._lock:
                self._leftover.append(uuid)
            return False
        return True

    def _wait_resolved(self, uuid: str, instance: str) -> bool:
        deadline = time.monotonic() + self.resolve_timeout
        while time.monotonic() < deadline:
            response = self._call('poll', 'GET', '/v2/accelerator_requests',
                                  params={'instance': instance})
            if response is not None and response.status_code == 200:
                states = [a['state'] for a in response.json()['arqs']]
                if states and all(s in nova_flow.RESOLVED for s in states):
                    return True
            time.sleep(0.1)
        with self._lock:
            self._stuck.append(uuid)
        return False


def database_state(flow: nova_flow.NovaFlowDeployment) -> dict[str, Any]:
    """What an outage must leave as it found it, once the load's ARQs
    are gone: the ARQs, handles in use, undelivered events, devices,
    deployables, handles and their providers."""
    return {
        'arqs': flow.db_rows('SELECT count(*) FROM '
                             'extended_accelerator_requests')[0][0],
        'handles_in_use': flow.db_rows(
            'SELECT count(*) FROM attach_handles WHERE in_use')[0][0],
        'unsent_events': flow.db_rows(
            'SELECT count(*) FROM nova_events WHERE sent_at IS NULL')[0][0],
        'devices': sorted(tuple(r) for r in flow.db_rows(
            'SELECT hostname, address FROM devices')),
        'providers': sorted(tuple(r) for r in flow.db_rows(
            'SELECT name, rp_uuid FROM deployables')),
        'handles': flow.db_rows('SELECT count(*) FROM attach_handles')[0][0],
    }


def leftovers(flow: nova_flow.NovaFlowDeployment) -> dict[str, Any]:
    """The ARQs and the handles in use left in the database, for a
    failure's message."""
    return {
        'arqs': [dict(r._mapping) for r in flow.db_rows(
            'SELECT uuid, state, instance_uuid, attach_handle_id, '
            'bind_owner, created_at, updated_at FROM '
            'extended_accelerator_requests')],
        'handles_in_use': [dict(r._mapping) for r in flow.db_rows(
            'SELECT h.id, h.updated_at, a.uuid AS holder FROM '
            'attach_handles h LEFT JOIN extended_accelerator_requests a '
            'ON a.attach_handle_id = h.id WHERE h.in_use')],
    }


def events_once(flow: nova_flow.NovaFlowDeployment, result: LoadResult,
                settle: float = 0.0) -> dict[str, int]:
    """ARQs Nova did not hear of exactly once (bind accepted) or heard
    of more than once (bind answered 503), with their counts."""
    if settle:
        time.sleep(settle)
    counts = flow.nova.tag_counts()
    wrong = {u: counts[u] for u in result.bound if counts[u] != 1}
    wrong.update({u: counts[u] for u in result.bind_unknown
                  if counts[u] > 1})
    return wrong
