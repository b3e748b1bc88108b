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

"""The taint model: keys, traits, effects and the wire form."""

import pytest

from cyborg.domain import device_tree
from cyborg.domain import taints


@pytest.mark.parametrize('key', ['a', 'nvidia.xid-79', 'aer_fatal', 'x' * 63])
def test_valid_keys(key):
    assert taints.check_key(key) == key


@pytest.mark.parametrize('key', ['', 'A', '1abc', 'has space', 'x/y',
                                 'x' * 64, None])
def test_invalid_keys(key):
    with pytest.raises(ValueError):
        taints.check_key(key)


def test_trait_name_is_a_custom_trait():
    assert (taints.trait_name('nvidia.xid-79')
            == 'CUSTOM_TAINT_NVIDIA_XID_79')
    assert taints.trait_name(taints.UNHEALTHY_KEY) == (
        'CUSTOM_TAINT_CYBORG_UNHEALTHY')


def test_effects_and_scheduling_traits():
    on = taints.Taint('a', 'NoSchedule')
    ex = taints.Taint('b', 'NoExecute', source='admin')
    off = taints.Taint('c', 'None')
    assert on.effect is taints.Effect.NO_SCHEDULE
    assert ex.source is taints.Source.ADMIN
    assert taints.scheduling_traits([on, ex, off]) == {
        'CUSTOM_TAINT_A', 'CUSTOM_TAINT_B'}


def test_unknown_effect_refused():
    with pytest.raises(ValueError):
        taints.Taint('a', 'Evict')


def test_long_reason_is_cut_long_value_refused():
    assert len(taints.Taint('a', 'None', reason='r' * 300).reason) == 255
    with pytest.raises(ValueError):
        taints.Taint('a', 'None', value='v' * 256)


def test_wire_round_trip():
    taint = taints.Taint('a', 'NoSchedule', value='v', reason='why')
    assert taints.Taint.from_wire(taint.to_wire()) == taint


def _device(**kwargs):
    return device_tree.Device(type='GPU', vendor='10de', model='m',
                              address='0000:01:00.0', controlpath_ids=[],
                              deployables=[], **kwargs)


def test_device_without_taints_has_the_old_wire_form():
    wire = device_tree.tree_to_wire([_device()])
    assert 'taints' not in wire[0]


def test_device_taints_on_the_wire_sorted_without_time():
    device = _device(taints=[{'key': 'b', 'effect': 'None'},
                             taints.Taint('a', 'NoExecute', reason='x')])
    wire = device_tree.tree_to_wire([device])[0]['taints']
    assert [taint['key'] for taint in wire] == ['a', 'b']
    assert wire[0] == {'key': 'a', 'value': '', 'effect': 'NoExecute',
                       'source': 'driver', 'reason': 'x'}
