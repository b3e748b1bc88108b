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

"""The health of an accelerator request's device: the grading rule."""

import datetime

from cyborg.domain import device_health as rules
from cyborg.domain import taints

T0 = datetime.datetime(2026, 3, 1, 10, 0, 0)
NOW = T0 + datetime.timedelta(minutes=10)
TIMEOUT = 300


def _state(health='healthy', missing=False, seen=NOW, taint_list=()):
    return rules.DeviceState(health, missing, 'why', T0, seen,
                             tuple(taint_list))


def _taint(key, effect, source='driver', reason='', minutes=1):
    return taints.Taint(key, effect, source=source, reason=reason,
                        added_at=T0 + datetime.timedelta(minutes=minutes))


def test_healthy():
    assert rules.grade(_state(), NOW, TIMEOUT) == rules.DeviceHealth(
        rules.HEALTHY, 'why', T0)


def test_unknown_when_the_agent_is_silent_or_never_heard():
    silent = NOW - datetime.timedelta(seconds=TIMEOUT + 1)
    graded = rules.grade(_state(seen=silent), NOW, TIMEOUT)
    assert graded.status == rules.UNKNOWN
    assert graded.since == silent
    assert '300 seconds' in graded.reason
    assert rules.grade(_state(seen=None), NOW, TIMEOUT).status == \
        rules.UNKNOWN
    # Just within the timeout: known.
    within = NOW - datetime.timedelta(seconds=TIMEOUT)
    assert rules.grade(_state(seen=within), NOW, TIMEOUT).status == \
        rules.HEALTHY


def test_unhealthy_from_scheduling_driver_taints():
    graded = rules.grade(_state('unhealthy', taint_list=[
        _taint('gpu.xid', 'NoSchedule', reason='Xid 79', minutes=3),
        _taint('gpu.aer', 'NoExecute', minutes=2),
        _taint('gpu.link', 'None', minutes=1)]), NOW, TIMEOUT)
    assert graded == rules.DeviceHealth(
        rules.UNHEALTHY, 'gpu.aer; gpu.xid: Xid 79',
        T0 + datetime.timedelta(minutes=2))


def test_unhealthy_without_taints_or_missing():
    assert rules.grade(_state('unhealthy'), NOW, TIMEOUT) == \
        rules.DeviceHealth(rules.UNHEALTHY, 'why', T0)
    assert rules.grade(_state(missing=True), NOW, TIMEOUT).status == \
        rules.UNHEALTHY


def test_degraded_from_informative_driver_taints():
    graded = rules.grade(_state(taint_list=[
        _taint('gpu.xid', 'None', reason='Xid 31')]), NOW, TIMEOUT)
    assert graded == rules.DeviceHealth(
        rules.DEGRADED, 'gpu.xid: Xid 31', T0 + datetime.timedelta(minutes=1))


def test_admin_taints_are_not_the_devices_health():
    graded = rules.grade(_state(taint_list=[
        _taint('drain', 'NoExecute', source='admin')]), NOW, TIMEOUT)
    assert graded.status == rules.HEALTHY
