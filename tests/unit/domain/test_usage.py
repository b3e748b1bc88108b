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

"""Audit periods, binding intervals and usage records."""

import datetime

import pytest

from cyborg.domain import usage
from cyborg.domain import utilization

HOUR = 3600


def t(hour: int, minute: int = 0, second: int = 0,
      microsecond: int = 0) -> datetime.datetime:
    return datetime.datetime(2030, 1, 1, hour, minute, second, microsecond)


def interval(uuid='a', bound_at=None, unbound_at=None, **kw):
    values = dict(arq_uuid=uuid, project_id='p1', instance_uuid='i1',
                  device_profile_name='gpu', resource_class='PGPU',
                  vendor='10de', model='2330', host='compute-1',
                  bound_at=bound_at or t(10, 15), unbound_at=unbound_at)
    values.update(kw)
    return usage.Interval(**values)


@pytest.mark.parametrize('moment, length, start', [
    (t(10, 0), HOUR, t(10, 0)),
    (t(10, 59, 59, 999999), HOUR, t(10, 0)),
    (t(11, 0), HOUR, t(11, 0)),
    (t(10, 7, 30), 300, t(10, 5)),
    # Aligned on the epoch, not on the day: 7 hours do not divide a day.
    (t(10, 0), 7 * HOUR, t(6, 0)),
])
def test_period_start_is_aligned_on_the_epoch(moment, length, start):
    assert usage.period_start(moment, length) == start


def test_the_first_audit_is_of_the_last_ended_period_only():
    assert usage.periods_to_audit(None, t(12, 5), HOUR) == [
        (t(11), t(12))]


def test_nothing_to_audit_until_the_current_period_ends():
    assert usage.periods_to_audit(t(12), t(12, 59, 59), HOUR) == []


def test_periods_follow_the_last_audited_one_without_a_gap():
    assert usage.periods_to_audit(t(9), t(12, 1), HOUR) == [
        (t(9), t(10)), (t(10), t(11)), (t(11), t(12))]


def test_a_changed_period_length_starts_with_a_short_period():
    # Audited on the hour until 10:00; now every two hours.
    assert usage.periods_to_audit(t(11), t(14, 30), 2 * HOUR) == [
        (t(11), t(12)), (t(12), t(14))]


def test_catch_up_is_limited_to_the_latest_periods():
    periods = usage.periods_to_audit(t(0), t(20, 30), HOUR, limit=3)
    assert periods == [(t(17), t(18)), (t(18), t(19)), (t(19), t(20))]


@pytest.mark.parametrize('bound_at, unbound_at, seconds', [
    (t(10, 15), None, 45 * 60),           # bound into the next period
    (t(9, 0), None, HOUR),                # the whole period
    (t(9, 0), t(10, 30), 30 * 60),        # unbound in the period
    (t(10, 15), t(10, 45), 30 * 60),      # within the period
    (t(9, 0), t(10, 0), 0),               # ended at its start
    (t(11, 0), None, 0),                  # bound at its end
    (t(10, 59, 59, 500000), None, 0.5),   # microseconds count
])
def test_seconds_within_a_period(bound_at, unbound_at, seconds):
    found = interval(bound_at=bound_at, unbound_at=unbound_at)
    assert found.seconds_within(t(10), t(11)) == seconds


def test_one_record_per_arq_with_the_seconds_of_all_its_intervals():
    intervals = [
        interval('b', t(10, 0), t(10, 10), instance_uuid='old'),
        interval('a', t(9, 0), t(10, 30)),
        interval('b', t(10, 20), None, instance_uuid='new'),
        # Another period only: no record.
        interval('c', t(9, 0), t(9, 30)),
    ]
    found = usage.records(intervals, t(10), t(11))
    assert [(r['arq_uuid'], r['bound_seconds'], r['instance_uuid'])
            for r in found] == [('a', 1800, 'i1'), ('b', 600 + 2400, 'new')]
    assert found[0]['audit_period_beginning'] == '2030-01-01T10:00:00Z'
    assert found[0]['audit_period_ending'] == '2030-01-01T11:00:00Z'
    assert set(found[0]) == set(usage.FIELDS) | {
        'audit_period_beginning', 'audit_period_ending', 'bound_seconds',
        'latest_utilization', 'mean_gpu_percent', 'utilization_samples'}


def test_the_latest_reading_only_for_an_arq_bound_at_the_end():
    reading = utilization.stored_form({'gpu_percent': 40.0}, t(11, 0, 30))
    found = usage.records([
        interval('a', t(10, 15), None, utilization=reading),
        # Unbound after the end (before the audit): held it at the end.
        interval('b', t(10, 15), t(11, 0, 10), utilization=reading),
        interval('c', t(10, 15), t(10, 30), utilization=reading),
        interval('d', t(10, 15), None, utilization=None),
    ], t(10), t(11))
    assert [r['latest_utilization'] for r in found] == [
        {'metrics': {'gpu_percent': 40.0},
         'reported_at': '2030-01-01T11:00:30Z'}] * 2 + [None, None]


def test_seconds_of_consecutive_periods_add_up():
    intervals = [interval('a', t(9, 20, 0, 250000), t(12, 10)),
                 interval('a', t(12, 40), None)]
    total = sum(r['bound_seconds']
                for start, end in usage.periods_to_audit(t(9), t(13, 1),
                                                         HOUR)
                for r in usage.records(intervals, start, end))
    assert total == (t(12, 10) - t(9, 20, 0, 250000)).total_seconds() + 1200


def test_the_stored_form_is_stable():
    record = usage.records([interval()], t(10), t(11))[0]
    assert usage.dumps(record) == usage.dumps(dict(reversed(
        list(record.items()))))


@pytest.mark.parametrize('summed, expected', [
    (None, {'mean_gpu_percent': None, 'utilization_samples': 0}),
    ((0.0, 0), {'mean_gpu_percent': None, 'utilization_samples': 0}),
    ((100.0, 3), {'mean_gpu_percent': 33.333, 'utilization_samples': 3}),
    ((0.0, 2), {'mean_gpu_percent': 0.0, 'utilization_samples': 2}),
])
def test_mean_reading(summed, expected):
    assert usage.mean_reading(summed) == expected
