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


"""Periodic tasks on futurist's periodics and the RPC service's stop
(cyborg.common.service)."""

import logging
import subprocess
import sys
import threading
import time

from cyborg.common import rpc
from cyborg.common import service
from tests.unit import fakes


def _stopped(task: service.PeriodicTask) -> None:
    task.stop()
    assert task.wait(5)


def test_a_failing_run_is_logged_and_later_runs_go_on():
    records = fakes.LogRecords()
    logging.getLogger('cyborg.common.service').addHandler(records)
    runs = []
    again = threading.Event()

    def task():
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError('boom')
        again.set()

    periodic = service.PeriodicTask('flaky', task, interval=0.05)
    periodic.start()
    try:
        assert again.wait(5)
    finally:
        _stopped(periodic)
        logging.getLogger('cyborg.common.service').removeHandler(records)
    failed = [r for r in records.records
              if r.getMessage() == 'Periodic task flaky failed']
    assert failed and failed[0].levelno == logging.ERROR
    assert failed[0].exc_info[0] is RuntimeError


def test_a_task_not_run_immediately_waits_for_its_interval():
    ran = threading.Event()
    # futurist schedules the first run when the worker is built, so the
    # interval counts from construction, not from start().
    started = time.monotonic()
    periodic = service.PeriodicTask('later', ran.set, interval=0.3,
                                    run_immediately=False)
    periodic.start()
    try:
        assert ran.wait(5)
        # Give or take the clock's resolution (a wait of 0.3 s has been
        # measured as 0.29999999 s).
        assert time.monotonic() - started >= 0.3 - 0.001
    finally:
        _stopped(periodic)


def test_stop_before_the_first_delayed_run_runs_nothing():
    ran = threading.Event()
    periodic = service.PeriodicTask('never', ran.set, interval=60,
                                    run_immediately=False)
    periodic.start()
    _stopped(periodic)
    assert not ran.is_set()


def test_a_returned_delay_applies_to_the_next_run_only():
    runs = []
    third = threading.Event()

    def task():
        runs.append(time.monotonic())
        if len(runs) == 3:
            third.set()
        return 0.01 if len(runs) == 1 else None

    periodic = service.PeriodicTask('retry', task, interval=2.0)
    periodic.start()
    try:
        assert third.wait(10)
    finally:
        _stopped(periodic)
    # Bounds far from each other, so a busy machine passes too.
    assert runs[1] - runs[0] < 1.5  # retried sooner
    assert runs[2] - runs[1] >= 2.0 - 0.001  # then the interval again


def test_stop_does_not_wait_for_the_run_in_flight():
    running, release = threading.Event(), threading.Event()

    def task():
        running.set()
        release.wait(10)

    periodic = service.PeriodicTask('slow', task, interval=60)
    periodic.start()
    assert running.wait(5)
    started = time.monotonic()
    periodic.stop()
    assert time.monotonic() - started < 1
    assert not periodic.wait(0.1)  # still running
    release.set()
    assert periodic.wait(5)


def test_runs_happen_in_a_daemon_thread_named_after_the_task():
    seen = []
    done = threading.Event()

    def task():
        seen.append(threading.current_thread())
        done.set()

    periodic = service.PeriodicTask('agent-discovery', task, interval=60)
    periodic.start()
    try:
        assert done.wait(5)
    finally:
        _stopped(periodic)
    assert seen[0].name == 'agent-discovery'
    assert seen[0].daemon


# A process whose periodic run is stuck (an RPC call waiting for its
# answer) after the task was stopped.
STUCK_AT_EXIT = """
import threading, time
from cyborg.common import service
running = threading.Event()
def task():
    running.set()
    time.sleep(60)
periodic = service.PeriodicTask('stuck', task, interval=60)
periodic.start()
assert running.wait(10)
periodic.stop()
assert not periodic.wait(0.1)
print('exiting', flush=True)
"""


def test_a_run_in_flight_does_not_hold_the_process_at_exit():
    started = time.monotonic()
    result = subprocess.run([sys.executable, '-c', STUCK_AT_EXIT],
                            capture_output=True, text=True, timeout=50)
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'exiting\n'
    assert time.monotonic() - started < 30


def test_a_task_never_started_has_nothing_to_wait_for():
    periodic = service.PeriodicTask('idle', lambda: None, interval=60)
    periodic.stop()
    assert periodic.wait(0)


class _Server:
    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append('start')

    def stop(self):
        self.calls.append('stop')

    def wait(self):
        self.calls.append('wait')


def test_service_stop_gives_on_stop_what_is_left_of_the_grace(monkeypatch):
    server = _Server()
    monkeypatch.setattr(rpc, 'get_server', lambda *args: server)
    given = []

    def on_stop(timeout):
        given.append(timeout)
        return False

    svc = service.RPCService(None, 'topic', 'host', None, on_stop=on_stop)
    svc.start()
    assert svc.stop(timeout=30) is False
    assert server.calls == ['start', 'stop', 'wait']
    assert 29 < given[0] <= 30


def test_service_stop_without_a_deadline_gives_on_stop_none(monkeypatch):
    monkeypatch.setattr(rpc, 'get_server', lambda *args: _Server())
    given = []
    svc = service.RPCService(None, 'topic', 'host', None,
                             on_stop=given.append)
    svc.start()
    assert svc.stop() is True
    assert given == [None]


def test_service_stop_waits_at_most_the_grace_for_a_task(monkeypatch):
    monkeypatch.setattr(rpc, 'get_server', lambda *args: _Server())
    running, release = threading.Event(), threading.Event()

    def task():
        running.set()
        release.wait(10)

    periodic = service.PeriodicTask('slow', task, interval=60)
    svc = service.RPCService(None, 'topic', 'host', None,
                             periodic_tasks=[periodic])
    svc.start()
    assert running.wait(5)
    started = time.monotonic()
    svc.stop(timeout=0.2)
    assert time.monotonic() - started < 2
    release.set()
    assert periodic.wait(5)
