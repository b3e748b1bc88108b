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

"""The conductor's device partition profile (RPC 1.8): what it refuses
before asking the device's agent, and how the agent's answers read."""

import oslo_messaging as messaging
import pytest

from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import partitions
from cyborg.domain import partitions as partition_rules
from tests import factories

GPU = '0000:3b:00.0'


class Agents:
    """Records the calls; raises ``error`` when given."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    def set_partitions(self, context, host, driver, address, profile,
                       pinned):
        self.calls.append((host, driver, address, profile, pinned))
        if self.error is not None:
            raise self.error


def _gpu(in_use=0):
    return factories.create_test_device(
        type='GPU', address=GPU, driver='nvidia_gpu_driver',
        partitions=partition_rules.stored_form(partition_rules.state(
            'homogeneous', '1g.18gb', False, in_use, 7 - in_use)))


def _conductor(agents):
    return conductor_manager.ConductorManager(
        'cond1', partitions=partitions.Partitions(agents))


def _refusal(conductor, context, *args):
    """The exception the RPC answers with (the endpoint's expected
    exception wraps it)."""
    with pytest.raises(messaging.ExpectedException) as caught:
        conductor.device_set_partitions(context, *args)
    return caught.value.exc_info[1]


def test_the_agent_of_the_device_sets_the_profile(database, admin_context):
    agents = Agents()
    device = _gpu()
    _conductor(agents).device_set_partitions(admin_context, device['uuid'],
                                             '2g.35gb', True)
    assert agents.calls == [('h1', 'nvidia_gpu_driver', GPU, '2g.35gb',
                             True)]


def test_a_device_not_partitioned_is_refused(database, admin_context):
    agents = Agents()
    device = factories.create_test_device()
    assert isinstance(_refusal(_conductor(agents), admin_context,
                               device['uuid'], '1g.18gb', True),
                      exception.DeviceNotPartitioned)
    assert agents.calls == []


def test_a_device_with_partitions_in_use_is_refused(database,
                                                    admin_context):
    agents = Agents()
    device = _gpu(in_use=1)
    error = _refusal(_conductor(agents), admin_context, device['uuid'],
                     '2g.35gb', True)
    assert isinstance(error, exception.DevicePartitionsInUse)
    assert error.code == 409
    assert agents.calls == []


def test_a_device_an_arq_holds_is_refused(database, admin_context):
    """Bound since the agent's last report: the database knows first."""
    agents = Agents()
    device = _gpu()
    deployable = factories.create_test_deployable(device_id=device['id'])
    factories.create_test_arq(deployable_id=deployable['id'],
                              state='Bound')
    assert isinstance(_refusal(_conductor(agents), admin_context,
                               device['uuid'], '2g.35gb', False),
                      exception.DevicePartitionsInUse)
    assert agents.calls == []


def test_an_unknown_device_is_not_found(database, admin_context):
    assert isinstance(_refusal(
        _conductor(Agents()), admin_context,
        '3f1d7c3e-8f0a-4b5e-9c52-000000000404', None, False),
        exception.NotFound)


@pytest.mark.parametrize('error, expected, message', [
    (exception.Conflict(reason='GPU holds 1 partition(s)'),
     exception.Conflict, 'holds 1'),
    (exception.Invalid(reason='cannot serve profile'), exception.Invalid,
     'cannot serve'),
    (messaging.MessagingTimeout(), exception.ServiceUnavailable,
     'the agent of h1 did not answer in time'),
    (rpc.RPCVersionCapped('cyborg-agent', 'set_partitions', '1.4', '1.3',
                          'agent'), exception.ServiceUnavailable, '1.4'),
    (messaging.RemoteError('OSError', 'disk full'),
     exception.PartitionsFailed, 'OSError: disk full'),
])
def test_the_agent_answers(database, admin_context, error, expected,
                           message):
    device = _gpu()
    answer = _refusal(_conductor(Agents(error)), admin_context,
                      device['uuid'], '2g.35gb', True)
    assert isinstance(answer, expected)
    assert message in str(answer)


def test_a_conductor_without_agents_refuses(database, admin_context):
    device = _gpu()
    assert isinstance(_refusal(
        conductor_manager.ConductorManager('cond1'), admin_context,
        device['uuid'], '2g.35gb', True), exception.ServiceUnavailable)
