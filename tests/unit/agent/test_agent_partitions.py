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

"""The agent's ``set_partitions`` RPC method (API 1.4): the driver's
refusals answer as conflicts or invalid requests, and a profile set is
reported at once."""

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import manager
from cyborg.common import exception

GPU = '0000:3b:00.0'


class _Driver(base.AcceleratorDriver):
    name = 'partitioning'

    def __init__(self, fail=None):
        self.fail = fail
        self.calls = []

    def discover(self):
        return []

    def set_partitions(self, address, profile, pinned):
        if self.fail is not None:
            raise self.fail
        self.calls.append((address, profile, pinned))


class _Plain(base.AcceleratorDriver):
    name = 'plain'

    def discover(self):
        return []


def test_the_driver_sets_the_profile_and_the_agent_reports():
    reports = []
    driver = _Driver()
    agent = manager.AgentManager('host1', None, [driver],
                                 report=reports.append)
    agent.set_partitions(None, 'partitioning', GPU, '1g.18gb', True)
    assert driver.calls == [(GPU, '1g.18gb', True)]
    assert len(reports) == 1


@pytest.mark.parametrize('driver, expected, message', [
    (_Driver(errors.PartitionRefused(reason='GPU holds 1 partition(s)')),
     exception.Conflict, 'GPU holds 1 partition'),
    (_Driver(errors.PartitionProfileUnknown(reason='cannot serve 9g.1gb')),
     exception.Invalid, 'cannot serve 9g.1gb'),
    (_Plain(), exception.Conflict, 'plain does not partition devices'),
])
def test_a_refusal_is_the_answer(driver, expected, message):
    reports = []
    agent = manager.AgentManager('host1', None, [driver],
                                 report=reports.append)
    with pytest.raises(messaging.ExpectedException) as caught:
        agent.set_partitions(None, driver.name, GPU, '1g.18gb', True)
    error = caught.value.exc_info[1]
    assert isinstance(error, expected)
    assert message in str(error)
    assert reports == []
