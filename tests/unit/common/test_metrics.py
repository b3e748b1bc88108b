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

"""The process metrics: their names (the golden file), the helpers the
code calls, the multiprocess directory and the /metrics listener."""

import gzip
import json
import logging
import os
import re
import socket
import subprocess
import sys
import urllib.request

import prometheus_client
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.parser import text_string_to_metric_families
import pytest

from cyborg.common import metrics

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                      'metrics_golden.json')
LABEL = re.compile(r'^[a-z][a-z0-9_]*$')


def _defined() -> list[dict]:
    """Every metric object cyborg.common.metrics defines."""
    found = []
    for value in vars(metrics).values():
        if isinstance(value, prometheus_metrics.MetricWrapperBase):
            # prometheus_client keeps a counter's name without _total.
            suffix = '_total' if value._type == 'counter' else ''
            found.append({'name': value._name + suffix, 'type': value._type,
                          'labels': list(value._labelnames)})
    return sorted(found, key=lambda family: family['name'])


def test_the_metrics_are_those_of_the_golden_file():
    """A rename, a new label or a new family is deliberate: update
    tests/unit/metrics_golden.json (and the admin guide) with it."""
    with open(GOLDEN) as f:
        golden = json.load(f)
    assert _defined() == golden


def test_every_metric_is_in_the_registry_scrapes_read():
    registered = {family.name for family in metrics.REGISTRY.collect()}
    assert registered == {re.sub('_total$', '', family['name'])
                          for family in _defined()}


def test_names_follow_the_prometheus_conventions():
    for family in _defined():
        name = family['name']
        assert name.startswith('cyborg_'), name
        assert name.endswith('_total') == (family['type'] == 'counter'), name
        if family['type'] == 'histogram':
            assert name.endswith('_seconds'), name
        assert all(LABEL.match(label) for label in family['labels']), name


def _value(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0


def test_api_request_bounds_the_method():
    before = _value('cyborg_api_requests_total', method='other',
                    route='/v2', status='405')
    metrics.api_request('BREW', '/v2', 405, 0.01)
    assert _value('cyborg_api_requests_total', method='other', route='/v2',
                  status='405') == before + 1
    assert metrics.method_label('PATCH') == 'PATCH'
    assert metrics.method_label(None) == 'other'


def test_rpc_call_times_calls_and_counts_errors_by_class():
    count = ('cyborg_rpc_call_duration_seconds_count',)
    before = _value(*count, topic='t', method='m')
    with metrics.rpc_call('t', 'm'):
        pass
    with pytest.raises(TimeoutError):
        with metrics.rpc_call('t', 'm'):
            raise TimeoutError()
    assert _value(*count, topic='t', method='m') == before + 2
    assert _value('cyborg_rpc_call_errors_total', topic='t', method='m',
                  error='TimeoutError') >= 1


def test_a_cast_is_not_timed_but_its_errors_count():
    before = _value('cyborg_rpc_call_errors_total', topic='t',
                    method='cast_only', error='ValueError')
    with pytest.raises(ValueError):
        with metrics.rpc_call('t', 'cast_only', timed=False):
            raise ValueError()
    assert _value('cyborg_rpc_call_duration_seconds_count', topic='t',
                  method='cast_only') == 0
    assert _value('cyborg_rpc_call_errors_total', topic='t',
                  method='cast_only', error='ValueError') == before + 1


def test_vendor_tool_is_labelled_by_the_program_name():
    before = _value('cyborg_vendor_tool_runs_total', tool='xbutil',
                    result='failed')
    metrics.vendor_tool('/opt/xilinx/xrt/bin/xbutil', 'failed', 0.2)
    assert _value('cyborg_vendor_tool_runs_total', tool='xbutil',
                  result='failed') == before + 1


def test_glance_download_counts_results_and_bytes():
    ok = _value('cyborg_glance_downloads_total', result='ok')
    failed = _value('cyborg_glance_downloads_total', result='failed')
    size = _value('cyborg_glance_download_bytes_total')
    metrics.glance_download(True, 1000)
    metrics.glance_download(False)
    assert _value('cyborg_glance_downloads_total', result='ok') == ok + 1
    assert _value('cyborg_glance_downloads_total',
                  result='failed') == failed + 1
    assert _value('cyborg_glance_download_bytes_total') == size + 1000


# The listener ---------------------------------------------------------------


class _Fleet:
    """A text source as the conductor's fleet metrics are."""

    TEXT = (b'# HELP cyborg_test_fleet A test gauge.\n'
            b'# TYPE cyborg_test_fleet gauge\ncyborg_test_fleet 3\n')

    def exposition(self):
        return self.TEXT, gzip.compress(self.TEXT)


def _scrape(port: int, gzipped: bool = False) -> dict:
    request = urllib.request.Request(
        'http://127.0.0.1:%d/metrics' % port,
        headers={'Accept-Encoding': 'gzip'} if gzipped else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        assert response.headers['Content-Type'] == (
            prometheus_client.CONTENT_TYPE_LATEST)
        encoding = response.headers.get('Content-Encoding')
    assert encoding == ('gzip' if gzipped else None)
    # Each part is a gzip member: one stream to a gzip reader.
    text = (gzip.decompress(body) if gzipped else body).decode()
    return {family.name: family
            for family in text_string_to_metric_families(text)}


@pytest.mark.parametrize('gzipped', [False, True])
def test_serve_answers_the_process_metrics_and_the_sources(conf, gzipped):
    conf.set_override('listen_host', '127.0.0.1', group='metrics')
    metrics.bind_job('bound', 0.5)
    server = metrics.serve(conf, 0, [_Fleet()])
    port = server.port
    try:
        families = _scrape(port, gzipped)
    finally:
        server.stop()
    assert families['cyborg_test_fleet'].samples[0].value == 3
    assert 'cyborg_bind_job_duration_seconds' in families
    assert 'cyborg_api_requests' in families
    assert server.port is None
    with pytest.raises(OSError):
        _scrape(port)


def test_serve_does_nothing_when_disabled(conf):
    conf.set_override('enabled', False, group='metrics')
    server = metrics.serve(conf, 0)
    assert server.port is None
    server.stop()


def test_a_busy_port_is_logged_and_the_service_runs_on(conf, caplog):
    busy = socket.socket()
    busy.bind(('127.0.0.1', 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        with caplog.at_level(logging.ERROR, logger='cyborg.common.metrics'):
            server = metrics.serve(conf, port)
    finally:
        busy.close()
    assert server.port is None
    assert any('Cannot serve metrics on 127.0.0.1:%d' % port
               in r.getMessage() for r in caplog.records)


def test_listener_starts_and_stops_with_its_service(conf):
    listener = metrics.Listener(conf, 0)
    assert listener.server.port is None
    listener.start()
    port = listener.server.port
    assert 'cyborg_api_requests' in _scrape(port)
    listener.stop()
    with pytest.raises(OSError):
        _scrape(port)


# Several processes ----------------------------------------------------------

# A worker: counts two requests, then lives until its stdin closes.
_WORKER = '''
import sys
from cyborg.common import metrics
metrics.prepare_multiprocess_dir()
metrics.api_request('GET', '/v2', 200, 0.01)
metrics.api_request('GET', '/v2', 200, 0.02)
print('counted', flush=True)
sys.stdin.read()
'''


def _worker(env) -> subprocess.Popen:
    worker = subprocess.Popen([sys.executable, '-c', _WORKER], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert worker.stdout.readline() == 'counted\n'
    return worker


def test_one_scrape_adds_up_every_process(tmp_path, monkeypatch):
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    # The second starts beside the first: it empties nothing.
    workers = [_worker(env), _worker(env)]
    for worker in workers:
        worker.stdin.close()
        assert worker.wait(30) == 0
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    families = {family.name: family for family in
                text_string_to_metric_families(
                    metrics.exposition().decode())}
    [sample] = [s for s in families['cyborg_api_requests'].samples
                if s.labels['route'] == '/v2']
    assert sample.value == 4
    count = [s for s in families['cyborg_api_request_duration_seconds']
             .samples if s.name.endswith('_count')]
    assert [s.value for s in count] == [4]


def test_single_process_mode_without_the_variable(monkeypatch):
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    assert metrics.multiprocess_dir() is None
    metrics.prepare_multiprocess_dir()  # nothing to do
    assert b'cyborg_api_requests_total' in metrics.exposition()


def _pid_of_a_finished_process() -> int:
    process = subprocess.Popen(['true'])
    process.wait()
    return process.pid


def test_the_directory_is_emptied_when_no_other_process_lives(
        tmp_path, monkeypatch):
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    dead = _pid_of_a_finished_process()
    own = os.getpid()
    for name in ('counter_%d.db' % dead, 'histogram_%d.db' % dead,
                 'live_%d' % dead, 'counter_%d.db' % own):
        (tmp_path / name).write_bytes(b'x')
    metrics.prepare_multiprocess_dir()
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.startswith('.')) == [
        'counter_%d.db' % own, 'live_%d' % own]


def test_a_worker_starting_beside_live_ones_keeps_every_file(
        tmp_path, monkeypatch):
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    other = subprocess.Popen(['sleep', '30'])
    try:
        dead = _pid_of_a_finished_process()
        files = ['live_%d' % other.pid, 'counter_%d.db' % other.pid,
                 'counter_%d.db' % dead]
        for name in files:
            (tmp_path / name).write_bytes(b'x')
        metrics.prepare_multiprocess_dir()
    finally:
        other.kill()
        other.wait()
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.startswith('.')) == sorted(
        files + ['live_%d' % os.getpid()])


def test_only_get_and_head_are_answered():
    app = metrics.wsgi_app()
    statuses = []
    body = app({'REQUEST_METHOD': 'POST', 'PATH_INFO': '/metrics'},
               lambda status, headers: statuses.append(status))
    assert statuses == ['405 Method Not Allowed']
    assert body == [b'']
