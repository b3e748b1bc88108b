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

"""Tolerations: their syntax, and the taint traits a group forbids."""

import pytest

from cyborg.common import exception
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import resource_names
from cyborg.domain import taints
from cyborg.domain import tolerations

T = tolerations.Toleration


@pytest.mark.parametrize('key, text, expected', [
    ('gpu.xid', 'Exists', T('gpu.xid', 'Exists')),
    ('gpu.xid', 'Equal:79', T('gpu.xid', 'Equal', '79')),
    ('gpu.xid', 'Equal:', T('gpu.xid', 'Equal', '')),
    ('gpu.xid', 'Equal:a:b', T('gpu.xid', 'Equal', 'a:b')),
])
def test_valid_tolerations(key, text, expected):
    assert tolerations.parse_value(key, text) == expected


@pytest.mark.parametrize('key, text, message', [
    ('gpu.xid', 'exists', 'must be "Exists" or "Equal:<value>"'),
    ('gpu.xid', 'Exists:1', 'must be "Exists" or "Equal:<value>"'),
    ('gpu.xid', 'Equal', 'must be "Exists" or "Equal:<value>"'),
    ('gpu.xid', 'Equal:' + 'v' * 256, 'longer than 255'),
    ('gpu.xid', 7, 'must be a string'),
    ('GPU', 'Exists', 'lower-case letter'),
    ('', 'Exists', 'lower-case letter'),
])
def test_invalid_tolerations(key, text, message):
    with pytest.raises(ValueError, match=message):
        tolerations.parse_value(key, text)


def test_tolerates():
    assert T('k', 'Exists').tolerates('k', 'anything')
    assert not T('k', 'Exists').tolerates('other', '')
    assert T('k', 'Equal', 'v').tolerates('k', 'v')
    assert not T('k', 'Equal', 'v').tolerates('k', 'w')


GROUP = {'resources:FPGA': '1', 'toleration:gpu.xid': 'Exists',
         'toleration:drain': 'Equal:rack1', 'toleration:Bad': 'Exists'}


def test_of_group_skips_what_is_not_a_valid_toleration():
    assert tolerations.of_group(GROUP) == {
        'gpu.xid': T('gpu.xid', 'Exists'),
        'drain': T('drain', 'Equal', 'rack1')}


V = tolerations.value_trait_name


@pytest.mark.parametrize('active, forbidden', [
    ({}, []),
    ({'gpu.xid': {'31', '79'}}, []),
    ({'drain': {'rack1'}}, []),
    # Another value of an Equal toleration's key: that value forbidden.
    ({'drain': {'rack1', 'rack2', 'rack3'}},
     sorted([V('drain', 'rack2'), V('drain', 'rack3')])),
    ({'cyborg.unhealthy': {''}, 'gpu.xid': {''}},
     ['CUSTOM_TAINT_CYBORG_UNHEALTHY']),
])
def test_forbidden_traits(active, forbidden):
    assert tolerations.forbidden_traits(GROUP, active) == forbidden


def test_value_traits_are_valid_distinct_and_never_key_traits():
    names = {V('k', value) for value in ('', 'a', 'b', 'x' * 255)}
    assert len(names) == 4
    assert all(resource_names.is_valid_trait(name) and len(name) <= 255
               and not name.startswith(taints.TRAIT_PREFIX)
               for name in names)


def test_placement_traits_of_scheduling_taints_only():
    assert tolerations.placement_traits([
        taints.Taint('gpu.xid', 'NoSchedule', '79'),
        taints.Taint('drain', 'NoExecute'),
        taints.Taint('gpu.link', 'None', 'x4')]) == {
        'CUSTOM_TAINT_GPU_XID', V('gpu.xid', '79'),
        'CUSTOM_TAINT_DRAIN', V('drain', '')}


def test_with_forbidden_taints_keeps_what_the_group_names():
    group = {'resources:FPGA': '1',
             'trait:CUSTOM_TAINT_A': 'required'}
    assert tolerations.with_forbidden_taints(group, {'a': {''}, 'b': {''}}) \
        == {'resources:FPGA': '1', 'trait:CUSTOM_TAINT_A': 'required',
            'trait:CUSTOM_TAINT_B': 'forbidden'}


def test_profile_groups_accept_valid_tolerations_only():
    group = dp_rules.normalize_group(0, {
        'resources:FPGA': '1', 'toleration: gpu.xid': 'Exists'})
    assert group == {'resources:FPGA': '1', 'toleration:gpu.xid': 'Exists'}
    with pytest.raises(exception.InvalidParameterValue,
                       match=r'toleration:gpu.xid must be .*\(group 0\)'):
        dp_rules.normalize_group(0, {'resources:FPGA': '1',
                                     'toleration:gpu.xid': 'Maybe'})
