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

"""What an ARQ counts, what a project uses, what a limit means."""

import json

from cyborg.domain import quotas


def test_each_arq_counts_one_unit_of_its_class():
    group = {'resources:FPGA': '2', 'resources:PGPU': '1',
             'trait:CUSTOM_X': 'required'}
    assert quotas.arq_resources(group) == [{'FPGA': 1}, {'FPGA': 1},
                                           {'PGPU': 1}]
    assert quotas.deltas(quotas.arq_resources(group)) == {
        'accelerator_requests': 3, 'class:FPGA': 2, 'class:PGPU': 1}
    assert quotas.class_name('CUSTOM_MIG_1G') == 'class:CUSTOM_MIG_1G'


def test_usage_counts_stored_resources_and_older_rows_by_their_group():
    stored = [(quotas.encode({'FPGA': 1}), 3), (quotas.encode({'VGPU': 1}), 1)]
    # Two ARQs made before quotas from a group of FPGA=1 and PGPU=1:
    # each counts half of each, the whole group counts exactly.
    legacy = [({'resources:FPGA': '1', 'resources:PGPU': '1'}, 2)]
    assert quotas.usage(stored, legacy) == {
        'accelerator_requests': 6, 'class:FPGA': 4, 'class:VGPU': 1,
        'class:PGPU': 1}
    # Half a group rounds up.
    assert quotas.usage([], [({'resources:FPGA': '1',
                               'resources:PGPU': '1'}, 1)]) == {
        'accelerator_requests': 1, 'class:FPGA': 1, 'class:PGPU': 1}
    assert quotas.usage([], []) == {'accelerator_requests': 0}
    assert json.loads(stored[0][0]) == {'FPGA': 1}


def test_require_limits_only_listed_resources_without_a_registered_one():
    names = ['accelerator_requests', 'class:FPGA', 'class:PGPU']
    registered = {'class:PGPU': 4}
    assert quotas.limited_names(names, registered, 'require',
                                ['accelerator_requests']) == [
        'accelerator_requests', 'class:PGPU']
    assert quotas.effective_limits(names, registered, {'class:PGPU': 2},
                                   'require', ['accelerator_requests']) == {
        'accelerator_requests': 0, 'class:PGPU': 2}


def test_ignore_leaves_listed_resources_without_a_registered_one_unlimited():
    names = ['accelerator_requests', 'class:FPGA', 'class:PGPU']
    assert quotas.limited_names(names, {'class:PGPU': 4}, 'ignore',
                                ['accelerator_requests']) == [
        'class:FPGA', 'class:PGPU']
    assert quotas.effective_limits(names, {'class:PGPU': 4}, {}, 'ignore',
                                   ['accelerator_requests']) == {
        'class:FPGA': 0, 'class:PGPU': 4}


def test_over_limits_names_resource_limit_usage_and_request():
    limits = {'accelerator_requests': 5, 'class:FPGA': 2, 'class:PGPU': -1}
    usage = {'accelerator_requests': 4, 'class:FPGA': 2, 'class:PGPU': 100}
    requested = {'accelerator_requests': 1, 'class:FPGA': 1,
                 'class:PGPU': 1}
    over = quotas.over_limits(limits, usage, requested)
    assert over == [quotas.OverLimit('class:FPGA', 2, 2, 1)]
    assert str(over[0]) == 'class:FPGA: limit 2, usage 2, requested 1'
    # At the limit exactly is allowed.
    assert quotas.over_limits({'class:FPGA': 3}, usage, requested) == []


def test_unregistered_lists_names_without_a_registered_limit():
    assert quotas.unregistered(['class:B', 'class:A', 'class:C'],
                               {'class:C': 1}) == ['class:A', 'class:B']


def test_a_group_of_alternatives_counts_as_its_first():
    group = {'accel:function_id': 'f', 'alternatives': [
        {'resources:CUSTOM_H100': '2', 'trait:CUSTOM_NVLINK': 'required'},
        {'resources:CUSTOM_A100': '2'}]}
    assert quotas.group_classes(group) == [('CUSTOM_H100', 2)]
    assert quotas.arq_resources(group) == [{'CUSTOM_H100': 1}] * 2


def test_bounded_keeps_only_limits():
    assert quotas.bounded({'a': -1, 'b': 0, 'c': 3, 'd': -5}) == {
        'b': 0, 'c': 3}
    assert quotas.is_unlimited(quotas.UNLIMITED)
    assert not quotas.is_unlimited(0)
