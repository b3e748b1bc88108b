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

"""The conductor's fleet metrics collector: its families against the
golden file, its cache, and a database that fails
(cyborg.conductor.fleet_metrics; the queries are tested on every
database in tests/unit/db/test_fleet_metrics.py)."""

import datetime
import gc
import gzip
import json
import os
import threading

from prometheus_client import parser
import pytest

from cyborg.conductor import fleet_metrics
from cyborg.conductor import service as conductor_service
from cyborg.db import fleet_metrics as fleet_db
from cyborg.domain import partitions
from cyborg.domain import utilization

GOLDEN = os.path.join(os.path.dirname(__file__), 'fleet_metrics_golden.json')
NOW = datetime.datetime(2026, 11, 27, 12, 0, 0)
CONTEXT = object()


def golden() -> dict:
    """{name: family} of the golden file (a list of families: name,
    type, label names, and the option it needs if any)."""
    with open(GOLDEN, encoding='utf-8') as f:
        return {family['name']: family for family in json.load(f)}


def _snapshot(**changes) -> fleet_db.FleetSnapshot:
    """A snapshot with a row of every kind."""
    values = dict(
        devices=[('h1', 'nvidia_gpu', '0x10de', 'T4', 'GPU', 'healthy',
                  'enabled', 2)],
        deployables=[('h1', 'PGPU', 'enabled', 'healthy', False, False,
                      1, 1, 1, 0)],
        arqs=[('Bound', None, 1), ('BindFailed', 'ProgramFailed: x', 2)],
        bound=[('p1', 'PGPU', 1)],
        utilization=[('h1', '0000:3b:00.0', utilization.stored_form(
            dict.fromkeys(utilization.METRICS, 1), NOW))],
        agents=[('h1', NOW, 1, 0)],
        outbox_depth=1, outbox_oldest=NOW,
        partitions=[('h1', '0000:41:00.0', partitions.stored_form(
            partitions.state('homogeneous', '1g.18gb', True, 2, 5)))])
    values.update(changes)
    return fleet_db.FleetSnapshot(**values)


class _Database:
    """Stands in for cyborg.db.fleet_metrics.fleet_snapshot: counts the
    reads; ``gate`` (if set) holds each read until it is set."""

    def __init__(self):
        self.reads = 0
        self.error: Exception | None = None
        self.gate: threading.Event | None = None
        self.reading = threading.Event()

    def __call__(self, context, by_project=False):
        assert context is CONTEXT
        self.reads += 1
        self.reading.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.error is not None:
            raise self.error
        return _snapshot()


@pytest.fixture
def database(monkeypatch):
    fake = _Database()
    monkeypatch.setattr(fleet_db, 'fleet_snapshot', fake)
    return fake


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _collector(conf, cache_seconds=5, project_label=False, clock=None):
    conf.set_override('fleet_cache_seconds', cache_seconds, group='metrics')
    conf.set_override('project_label', project_label, group='metrics')
    return fleet_metrics.FleetCollector(conf, lambda: CONTEXT,
                                        clock=clock or _Clock(),
                                        utcnow=lambda: NOW)


def _parse(text: str) -> dict:
    """{name: family} of the text exposition ``text``, as Prometheus'
    own text parser (prometheus_client's) reads it."""
    return {family.name: family
            for family in parser.text_string_to_metric_families(text)}


def _scrape(collector) -> list:
    text, compressed = collector.exposition()
    assert gzip.decompress(compressed) == text
    return list(_parse(text.decode()).values())


def _build(collector, snapshot, now=NOW) -> dict:
    return _parse(collector.build(snapshot, now).text())


@pytest.mark.parametrize('project_label', [False, True])
def test_the_families_and_their_labels_are_the_golden_ones(
        conf, database, project_label):
    expected = {name: family for name, family in golden().items()
                if project_label or family.get('option') != 'project_label'}
    scraped = _scrape(_collector(conf, project_label=project_label))
    assert {family.name for family in scraped} == set(expected)
    for family in scraped:
        assert family.type == expected[family.name]['type'], family.name
        assert family.samples, family.name
        for sample in family.samples:
            assert sample.name == family.name
            assert sorted(sample.labels) == sorted(
                expected[family.name]['labels']), family.name


def test_the_golden_file_is_what_the_collector_declares(conf):
    assert {name: list(labels) for name, (_help, labels)
            in fleet_metrics.FAMILIES.items()} == {
        name: family['labels'] for name, family in golden().items()}


def test_partitions_are_what_the_agent_reported(conf):
    families = _build(_collector(conf), _snapshot(partitions=[
        ('h1', '0000:41:00.0', partitions.stored_form(partitions.state(
            'homogeneous', '2g.35gb', True, 1, 2))),
        ('h1', '0000:42:00.0', partitions.stored_form(partitions.state(
            'homogeneous', None, False, 0, 0))),
        # Not a partition document: no series.
        ('h2', '0000:41:00.0', '{"mode": "dynamic"}')]))
    assert sorted((s.labels['device'], s.labels['profile'],
                   s.labels['kind'], s.value) for s in
                  families['cyborg_device_partitions'].samples) == [
        ('0000:41:00.0', '2g.35gb', 'creatable', 2.0),
        ('0000:41:00.0', '2g.35gb', 'in_use', 1.0),
        ('0000:42:00.0', '', 'creatable', 0.0),
        ('0000:42:00.0', '', 'in_use', 0.0)]


def test_every_reading_an_agent_may_report_has_a_series():
    assert set(fleet_metrics.READINGS) == set(utilization.METRICS)


def test_creating_computes_nothing(conf, database):
    _collector(conf)
    assert database.reads == 0


def test_scrapes_within_the_cache_window_cost_one_computation(
        conf, database):
    clock = _Clock()
    collector = _collector(conf, cache_seconds=5, clock=clock)
    first = collector.exposition()
    clock.now += 4.9
    assert collector.exposition() is first
    assert database.reads == 1
    clock.now += 0.1
    assert collector.exposition() is not first
    assert database.reads == 2


def test_without_a_cache_every_scrape_computes(conf, database):
    clock = _Clock()
    collector = _collector(conf, cache_seconds=0, clock=clock)
    for _ in range(3):
        clock.now += 0.001
        collector.exposition()
    assert database.reads == 3


@pytest.mark.parametrize('cache_seconds', [0, 5])
def test_scrapes_at_once_compute_once(conf, database, cache_seconds):
    """A scrape arriving while a computation is under way waits for it
    and takes its result, with or without a cache."""
    clock = _Clock()
    collector = _collector(conf, cache_seconds=cache_seconds, clock=clock)
    database.gate = threading.Event()
    results = []
    first = threading.Thread(target=lambda: results.append(
        collector.exposition()))
    first.start()
    assert database.reading.wait(10)
    # Without a cache, the second shares a computation that started no
    # earlier than it arrived (here: at the same time); with one, any
    # computation that started within the window (here: a second ago).
    clock.now += 0 if cache_seconds == 0 else 1
    second = threading.Thread(target=lambda: results.append(
        collector.exposition()))
    second.start()
    database.gate.set()
    first.join(10)
    second.join(10)
    assert len(results) == 2
    assert results[0] is results[1]
    assert database.reads == 1


def test_a_database_error_answers_no_fleet_series_and_is_retried(
        conf, database, caplog):
    clock = _Clock()
    collector = _collector(conf, cache_seconds=5, clock=clock)
    database.error = RuntimeError('the database is down')
    assert collector.exposition() == (b'', b'')
    assert 'Could not read the fleet metrics' in caplog.text
    database.error = None
    assert collector.exposition()[0]
    assert database.reads == 2


def test_readings_without_a_report_time_have_no_age(conf):
    collector = _collector(conf)
    snapshot = _snapshot(utilization=[
        ('h1', 'a', '{"metrics": {"gpu_percent": 50}}'),
        ('h1', 'b', '{"metrics": {"vfs_total": 4}, "reported_at": "soon"}'),
        ('h1', 'c', 'not json')])
    families = _build(collector, snapshot)
    assert [s.labels['device'] for s in
            families['cyborg_device_utilization_ratio'].samples] == ['a']
    assert [s.labels['device'] for s in
            families['cyborg_device_vfs'].samples] == ['b']
    assert families['cyborg_device_utilization_age_seconds'].samples == []


def test_ages_are_never_negative(conf):
    """A report stamped by a conductor whose clock is ahead."""
    later = NOW + datetime.timedelta(seconds=3)
    families = _build(_collector(conf), _snapshot(
        agents=[('h1', later, 0, 0)], outbox_oldest=later))
    assert [s.value for s in families[
        'cyborg_agent_last_report_age_seconds'].samples] == [0]
    assert [s.value for s in families[
        'cyborg_nova_event_outbox_oldest_age_seconds'].samples] == [0]


def test_the_conductor_serves_the_fleet_metrics(conf, database):
    sources = conductor_service.metrics_sources(conf, lambda: CONTEXT)
    assert [type(c) for c in sources] == [fleet_metrics.FleetCollector]
    assert sources[0].exposition()[0]
    assert database.reads == 1


@pytest.mark.parametrize('status, health, missing, retained, free', [
    ('enabled', 'healthy', False, False, 3),
    ('maintaining', 'healthy', False, False, 0),
    ('enabled', 'unhealthy', False, False, 0),
    ('enabled', 'healthy', True, False, 0),
    ('enabled', 'healthy', False, True, 0),
])
def test_only_accelerators_offered_to_the_scheduler_are_free(
        conf, status, health, missing, retained, free):
    families = _build(_collector(conf), _snapshot(deployables=[
        ('h1', 'FPGA', status, health, missing, retained, 4, 1, 1, 3)]))
    assert {s.labels['state']: s.value for s in families[
        'cyborg_accelerators'].samples} == {
        'total': 4, 'allocated': 1, 'free': free}


def test_the_cycle_collector_is_paused_only_while_computing(
        conf, database, monkeypatch):
    paused = []

    def read(context, by_project=False):
        paused.append(not gc.isenabled())
        return database(context, by_project)

    monkeypatch.setattr(fleet_db, 'fleet_snapshot', read)
    clock = _Clock()
    collector = _collector(conf, cache_seconds=0, clock=clock)
    assert gc.isenabled()
    assert collector.exposition()[0]
    assert gc.isenabled()
    clock.now += 1
    database.error = RuntimeError('the database is down')
    assert collector.exposition() == (b'', b'')
    assert gc.isenabled()
    assert paused == [True, True]


def test_label_values_are_escaped_as_the_text_format_wants(conf):
    host = 'h"1\\x\ny'
    families = _build(_collector(conf), _snapshot(
        agents=[(host, NOW, 0, 0)],
        utilization=[(host, 'a', utilization.stored_form(
            {'gpu_percent': 50}, NOW))]))
    [sample] = families['cyborg_agent_last_report_age_seconds'].samples
    assert sample.labels == {'host': host}
    [sample] = families['cyborg_device_utilization_ratio'].samples
    assert sample.labels == {'host': host, 'device': 'a', 'metric': 'gpu'}
    assert sample.value == 0.5


def test_accelerators_add_up_per_host_and_resource_class(conf):
    rows = [('h1', 'PGPU', 'enabled', 'healthy', False, False, 2, 1, 1, 1),
            ('h1', 'PGPU', 'enabled', 'unhealthy', False, False, 4, 0, 0,
             4),
            ('h1', None, 'enabled', 'healthy', False, False, 1, 0, 0, 1),
            ('h2', 'PGPU', 'enabled', 'healthy', False, False, 8, 2, 1, 6)]
    families = _build(_collector(conf), _snapshot(deployables=rows))
    assert {(s.labels['host'], s.labels['resource_class'],
             s.labels['state']): s.value
            for s in families['cyborg_accelerators'].samples} == {
        ('h1', 'PGPU', 'total'): 6, ('h1', 'PGPU', 'allocated'): 1,
        ('h1', 'PGPU', 'free'): 1, ('h1', '', 'total'): 1,
        ('h1', '', 'allocated'): 0, ('h1', '', 'free'): 1,
        ('h2', 'PGPU', 'total'): 8, ('h2', 'PGPU', 'allocated'): 2,
        ('h2', 'PGPU', 'free'): 6}
    assert {s.labels['resource_class']: s.value
            for s in families['cyborg_bound_arqs'].samples} == {
        'PGPU': 2, '': 0}


def test_a_device_reading_is_read_again_only_when_it_changed(
        conf, monkeypatch):
    collector = _collector(conf)
    read = []
    from_stored = utilization.from_stored

    def counting(text, checked=True):
        read.append(text)
        return from_stored(text, checked)

    monkeypatch.setattr(utilization, 'from_stored', counting)
    first = utilization.stored_form({'gpu_percent': 10}, NOW)
    second = utilization.stored_form({'gpu_percent': 20}, NOW)
    rows = [('h1', 'a', first), ('h1', 'b', first)]
    assert _ratios(collector, rows) == {'a': 0.1, 'b': 0.1}
    assert len(read) == 2
    later = NOW + datetime.timedelta(seconds=30)
    assert _ratios(collector, [rows[0], ('h1', 'b', second)],
                   later) == {'a': 0.1, 'b': 0.2}
    assert read[2:] == [second]
    # The age follows the clock, not the kept lines.
    families = _build(collector, _snapshot(utilization=rows), later)
    assert {s.value for s in families[
        'cyborg_device_utilization_age_seconds'].samples} == {30.0}


def test_an_unreadable_reading_is_read_again_only_when_it_changed(
        conf, monkeypatch):
    collector = _collector(conf)
    read = []
    from_stored = utilization.from_stored

    def counting(text, checked=True):
        read.append(text)
        return from_stored(text, checked)

    monkeypatch.setattr(utilization, 'from_stored', counting)
    rows = [('h1', 'a', 'not json'),
            ('h1', 'b', utilization.stored_form({'gpu_percent': 10}, NOW))]
    assert _ratios(collector, rows) == {'b': 0.1}
    assert _ratios(collector, rows) == {'b': 0.1}
    assert read == ['not json', rows[1][2]]
    fixed = utilization.stored_form({'gpu_percent': 30}, NOW)
    assert _ratios(collector, [('h1', 'a', fixed), rows[1]]) == {
        'a': 0.3, 'b': 0.1}
    assert read[2:] == [fixed]


def _ratios(collector, rows, now=NOW) -> dict:
    families = _build(collector, _snapshot(utilization=rows), now)
    return {s.labels['device']: s.value
            for s in families['cyborg_device_utilization_ratio'].samples}


def test_every_family_has_its_help_and_type_without_samples(conf):
    families = _build(_collector(conf), fleet_db.FleetSnapshot(
        devices=[], deployables=[], arqs=[], bound=[], utilization=[],
        agents=[], outbox_depth=0, outbox_oldest=None))
    assert set(families) == set(_collector(conf).names())
    assert all(family.type == 'gauge' for family in families.values())
