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

"""Taint rules: selectors, what each effect does, a rule's status."""

import pytest

from cyborg.domain import taint_rules as rules

DEVICE = {'hostname': 'compute-12', 'driver': 'nvidia_gpu_driver',
          'vendor': '10de', 'model': 'A100', 'address': '0000:5e:00.0'}


@pytest.mark.parametrize('selector', [
    {'host': 'compute-12'}, {'host': 'compute-*'}, {'host': 'compute-1?'},
    {'driver': 'nvidia_gpu_driver', 'vendor': '10de', 'model': 'A100'},
    {'address': '0000:5e:*'}, {'address': '0000:5[ef]:00.0'},
    {'attribute': {'zone': 'a'}},
    {'attribute': {'zone': 'a', 'rc': 'PGPU'}, 'host': '*'},
])
def test_matching_selectors(selector):
    assert rules.check_selector(selector) is selector
    assert rules.matches(selector, DEVICE,
                         {'zone': {'a', 'b'}, 'rc': {'PGPU'}})


@pytest.mark.parametrize('selector', [
    {'host': 'compute-1'}, {'host': 'COMPUTE-*'}, {'driver': 'nvidia'},
    {'vendor': '10DE'}, {'model': 'A10'}, {'address': '0000:5f:*'},
    {'attribute': {'zone': 'c'}}, {'attribute': {'other': 'a'}},
    {'host': 'compute-*', 'model': 'H100'},
])
def test_selectors_that_do_not_match(selector):
    assert not rules.matches(rules.check_selector(selector), DEVICE,
                             {'zone': {'a'}})


def test_a_device_without_a_driver_matches_no_driver_criterion():
    assert not rules.matches({'driver': 'x'}, dict(DEVICE, driver=None))
    assert not rules.matches({'attribute': {'a': 'b'}}, DEVICE, None)


@pytest.mark.parametrize('selector', [
    {}, None, [], 'host', {'hostname': 'x'}, {'host': ''}, {'host': 3},
    {'host': 'x' * 256}, {'attribute': {}}, {'attribute': 'a=b'},
    {'attribute': {'a': 1}}, {'attribute': {'': 'b'}},
    {'attribute': {'k%d' % i: 'v' for i in range(17)}},
])
def test_invalid_selectors(selector):
    with pytest.raises(ValueError):
        rules.check_selector(selector)


def test_exact_criteria_and_attributes():
    selector = {'host': 'c*', 'address': 'a', 'driver': 'd', 'vendor': 'v',
                'model': 'm'}
    assert rules.exact_criteria(selector) == {'driver': 'd', 'vendor': 'v',
                                              'model': 'm'}
    assert not rules.needs_attributes(selector)
    assert rules.needs_attributes({'attribute': {'a': 'b'}})


def test_effects():
    assert rules.is_dry_run('None')
    assert not rules.is_dry_run('NoSchedule')
    assert rules.marks_arqs('NoExecute')
    assert not rules.marks_arqs('NoSchedule')
    with pytest.raises(ValueError):
        rules.is_dry_run('Drain')


def test_rule_taint_is_an_admin_taint():
    taint = rules.rule_taint('example.drain', 'NoExecute', None, None)
    assert (taint.source.value, taint.value, taint.reason) == ('admin', '',
                                                               '')
    with pytest.raises(ValueError):
        rules.rule_taint('Bad Key', 'NoSchedule')
    with pytest.raises(ValueError):
        rules.rule_taint('ok', 'Sometimes')


def test_status_lists_devices_arqs_instances_and_projects_sorted():
    devices = [dict(DEVICE, uuid='u2', address='0000:5f:00.0'),
               dict(DEVICE, uuid='u1')]
    arqs = [{'uuid': 'a2', 'instance_uuid': 'i1', 'project_id': 'p1'},
            {'uuid': 'a1', 'instance_uuid': 'i1', 'project_id': 'p1'},
            {'uuid': 'a3', 'instance_uuid': None, 'project_id': None}]
    assert rules.status(devices, arqs) == {
        'devices': [
            {'uuid': 'u1', 'hostname': 'compute-12',
             'address': '0000:5e:00.0'},
            {'uuid': 'u2', 'hostname': 'compute-12',
             'address': '0000:5f:00.0'}],
        'arqs': ['a1', 'a2', 'a3'], 'instances': ['i1'], 'projects': ['p1']}
