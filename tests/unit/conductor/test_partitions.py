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
before asking the device's agent, and how the agent's answers read; and
its switch guard (RPC 1.10): when an agent's empty device may change
what it serves, and the reservation that keeps Placement from granting
it meanwhile."""

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.clients import placement as placement_client
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import partitions
from cyborg.db import api as db_api
from cyborg.db import models
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


# The switch guard (RPC 1.10) ------------------------------------------------

class FakePlacement:
    """Providers' generations, allocations and inventories, as the
    client's methods read and write them; ``moves`` bumps a provider's
    generation between the read of its allocations and of its
    inventories (an allocation made in between)."""

    def __init__(self, providers, moves=(), error=None):
        self.providers = providers
        self.moves = set(moves)
        self.error = error
        self.calls = []

    def _provider(self, uuid):
        if self.error is not None:
            raise self.error
        if uuid not in self.providers:
            raise placement_client.ProviderNotFound('gone', 404)
        return self.providers[uuid]

    def provider_allocations_at(self, uuid):
        self.calls.append(('allocations', uuid))
        provider = self._provider(uuid)
        generation = provider['generation']
        if uuid in self.moves:
            provider['generation'] += 1
        return generation, dict(provider['allocations'])

    def get_inventories(self, uuid):
        self.calls.append(('inventories', uuid))
        provider = self._provider(uuid)
        return provider['generation'], {
            rc: dict(record) for rc, record in provider['inventories'].items()}

    def set_inventories(self, uuid, generation, inventories):
        self.calls.append(('set', uuid))
        provider = self._provider(uuid)
        if generation != provider['generation']:
            raise placement_client.GenerationConflict('conflict', 409)
        provider['inventories'] = inventories
        provider['generation'] += 1
        return provider['generation']


OLD, NEW = 'gpu-3b_1g.18gb', 'gpu-3b_2g.35gb'


def _serving_gpu(allocations=None, **provider):
    """An empty MIG GPU on h1 serving ``OLD``, its provider in a fake
    Placement (with ``allocations``), its host's report and provider
    rows recorded."""
    device = _gpu()
    factories.create_test_deployable(device_id=device['id'],
                                     name='gpu-3b', rp_uuid=None)
    child = factories.create_test_deployable(device_id=device['id'],
                                             name=OLD)
    factories.create_test_service(report_hash='d' * 64)
    factories.create_test_provider(uuid=child['rp_uuid'], generation=4,
                                   inventory_hash='i' * 64)
    placement = FakePlacement({child['rp_uuid']: dict({
        'generation': 4, 'allocations': allocations or {},
        'inventories': {'CUSTOM_MIG_1G_18GB': {
            'total': 7, 'reserved': 0, 'min_unit': 1, 'max_unit': 7,
            'step_size': 1, 'allocation_ratio': 1.0}}}, **provider)})
    return device, child['rp_uuid'], placement


def _ask(placement, deployable=NEW, context=None):
    guard = partitions.SwitchGuard(
        None if placement is None else lambda: placement)
    conductor = conductor_manager.ConductorManager('cond1',
                                                   switch_guard=guard)
    return conductor.partition_switch(context, 'h1', GPU, deployable)


def _written(rp_uuid):
    """(report digest of h1, the provider's inventory hash and
    generation) as the database holds them."""
    with db_api.get_engine().connect() as connection:
        digest = connection.execute(sa.select(
            models.SERVICES.c.report_hash)).scalar_one()
        provider = connection.execute(sa.select(
            models.PROVIDERS.c.inventory_hash,
            models.PROVIDERS.c.generation).where(
            models.PROVIDERS.c.uuid == rp_uuid)).one()
    return digest, tuple(provider)


def test_a_switch_of_an_unallocated_gpu_reserves_its_inventory(
        database, admin_context):
    _device, rp, placement = _serving_gpu()
    assert _ask(placement, context=admin_context) == {
        'allowed': True, 'serving': []}
    record = placement.providers[rp]['inventories']['CUSTOM_MIG_1G_18GB']
    assert (record['reserved'], record['total']) == (7, 7)
    # Written behind the sync's back: the next report is applied and its
    # sync writes the provider again.
    assert _written(rp) == (None, (None, None))


def test_a_device_serving_what_it_asks_for_is_not_checked(database,
                                                          admin_context):
    _device, rp, placement = _serving_gpu()
    assert _ask(placement, OLD, admin_context)['allowed'] is True
    assert placement.calls == []
    assert _written(rp) == ('d' * 64, ('i' * 64, 4))


def test_an_allocation_not_bound_yet_refuses_the_switch(database,
                                                        admin_context):
    _device, rp, placement = _serving_gpu(
        allocations={'instance-1': {'resources': {'CUSTOM_MIG_1G_18GB': 1}}})
    assert _ask(placement, context=admin_context) == {
        'allowed': False, 'serving': ['gpu-3b', OLD]}
    assert ('set', rp) not in placement.calls
    assert _written(rp) == ('d' * 64, ('i' * 64, 4))


def test_an_allocation_made_while_asking_refuses_the_switch(database,
                                                            admin_context):
    _device, rp, placement = _serving_gpu()
    placement.moves.add(rp)
    assert _ask(placement, context=admin_context)['allowed'] is False
    assert placement.providers[rp]['inventories'][
        'CUSTOM_MIG_1G_18GB']['reserved'] == 0


def test_a_conflict_on_the_reservation_refuses_the_switch(
        database, admin_context, monkeypatch):
    _device, rp, placement = _serving_gpu()
    real = placement.set_inventories

    def allocated_first(uuid, generation, inventories):
        placement.providers[uuid]['generation'] += 1  # an allocation
        return real(uuid, generation, inventories)
    monkeypatch.setattr(placement, 'set_inventories', allocated_first)
    assert _ask(placement, context=admin_context)['allowed'] is False


def test_a_device_an_arq_holds_never_switches(database, admin_context):
    device, _rp, placement = _serving_gpu()
    deployable = factories.create_test_deployable(device_id=device['id'])
    factories.create_test_arq(deployable_id=deployable['id'],
                              state='Bound')
    assert _ask(placement, context=admin_context)['allowed'] is False
    assert placement.calls == []


@pytest.mark.parametrize('error', [
    placement_client.PlacementUnavailable('down'), None])
def test_without_placement_the_switch_is_refused(database, admin_context,
                                                 error):
    _device, rp, placement = _serving_gpu()
    placement.error = error
    answer = _ask(None if error is None else placement,
                  context=admin_context)
    assert answer == {'allowed': False, 'serving': ['gpu-3b', OLD]}
    assert _written(rp) == ('d' * 64, ('i' * 64, 4))


def test_a_provider_placement_lost_holds_nothing(database, admin_context):
    _device, rp, placement = _serving_gpu()
    del placement.providers[rp]
    assert _ask(placement, context=admin_context)['allowed'] is True


def test_a_device_never_reported_may_serve_anything(database,
                                                    admin_context):
    assert _ask(FakePlacement({}), context=admin_context)['allowed'] is True


def test_the_administrator_is_refused_while_placement_holds_a_claim(
        database, admin_context):
    agents = Agents()
    device, rp, placement = _serving_gpu(
        allocations={'instance-1': {'resources': {'CUSTOM_MIG_1G_18GB': 1}}})
    conductor = conductor_manager.ConductorManager(
        'cond1', partitions=partitions.Partitions(agents, lambda: placement))
    error = _refusal(conductor, admin_context, device['uuid'], '2g.35gb',
                     True)
    assert isinstance(error, exception.DevicePartitionsInUse)
    assert agents.calls == []
    placement.providers[rp]['allocations'] = {}
    conductor.device_set_partitions(admin_context, device['uuid'],
                                    '2g.35gb', True)
    assert len(agents.calls) == 1
    placement.error = placement_client.PlacementUnavailable('down')
    assert isinstance(_refusal(conductor, admin_context, device['uuid'],
                               '2g.35gb', True),
                      exception.ServiceUnavailable)
