# Copyright 2026 The Cyborg Authors.
#
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

"""The switch guard an agent gives its drivers: the conductor's answer,
what a capped or silent conductor means."""

import oslo_messaging as messaging
import pytest

from cyborg.agent import partition_guard
from cyborg.domain import partitions


class Conductor:
    def __init__(self, answer=None, error=None):
        self.answer = answer
        self.error = error
        self.calls = []

    def partition_switch(self, context, host, address, deployable):
        self.calls.append((context, host, address, deployable))
        if self.error is not None:
            raise self.error
        return self.answer


def _guard(conductor):
    return partition_guard.ConductorSwitchGuard(conductor, 'h1',
                                                lambda: 'ctx')


def test_the_conductor_answers():
    conductor = Conductor({'allowed': False, 'serving': ['gpu', 'gpu_1g']})
    answer = _guard(conductor).may_serve('0000:41:00.0', 'gpu_2g')
    assert answer == partitions.SwitchAnswer(False, ('gpu', 'gpu_1g'))
    assert conductor.calls == [('ctx', 'h1', '0000:41:00.0', 'gpu_2g')]
    conductor.answer = {'allowed': True, 'serving': []}
    assert _guard(conductor).may_serve('a', 'b') == partitions.ALLOWED


def test_a_conductor_capped_below_1_10_lets_the_driver_switch():
    assert _guard(Conductor(None)).may_serve('a', 'b').allowed is True


@pytest.mark.parametrize('error', [
    messaging.MessagingTimeout(), messaging.RemoteError('DBError', 'x')])
def test_a_conductor_that_does_not_answer_refuses(error, caplog):
    answer = _guard(Conductor(error=error)).may_serve('0000:41:00.0', 'b')
    assert answer == partitions.SwitchAnswer(False)
    assert 'Cannot ask the conductor whether device 0000:41:00.0' \
        in caplog.text


@pytest.mark.parametrize('wire', [
    'yes', {'allowed': 'true'}, {'serving': ['a']}, None,
    {'allowed': False, 'serving': 'ab'}, {'allowed': False,
                                          'serving': [1, 'a']}])
def test_a_malformed_answer_refuses(wire):
    answer = partitions.SwitchAnswer.from_wire(wire)
    assert answer.allowed is False
    assert answer.serving in ((), ('a',))
