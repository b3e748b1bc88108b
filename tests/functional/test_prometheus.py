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

"""The process metrics, as a real Prometheus server sees them.

A deployment of :mod:`tests.functional.nova_flow` (two conductors, two
agents on fixture hosts, Placement, a fake Nova) plus the API under
uWSGI (or gunicorn) with two worker processes in multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, ``[metrics] api_enabled``). Debian's
``prometheus`` scrapes the API's /metrics, both conductors' and both
agents' every second. A Nova flow runs against the two-worker API: a
bind on a host whose attach handles are prepared (a bind job that ends
Bound), a bind on a host whose preparations fail (a job that fails), the
deletion of both. Prometheus' query API must then give the values the
test knows: every API request it sent, per method, route template and
status, summed over both workers; the bind jobs' outcomes; the events
Nova took, per status; and the series of the RPC calls and Placement
requests exist. The conductors' fleet metrics too: ARQs per state, failed
binds, each deployable's total, allocated and free accelerators, the
devices and the agents' report age, during a bind and after the
deletions.
"""

import collections
import concurrent.futures
import os
import re
import shutil
import tempfile
import uuid as uuid_lib

from prometheus_client import multiprocess
from prometheus_client import registry as prometheus_registry
from prometheus_client.parser import text_string_to_metric_families
import pytest
import requests
import yaml

from tests.functional import nova_flow
from tests.functional import servers

PROMETHEUS = '/usr/bin/prometheus'
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'api-ref', 'source', 'samples')
GOOD = 'prom-good'
FAILING = 'prom-failing'
SCRAPE_TIMEOUT = 20
UUID = re.compile(r'/[0-9a-f]{8}-[0-9a-f-]{27}')


@pytest.fixture(scope='module')
def flow(postgres, rabbitmq, placement, work_dir):
    agents = [
        nova_flow.AgentSpec(GOOD, devices=1, handles=4, bus_base=0x50,
                            handle_type='MDEV'),
        nova_flow.AgentSpec(FAILING, devices=1, handles=4, bus_base=0x60,
                            handle_type='MDEV',
                            fake_driver={'prepare_failures': '*'}),
    ]
    with nova_flow.deployment('prom', postgres, rabbitmq, placement,
                              work_dir, agents) as deployment:
        yield deployment


@pytest.fixture(scope='module')
def api(flow):
    """The API in two worker processes, in multiprocess mode; its URL
    and its metrics directory."""
    config = os.path.join(flow.directory, 'api-workers.conf')
    with open(os.path.join(flow.directory, 'api.conf')) as f:
        text = f.read()
    assert '[metrics]' not in text
    with open(config, 'w') as f:
        f.write(text + '\n[metrics]\napi_enabled = True\n')
    metrics_dir = os.path.join(flow.directory, 'api-metrics')
    os.makedirs(metrics_dir)
    port = servers.free_port()
    argv = servers.wsgi_argv(servers.default_wsgi_server(),
                             'cyborg.wsgi.api:application', port, 2)
    env = dict(os.environ, CYBORG_CONFIG_FILES=config,
               PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    log = os.path.join(flow.directory, 'api-workers.log')
    process = servers.spawn(argv, log, env=env, cwd=flow.directory)
    url = 'http://%s:%d' % (servers.LOOPBACK, port)
    try:
        servers.wait_for(lambda: _answers(url + '/'), nova_flow.START_TIMEOUT,
                         'the two-worker API', process, log)
        yield url, metrics_dir
    finally:
        servers.kill_group(process)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope='module')
def prometheus(flow, api):
    """Prometheus scraping every process each second; its URL."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail('%s is missing: tools/install-test-deps.sh installs '
                    'it' % PROMETHEUS)
    directory = tempfile.mkdtemp(prefix='prometheus-', dir=flow.directory)
    api_url, _ = api

    def targets(prefix):
        return [{'targets': ['%s:%d' % (servers.LOOPBACK, port)
                             for name, port in flow.metrics_ports.items()
                             if name.startswith(prefix)]}]
    config = {
        'global': {'scrape_interval': '1s', 'scrape_timeout': '1s'},
        'scrape_configs': [
            {'job_name': 'cyborg-api',
             'static_configs': [{'targets': [api_url.split('//')[1]]}]},
            {'job_name': 'cyborg-conductor',
             'static_configs': targets('conductor-')},
            {'job_name': 'cyborg-agent',
             'static_configs': targets('agent-')},
        ],
    }
    config_file = os.path.join(directory, 'prometheus.yml')
    with open(config_file, 'w') as f:
        yaml.safe_dump(config, f)
    port = servers.free_port()
    log = os.path.join(flow.directory, 'prometheus.log')
    process = servers.spawn(
        [PROMETHEUS, '--config.file', config_file,
         '--storage.tsdb.path', os.path.join(directory, 'data'),
         '--web.listen-address', '%s:%d' % (servers.LOOPBACK, port),
         '--log.level', 'warn'], log)
    url = 'http://%s:%d' % (servers.LOOPBACK, port)
    try:
        servers.wait_for(lambda: _answers(url + '/-/ready'),
                         nova_flow.START_TIMEOUT, 'Prometheus', process, log)
        yield url
    finally:
        servers.kill_group(process)
        shutil.rmtree(directory, ignore_errors=True)


def query(prometheus: str, expression: str) -> dict[tuple, float]:
    """The instant vector of ``expression``: labels (sorted pairs) ->
    value."""
    response = requests.get(prometheus + '/api/v1/query',
                            params={'query': expression}, timeout=10)
    assert response.status_code == 200, response.text
    data = response.json()['data']
    assert data['resultType'] == 'vector', data
    return {tuple(sorted(r['metric'].items())): float(r['value'][1])
            for r in data['result']}


def wait_for_query(prometheus: str, expression: str, expected,
                   timeout: float = SCRAPE_TIMEOUT) -> dict:
    """Until ``expression`` gives ``expected`` (a dict, or a callable
    answering whether a result will do; scrapes are a second apart)."""
    last: dict = {}

    def matches():
        last.clear()
        last.update(query(prometheus, expression))
        return expected(last) if callable(expected) else last == expected
    try:
        nova_flow.wait_until(matches, timeout, expression, interval=0.5)
    except AssertionError:
        pass
    assert matches(), '%s: %s, not %s' % (expression, last, expected)
    return last


def route_of(path: str) -> str:
    """The route template of ``path`` (as the API labels it)."""
    path = UUID.sub('/{uuid}', path.split('?')[0])
    return path if path.startswith('/v2') else '/v2' + path


class Counting:
    """``flow.request``, to the API at ``url``, counting what it sent by
    (method, route, status)."""

    def __init__(self, flow, url):
        self.sent: collections.Counter = collections.Counter()
        self._flow = flow
        self._request = flow.request
        self._url = flow.url
        flow.url = url
        flow.request = self

    def restore(self):
        del self._flow.request
        self._flow.url = self._url

    def __call__(self, method, path, **kwargs):
        response = self._request(method, path, **kwargs)
        self.sent[method, route_of(path), str(response.status_code)] += 1
        return response


def _bind_one(flow, host: str, profile: str) -> str:
    """Create one ARQ and bind it on ``host``'s device (202); its
    uuid."""
    [arq] = flow.create_arqs(profile)
    [device] = flow.devices[host]
    response = flow.bind({arq['uuid']: {
        'hostname': host, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': str(uuid_lib.uuid4())}})
    assert response.status_code == 202, response.text
    return arq['uuid']


def _per_worker_requests(metrics_dir: str) -> list[float]:
    """The API requests each worker process counted (its file of the
    multiprocess directory, read alone)."""
    totals = []
    for name in sorted(os.listdir(metrics_dir)):
        if not (name.startswith('counter_') and name.endswith('.db')):
            continue
        alone = tempfile.mkdtemp(dir=metrics_dir + '-alone')
        shutil.copy(os.path.join(metrics_dir, name), alone)
        registry = prometheus_registry.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, alone)
        totals.append(sum(
            sample.value for family in registry.collect()
            if family.name == 'cyborg_api_requests'
            for sample in family.samples))
    return totals


def test_prometheus_sees_the_process_metrics_of_a_nova_flow(
        flow, api, prometheus):
    api_url, metrics_dir = api
    counting = Counting(flow, api_url)
    try:
        profile = flow.create_profile(
            [{'resources:FPGA': '1', 'trait:' + flow.trait: 'required'}])
        good = _bind_one(flow, GOOD, profile)
        failing = _bind_one(flow, FAILING, profile)
        arqs = flow.wait_resolved([good])
        assert arqs[good]['state'] == 'Bound'
        nova_flow.wait_until(
            lambda: counting('GET', '/v2/accelerator_requests/' + failing)
            .json()['state'] in ('BindFailing', 'BindFailed'), 30,
            'the failed bind')
        # Many at once: both single-threaded workers answer some.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: counting('GET', '/v2/device_profiles'),
                          range(40)))
        # Nova deletes what it bound and what failed.
        for uuid in (good, failing):
            response = counting('DELETE', '/v2/accelerator_requests',
                                service=True, params={'arqs': uuid})
            assert response.status_code == 204, response.text
    finally:
        counting.restore()

    # Every request, per route and status, over both workers (not
    # Prometheus' scrapes of /metrics, nor the fixture's wait for /).
    expected = {(('method', m), ('route', r), ('status', s)): float(n)
                for (m, r, s), n in counting.sent.items()}
    wait_for_query(
        prometheus, 'sum by (method, route, status) '
        '(cyborg_api_requests_total{job="cyborg-api",route!~"/|/metrics"})',
        expected)
    os.makedirs(metrics_dir + '-alone')
    served = [n for n in _per_worker_requests(metrics_dir) if n]
    assert len(served) >= 2, served
    wait_for_query(
        prometheus, 'sum by (method, route) (cyborg_api_request_duration_'
        'seconds_count{job="cyborg-api",route!~"/|/metrics"})',
        lambda got: sum(got.values()) == sum(counting.sent.values()))

    # The API's calls to the conductors: two binds.
    wait_for_query(
        prometheus, 'sum(cyborg_rpc_call_duration_seconds_count{job='
        '"cyborg-api",topic="cyborg-conductor",method="arq_bind"})',
        {(): 2.0})

    # One job bound, one failed, across both conductors.
    wait_for_query(
        prometheus, 'sum by (outcome) (cyborg_bind_job_duration_seconds_'
        'count{job="cyborg-conductor"})',
        {(('outcome', 'bound'),): 1.0, (('outcome', 'failed'),): 1.0})

    # The events Nova took, per status (a failure's event is repeated
    # until Nova deletes the ARQ, so the count is Nova's own).
    def nova_took():
        took = collections.Counter(e['status'] for e in flow.nova.accepted())
        return {(('result', 'accepted'), ('status', status)): float(n)
                for status, n in took.items()}
    wait_for_query(
        prometheus, 'sum by (status, result) '
        '(cyborg_nova_events_sent_total{job="cyborg-conductor"})',
        lambda got: got == nova_took() and len(got) == 2)

    # Placement requests of the conductors' syncs, and the agents'
    # reports to the conductors.
    wait_for_query(
        prometheus, 'sum by (method, status) (cyborg_placement_requests_'
        'total{job="cyborg-conductor"})',
        lambda got: got.get((('method', 'GET'), ('status', '200')), 0) > 0)
    wait_for_query(
        prometheus, 'sum by (instance) (cyborg_rpc_call_duration_seconds_'
        'count{job="cyborg-agent",method="report_inventory"})',
        lambda got: len(got) == 2 and all(got.values()))
    assert query(prometheus, 'sum by (job) (up)') == {
        (('job', 'cyborg-agent'),): 2.0,
        (('job', 'cyborg-api'),): 1.0,
        (('job', 'cyborg-conductor'),): 2.0}


def test_the_api_reference_sample_shows_real_families(api):
    """metrics-get-resp.txt (GET /metrics of the reference): every
    family and label set it shows is one the API serves."""
    api_url, _ = api
    # A request that calls the conductor (the RPC family of the sample).
    response = requests.post(api_url + '/v2/device_profiles', timeout=30,
                             json=[{'name': 'prom-%s' % uuid_lib.uuid4().hex,
                                    'groups': [{'resources:FPGA': '1'}]}])
    assert response.status_code == 201, response.text
    response = requests.get(api_url + '/metrics', timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers['Content-Type'].startswith('text/plain')
    served = {family.name: family for family in
              text_string_to_metric_families(response.text)}
    with open(os.path.join(SAMPLES, 'metrics-get-resp.txt')) as f:
        sample = list(text_string_to_metric_families(f.read()))
    for family in sample:
        assert family.name in served, family.name
        assert family.type == served[family.name].type
        labels = {frozenset(s.labels) for s in family.samples}
        served_labels = {frozenset(s.labels)
                         for s in served[family.name].samples}
        assert labels <= served_labels, (family.name, labels)


def test_prometheus_sees_the_fleet_metrics_of_a_nova_flow(flow, prometheus):
    """The conductors' fleet metrics (cyborg.conductor.fleet_metrics):
    a bound and a failed bind, then their deletion, as Prometheus sees
    them. Both conductors report the whole fleet, so every series comes
    twice (one per ``instance``)."""
    profile = flow.create_profile(
        [{'resources:FPGA': '1', 'trait:' + flow.trait: 'required'}])
    good = _bind_one(flow, GOOD, profile)
    failing = _bind_one(flow, FAILING, profile)
    assert flow.wait_resolved([good])[good]['state'] == 'Bound'
    nova_flow.wait_until(
        lambda: flow.request('GET', '/v2/accelerator_requests/' + failing)
        .json()['state'] in ('BindFailing', 'BindFailed'), 30,
        'the failed bind')
    fleet = '{job="cyborg-conductor"%s}'

    wait_for_query(prometheus, 'count(cyborg_fleet_scrape_duration_seconds'
                   + fleet % '' + ')', {(): 2.0})
    wait_for_query(prometheus, 'max by (state) (cyborg_arqs'
                   + fleet % ',state="Bound"' + ')',
                   {(('state', 'Bound'),): 1.0})
    # The failure, whatever its reason (BindFailing until the bind
    # timeout, then BindFailed).
    wait_for_query(prometheus, 'max(sum by (instance) '
                   '(cyborg_arq_bind_failures' + fleet % '' + '))',
                   {(): 1.0})
    [good_device] = flow.devices[GOOD]
    [failing_device] = flow.devices[FAILING]
    total = float(good_device.handles)
    wait_for_query(
        prometheus, 'max by (host, state) (cyborg_accelerators'
        + fleet % ',resource_class="FPGA"' + ')', {
            (('host', GOOD), ('state', 'total')): total,
            (('host', GOOD), ('state', 'allocated')): 1.0,
            (('host', GOOD), ('state', 'free')): total - 1,
            (('host', FAILING), ('state', 'total')): float(
                failing_device.handles),
            (('host', FAILING), ('state', 'allocated')): 0.0,
            (('host', FAILING), ('state', 'free')): float(
                failing_device.handles)})
    wait_for_query(prometheus, 'max by (host) (cyborg_devices'
                   + fleet % ',health="healthy",status="enabled"' + ')',
                   {(('host', GOOD),): 1.0, (('host', FAILING),): 1.0})
    wait_for_query(prometheus, 'count by (host) '
                   '(cyborg_agent_last_report_age_seconds'
                   + fleet % '' + ' < 60)',
                   {(('host', GOOD),): 2.0, (('host', FAILING),): 2.0})

    for uuid in (good, failing):
        response = flow.request('DELETE', '/v2/accelerator_requests',
                                service=True, params={'arqs': uuid})
        assert response.status_code == 204, response.text
    wait_for_query(prometheus, 'max by (state) (cyborg_arqs'
                   + fleet % ',state="Bound"' + ')',
                   {(('state', 'Bound'),): 0.0})
    wait_for_query(prometheus, 'max(sum by (instance) '
                   '(cyborg_arq_bind_failures' + fleet % '' + '))', {})
    wait_for_query(
        prometheus, 'max by (state) (cyborg_accelerators'
        + fleet % (',host="%s"' % GOOD) + ')', {
            (('state', 'total'),): total, (('state', 'allocated'),): 0.0,
            (('state', 'free'),): total})
