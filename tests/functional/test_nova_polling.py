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

"""How the real-Nova tests poll Nova's API (nova_services.poll_nova)."""

import itertools

import pytest

from tests.functional import nova_services


class Clock:
    """time.monotonic and time.sleep of a clock that only sleeps move."""

    def __init__(self):
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 4))
        self.now += seconds


def _clocked(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(nova_services.time, 'monotonic', clock.monotonic)
    monkeypatch.setattr(nova_services.time, 'sleep', clock.sleep)
    return clock


def test_answers_the_first_true_answer_after_growing_pauses(monkeypatch):
    clock = _clocked(monkeypatch)
    answers = itertools.chain([None, False, 0, '', None, None],
                              ['server'])
    assert nova_services.poll_nova(lambda: next(answers), 60) == 'server'
    assert clock.pauses == [0.25, 0.375, 0.5625, 0.8438, 1.2656, 1.8984]


def test_pauses_stop_growing_at_the_last(monkeypatch):
    clock = _clocked(monkeypatch)
    assert nova_services.poll_nova(lambda: None, 20) is None
    assert max(clock.pauses) == nova_services.POLL_LAST
    assert clock.pauses[-2] == nova_services.POLL_LAST


def test_none_once_the_timeout_passed_without_sleeping_past_it(
        monkeypatch):
    clock = _clocked(monkeypatch)
    calls = []
    assert nova_services.poll_nova(lambda: calls.append(1), 5) is None
    assert clock.now == pytest.approx(5)
    # Asked once more at the deadline.
    assert len(calls) == len(clock.pauses) + 1
