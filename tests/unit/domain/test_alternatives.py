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

"""Ordered alternatives of a device profile group: their validation,
their plain forms, the Placement query that probes them, and which one
a provider matches at bind."""

import pytest

from cyborg.common import exception
from cyborg.domain import adoption
from cyborg.domain import alternatives
from cyborg.domain import device_profile as rules

H100 = {'resources:PGPU': 1, 'trait:CUSTOM_GPU_H100': 'required'}
A100 = {'resources:PGPU': '1', 'trait:custom-gpu-a100': 'required'}


def _group(*options, **common):
    return dict(common, alternatives=list(options))


def test_a_group_of_alternatives_is_normalized():
    group = rules.normalize_group(0, _group(
        H100, A100, **{'accel:attach_target': 'VM',
                       'toleration:maintenance': 'Exists'}))
    assert group == {
        'accel:attach_target': 'VM', 'toleration:maintenance': 'Exists',
        'alternatives': [
            {'resources:PGPU': '1', 'trait:CUSTOM_GPU_H100': 'required'},
            {'resources:PGPU': '1', 'trait:CUSTOM_GPU_A100': 'required'}]}
    assert rules.accelerator_count(group) == 1
    assert rules.options(group) == [
        dict({k: v for k, v in group.items() if k != 'alternatives'},
             **option) for option in group['alternatives']]
    # A plain group stands for itself.
    assert rules.options({'resources:FPGA': '1'}) == [{'resources:FPGA': '1'}]


@pytest.mark.parametrize('group, message', [
    (_group(), 'must be a list of 1 to 8 alternatives'),
    (_group(*[H100] * 9), 'must be a list of 1 to 8 alternatives'),
    ({'alternatives': H100}, 'must be a list of 1 to 8 alternatives'),
    (_group(H100, {}), 'Alternative 1 of group 0 must be an object'),
    (_group(H100, ['resources:PGPU']), 'Alternative 1 of group 0 must be'),
    (_group(H100, {'accel:attach_target': 'VM', 'resources:PGPU': 1}),
     'may hold only resources:<RC> and trait:<TRAIT> keys, not '
     'accel:attach_target'),
    (_group(H100, {'trait:CUSTOM_X': 'required'}), 'requests no resources'),
    (_group(H100, {'resources:PGPU': 2}),
     'request different numbers of accelerators (1, 2)'),
    (_group(H100, {'resources:GPU': 1}), 'Unsupported resource class GPU'),
    (_group(H100, {'resources:PGPU': 1, 'trait:CUSTOM_X': 'maybe'}),
     'Unsupported trait value'),
    (_group(H100, **{'resources:PGPU': 1}),
     'its key resources:PGPU must be in each alternative'),
    (_group(H100, **{'trait:CUSTOM_X': 'required'}),
     'its key trait:CUSTOM_X must be in each alternative'),
    (_group(H100, **{'accel:nope': 'x'}), 'Unsupported accel key'),
])
def test_invalid_alternatives_are_refused_clearly(group, message):
    with pytest.raises(exception.InvalidParameterValue) as raised:
        rules.normalize_groups([{'resources:FPGA': 1}, group])
    assert message.replace('group 0', 'group 1') in str(raised.value)


def test_the_limit_counts_one_alternative_per_group():
    groups = rules.normalize_groups(
        [_group({'resources:PGPU': 2}, {'resources:FPGA': 2})], 2)
    assert rules.total_accelerators(groups) == 2
    with pytest.raises(exception.LimitExceeded):
        rules.normalize_groups(
            [_group({'resources:PGPU': 3}, {'resources:FPGA': 3})], 2)


def test_resolve_answers_the_chosen_alternative_or_the_first():
    groups = rules.normalize_groups([
        {'resources:FPGA': 1},
        _group(H100, A100, **{'accel:attach_target': 'VM'})])
    assert alternatives.resolve(groups, {1: 1}) == [
        {'resources:FPGA': '1'},
        {'accel:attach_target': 'VM', 'resources:PGPU': '1',
         'trait:CUSTOM_GPU_A100': 'required'}]
    assert alternatives.resolve(groups, {})[1][
        'trait:CUSTOM_GPU_H100'] == 'required'


def test_the_placement_query_of_a_plain_group():
    assert alternatives.placement_query({
        'resources:PGPU': '1', 'resources:CUSTOM_MEM': '2',
        'trait:CUSTOM_B': 'required', 'trait:CUSTOM_A': 'required',
        'trait:CUSTOM_TAINT_X': 'forbidden',
        'accel:attach_target': 'VM', 'toleration:y': 'Exists'}) == {
        'resources1': 'CUSTOM_MEM:2,PGPU:1', 'limit': '1',
        'required1': 'CUSTOM_A,CUSTOM_B,!CUSTOM_TAINT_X'}
    assert alternatives.placement_query({'resources:FPGA': '1'}) == {
        'resources1': 'FPGA:1', 'limit': '1'}


def test_first_satisfiable_stops_at_the_first_and_defaults_to_0():
    asked = []

    def satisfiable(option):
        asked.append(option)
        return option in ('b', 'c')
    assert alternatives.first_satisfiable('abcd', satisfiable) == 1
    assert asked == ['a', 'b']
    assert alternatives.first_satisfiable('ad', satisfiable) == 0


def test_bind_matches_the_first_alternative_the_provider_satisfies():
    group = rules.normalize_group(0, _group(
        H100, A100, {'resources:PGPU': 1}))
    assert alternatives.match(group, 'PGPU', {'CUSTOM_GPU_A100'}) == (1, [])
    assert alternatives.match(group, 'PGPU', {'CUSTOM_GPU_H100',
                                              'CUSTOM_GPU_A100'}) == (0, [])
    assert alternatives.match(group, 'PGPU', set()) == (2, [])
    index, reasons = alternatives.match(group, 'FPGA', set())
    assert index is None
    assert reasons[0].startswith('(alternative 0) offers resource class '
                                 'FPGA, not PGPU')
    assert len(reasons) == 3
    # A plain group has no alternative to record.
    assert alternatives.match({'resources:FPGA': '1'}, 'FPGA', ()) == (
        None, [])


def test_the_traits_of_alternatives_are_referenced():
    group = rules.normalize_group(0, _group(H100, A100))
    assert adoption.referenced_traits([group]) == {'CUSTOM_GPU_H100',
                                                   'CUSTOM_GPU_A100'}
