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

"""The utilization metrics and what a report changes
(cyborg.domain.utilization)."""

import datetime
import json

import pytest

from cyborg.domain import utilization

NOW = datetime.datetime(2026, 11, 26, 0, 30, 5, 123456)
LATER = NOW + datetime.timedelta(seconds=60)


@pytest.mark.parametrize('metrics, expected', [
    ({'gpu_percent': 37}, {'gpu_percent': 37.0}),
    ({'gpu_percent': 100.0, 'memory_used_mib': 10.0},
     {'gpu_percent': 100.0, 'memory_used_mib': 10}),
    ({'gpu_percent': 100.5}, {}),
    ({'gpu_percent': float('nan')}, {}),
    ({'memory_total_mib': float('inf')}, {}),
    ({'memory_used_mib': 1.5}, {}),
    ({'vfs_in_use': -1}, {}),
    ({'vfs_total': True}, {}),
    ({'vfs_total': '4'}, {}),
    ({'temperature': 40}, {}),
    ('not a dict', {}),
])
def test_clean_keeps_known_metrics_with_good_values(metrics, expected):
    cleaned = utilization.clean(metrics)
    assert cleaned == expected
    assert all(type(v) is utilization.METRICS[k].kind
               for k, v in cleaned.items())


def test_every_metric_has_a_unit():
    assert set(utilization.METRICS) == {
        'gpu_percent', 'memory_used_mib', 'memory_total_mib', 'vfs_in_use',
        'vfs_host', 'vfs_total'}
    assert utilization.GPU_PERCENT.unit is utilization.Unit.PERCENT


def test_vf_usage():
    assert utilization.vf_usage(['vfio-pci', None, 'iavf', 'vfio-pci'],
                                frozenset(['vfio-pci'])) == {
        'vfs_total': 4, 'vfs_in_use': 2, 'vfs_host': 1}


def test_stored_form_round_trips():
    text = utilization.stored_form({'gpu_percent': 5.0}, NOW)
    assert json.loads(text) == {'metrics': {'gpu_percent': 5.0},
                                'reported_at': '2026-11-26T00:30:05Z'}
    assert utilization.from_stored(text) == json.loads(text)
    assert utilization.from_stored(None) is None
    assert utilization.from_stored('{broken') is None
    assert utilization.from_stored('[]') is None


def test_changes():
    same = utilization.stored_form({'gpu_percent': 5.0}, NOW)
    rows = {'a': ('nvidia_gpu_driver', same),
            'b': ('nvidia_gpu_driver', same),
            'c': ('intel_qat_driver', same),
            'd': ('intel_qat_driver', None),
            'e': ('amd_gpu_driver', same)}
    found = utilization.changes(
        rows, {'a': {'gpu_percent': 5.0}, 'b': {'gpu_percent': 6.0},
               'd': {'vfs_total': 2}},
        failed_drivers=['amd_gpu_driver'], reported_at=LATER)
    # a: unchanged, with the latest report's time; c: no longer
    # measured; e: its driver failed, kept as it was.
    assert found == {
        'a': utilization.stored_form({'gpu_percent': 5.0}, LATER),
        'b': utilization.stored_form({'gpu_percent': 6.0}, LATER),
        'c': None,
        'd': utilization.stored_form({'vfs_total': 2}, LATER)}
    assert utilization.changes(rows, {}, ['nvidia_gpu_driver',
                                          'intel_qat_driver',
                                          'amd_gpu_driver'], LATER) == {}


def test_a_report_within_the_same_second_writes_nothing_again():
    same = utilization.stored_form({'gpu_percent': 5.0}, NOW)
    rows = {'a': ('nvidia_gpu_driver', same)}
    assert utilization.changes(rows, {'a': {'gpu_percent': 5.0}}, [],
                               NOW.replace(microsecond=900)) == {}
