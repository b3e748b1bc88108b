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

"""The domain rules that are not tested through a flow elsewhere."""

import uuid

import pytest

from cyborg.domain import arq_states
from cyborg.domain import devices
from cyborg.domain import events
from cyborg.domain import providers


def test_provider_uuids_are_stable_and_host_scoped():
    first = providers.provider_uuid('h1', '0000:10:00.0', 'd')
    assert first == providers.provider_uuid('h1', '0000:10:00.0', 'd')
    assert first != providers.provider_uuid('h2', '0000:10:00.0', 'd')
    assert first != providers.provider_uuid('h1', '0000:10:00.1', 'd')
    # The namespace is part of the contract: changing it would give every
    # deployable a new provider on upgrade.
    assert first == str(uuid.uuid5(providers.RP_NAMESPACE,
                                   'h1/0000:10:00.0/d'))


def test_provider_name_is_host_and_deployable():
    assert providers.provider_name('h1', 'fpga0') == 'h1_fpga0'


def test_placement_attributes_sort_the_traits():
    attributes = providers.placement_attributes('FPGA',
                                                ['CUSTOM_B', 'CUSTOM_A'])
    assert attributes == {'rc': 'FPGA', 'trait0': 'CUSTOM_A',
                          'trait1': 'CUSTOM_B'}


@pytest.mark.parametrize('key,shapes', [
    ('rc', True), ('trait0', True), ('trait12', True),
    ('rcx', False), ('bitstream_id', False), ('Trait0', False)])
def test_which_attributes_shape_placement(key, shapes):
    assert providers.shapes_placement(key) is shapes


def test_traits_of_reads_only_the_trait_keys():
    assert providers.traits_of({'rc': 'FPGA', 'trait0': 'CUSTOM_A',
                                'trait1': 'CUSTOM_B', 'x': 'CUSTOM_C'}) == {
        'CUSTOM_A', 'CUSTOM_B'}


@pytest.mark.parametrize('status,health,missing,schedulable', [
    ('enabled', 'healthy', False, True),
    ('maintaining', 'healthy', False, False),
    ('enabled', 'unhealthy', False, False),
    ('enabled', 'healthy', True, False)])
def test_a_device_is_schedulable_only_enabled_healthy_and_present(
        status, health, missing, schedulable):
    assert devices.is_schedulable(status, health, missing) is schedulable


def test_every_event_status_of_a_state_is_one_nova_knows():
    assert set(arq_states.EVENT_STATUS.values()) == set(events.STATUSES)
    assert events.STATUSES == ('completed', 'failed')



def test_provider_traits_add_the_owner_trait():
    attributes = providers.placement_attributes('FPGA', ['CUSTOM_B',
                                                         'CUSTOM_A'])
    attributes['region'] = 'operator value'
    assert providers.provider_traits(providers.traits_of(attributes)) == {
        'CUSTOM_A', 'CUSTOM_B', 'OWNER_CYBORG'}
    assert providers.provider_traits([]) == {'OWNER_CYBORG'}


def test_trait_attributes_are_numbered_in_order():
    assert providers.trait_attributes(['CUSTOM_B', 'CUSTOM_A']) == {
        'trait0': 'CUSTOM_B', 'trait1': 'CUSTOM_A'}
    assert providers.placement_attributes('FPGA', ['CUSTOM_B', 'CUSTOM_A']) \
        == {'rc': 'FPGA', 'trait0': 'CUSTOM_A', 'trait1': 'CUSTOM_B'}


@pytest.mark.parametrize('key, numbered', [
    ('trait0', True), ('trait12', True), ('trait', False),
    ('traits', False), ('rc', False), ('xtrait0', False)])
def test_trait_keys_are_the_numbered_ones(key, numbered):
    assert providers.is_trait_key(key) is numbered
    if numbered:
        assert key in providers.trait_attributes(['T'] * 13)
