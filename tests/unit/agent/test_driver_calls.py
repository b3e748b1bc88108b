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

"""The concurrency rules of the driver contract, as the agent enforces
them: one discovery (and report) at a time; a driver that declares
itself serialized gets one call at a time."""

import threading

from cyborg.accelerator.drivers import base
from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import manager

INFO = {'domain': '0000', 'bus': '5e', 'device': '00', 'function': '0'}
WAIT = 5


class _Gated(base.AcceleratorDriver):
    """A driver whose first discover (or prepare) waits for ``release``;
    ``inside`` is set while a call runs, ``overlaps`` counts the calls
    that started while another one ran."""

    name = 'gated'

    def __init__(self, serialized=False):
        self.serialized = serialized
        self.entered = threading.Event()
        self.release = threading.Event()
        self.running = 0
        self.overlaps = 0
        self.calls = []
        self._guard = threading.Lock()

    def _call(self, what):
        with self._guard:
            self.overlaps += self.running > 0
            self.running += 1
            first = not self.calls
            self.calls.append(what)
        if first:
            self.entered.set()
            assert self.release.wait(WAIT)
        with self._guard:
            self.running -= 1

    def discover(self):
        self._call('discover')
        return []

    def prepare_attach_handle(self, handle, handle_uuid, preparation):
        self._call('prepare')


class _Conductor:
    def __init__(self):
        self.reports = []

    def report_inventory(self, context, host, rp_name, wire, digest,
                         failed, utilization=None, acknowledged=False):
        self.reports.append(digest)
        return {}


def _start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_two_overlapping_reports_are_serialized():
    """The periodic report and one after a programming (an RPC thread)
    never run a discovery at the same time."""
    driver = _Gated()
    conductor = _Conductor()
    finder = discovery.Discovery('host1', 'host1', [driver], conductor)
    first = _start(finder.report, None)
    assert driver.entered.wait(WAIT)
    second = _start(finder.report, None)
    second.join(0.2)
    # The second report waits for the first one, report included.
    assert second.is_alive()
    assert driver.calls == ['discover']
    assert conductor.reports == []
    driver.release.set()
    first.join(WAIT)
    second.join(WAIT)
    assert driver.calls == ['discover', 'discover']
    assert driver.overlaps == 0
    assert len(conductor.reports) == 2


def _agent(driver):
    locks = driver_calls.DriverLocks()
    finder = discovery.Discovery('host1', 'host1', [driver], _Conductor(),
                                 locks=locks)
    agent = manager.AgentManager('host1', None, [driver], locks=locks,
                                 preparations=finder.preparations)
    return finder, agent


def test_a_serialized_driver_gets_one_call_at_a_time():
    driver = _Gated(serialized=True)
    finder, agent = _agent(driver)
    report = _start(finder.report, None)
    assert driver.entered.wait(WAIT)
    prepare = _start(agent.prepare_attach_handle, None, 'gated', 'PCI',
                     INFO, 'h1', 'vf')
    prepare.join(0.2)
    assert prepare.is_alive()
    driver.release.set()
    report.join(WAIT)
    prepare.join(WAIT)
    assert driver.calls == ['discover', 'prepare']
    assert driver.overlaps == 0


def test_other_drivers_prepare_while_a_discovery_runs():
    driver = _Gated(serialized=False)
    finder, agent = _agent(driver)
    report = _start(finder.report, None)
    assert driver.entered.wait(WAIT)
    agent.prepare_attach_handle(None, 'gated', 'PCI', INFO, 'h1', 'vf')
    assert driver.calls == ['discover', 'prepare']
    assert driver.overlaps == 1
    driver.release.set()
    report.join(WAIT)
