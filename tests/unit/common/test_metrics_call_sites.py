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

"""Each place that counts a process metric counts what it should (one
test per call site, at the lowest level that shows it)."""

import os
import threading
import time
from unittest import mock

import pytest
import requests

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers.utils import errors as tool_errors
from cyborg.accelerator.drivers.utils import runner
from cyborg.clients import glance
from cyborg.clients import nova as nova_client
from cyborg.clients import placement
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import rpc
from cyborg.conductor import binding
from cyborg.conductor import notifier
from cyborg.db import binding as binding_db
from tests.functional.fake_glance import FakeGlance
from tests.unit import fakes


def _value(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0


class _Delta:
    """The change of one sample over a block."""

    def __init__(self, name, **labels):
        self._name, self._labels = name, labels

    def __enter__(self):
        self.before = _value(self._name, **self._labels)
        return self

    def __exit__(self, *exc_info):
        self.value = _value(self._name, **self._labels) - self.before


def _jobs(outcome):
    return _Delta('cyborg_bind_job_duration_seconds_count', outcome=outcome)


# RPC (the caller's side) ---------------------------------------------------


class _Endpoint:
    def echo(self, context, value):
        return value

    def boom(self, context):
        raise ValueError('no')


def test_rpc_calls_are_timed_and_their_errors_counted():
    transport = rpc.LocalTransport()
    server = rpc.get_server(transport, 'metrics-topic', 'h', _Endpoint())
    server.start()
    client = rpc.get_client(transport, 'metrics-topic').prepare(timeout=5)
    context = cyborg_context.get_admin_context()
    try:
        with _Delta('cyborg_rpc_call_duration_seconds_count',
                    topic='metrics-topic', method='echo') as calls:
            assert client.call(context, 'echo', value=3) == 3
        with _Delta('cyborg_rpc_call_errors_total', topic='metrics-topic',
                    method='boom', error='ValueError') as failed:
            with pytest.raises(ValueError):
                client.call(context, 'boom')
    finally:
        server.stop()
        transport.cleanup()
    assert (calls.value, failed.value) == (1, 1)


# Bind jobs -------------------------------------------------------------------


def _binder():
    return binding.Binder('cond1', 1, 60, None, lambda rows: None)


def test_binds_done_at_once_count_as_bound():
    outcome = binding_db.BindOutcome(bound=['a1', 'a2'])
    with mock.patch.object(binding_db, 'bind', return_value=outcome), \
            _jobs('bound') as bound:
        _binder().bind(None, {uuid: {'hostname': 'h', 'device_rp_uuid': 'r',
                                     'instance_uuid': 'i'}
                              for uuid in ('a1', 'a2')}, 'p1')
    assert bound.value == 2


@pytest.mark.parametrize('outcome', ['bound', 'failed'])
def test_a_job_counts_its_outcome(outcome):
    binder = _binder()
    with _jobs(outcome) as counted, \
            mock.patch.object(binder, 'run', return_value=outcome):
        binder.submit(None, ['arq-1'])
        binder.stop(timeout=10)
    assert counted.value == 1


def test_a_job_whose_arq_went_meanwhile_counts_nothing():
    binder = _binder()
    with _jobs('bound') as bound, _jobs('failed') as failed, \
            mock.patch.object(binder, 'run', return_value=None):
        binder.submit(None, ['arq-1'])
        binder.stop(timeout=10)
    assert (bound.value, failed.value) == (0, 0)


def test_jobs_handed_back_at_a_stop_count_as_handed_back():
    release = threading.Event()
    binder = _binder()
    with _jobs('handed_back') as handed, \
            mock.patch.object(binder, 'run',
                              side_effect=lambda c, u, s: release.wait(10)):
        binder.submit(None, ['arq-running', 'arq-queued'])
        time.sleep(0.1)
        assert binder.stop(timeout=0.2) == ['arq-queued', 'arq-running']
        release.set()
    assert handed.value == 2


# Nova events -----------------------------------------------------------------


@pytest.mark.parametrize('result,label', [
    (nova_client.SENT, 'accepted'), (nova_client.REJECTED, 'refused'),
    (nova_client.UNHOSTED, 'refused'), (nova_client.RETRY, 'error'),
    (None, 'error')])
def test_nova_event_results(result, label):
    assert notifier.result_label(result) == label


# Placement -------------------------------------------------------------------


@pytest.fixture
def placement_client():
    transport = fakes.FakeTransport()
    adapter = placement.adapter_from_endpoint('http://placement.test/')
    adapter.session.session.mount('http://', transport)
    return placement.PlacementClient(adapter), transport


def test_placement_requests_count_by_method_and_status(placement_client):
    client, transport = placement_client
    transport.reply(200, {'uuid': 'rp', 'generation': 1})
    with _Delta('cyborg_placement_requests_total', method='GET',
                status='200') as ok:
        client.get_provider('rp')
    transport.reply(404, {'errors': [{'status': 404, 'title': 'x',
                                      'detail': 'x'}]})
    with _Delta('cyborg_placement_requests_total', method='GET',
                status='404') as missing:
        assert client.get_provider('rp') is None
    transport.fail(requests.exceptions.ConnectionError('refused'))
    with _Delta('cyborg_placement_requests_total', method='GET',
                status='error') as unreachable:
        with pytest.raises(placement.PlacementUnavailable):
            client.get_provider('rp')
    assert (ok.value, missing.value, unreachable.value) == (1, 1, 1)


# Glance ----------------------------------------------------------------------


def test_glance_downloads_count_results_and_bytes(tmp_path):
    data = os.urandom(4096)
    props = {'bs-name': 'x.gbs', 'bs-uuid': '1' * 32, 'vendor': 'intel',
             'board': 'b', 'version': '1', 'driver_ver': '1',
             'driver_path': '/d', 'function_uuid': '2' * 32,
             'region_uuid': '3' * 32, 'function_name': 'f'}
    with FakeGlance() as fake:
        client = glance.GlanceClient.for_endpoint(fake.url, timeout=5)
        good = fake.add_image(data, props)
        bad = fake.add_image(data, props, served=b'short')
        with _Delta('cyborg_glance_downloads_total', result='ok') as ok, \
                _Delta('cyborg_glance_download_bytes_total') as size:
            client.download(good, str(tmp_path / 'good'))
        with _Delta('cyborg_glance_downloads_total',
                    result='failed') as failed:
            with pytest.raises(exception.BitstreamChecksumMismatch):
                client.download(bad, str(tmp_path / 'bad'))
    assert (ok.value, size.value, failed.value) == (1, 4096, 1)


# Vendor tools ----------------------------------------------------------------


def _tool(tmp_path, name, script):
    path = tmp_path / name
    path.write_text('#!/bin/sh\n' + script + '\n')
    path.chmod(0o755)


def test_vendor_tool_runs_count_by_tool_and_result(tmp_path):
    _tool(tmp_path, 'fake-ok-tool', 'exit 0')
    _tool(tmp_path, 'fake-bad-tool', 'exit 3')
    _tool(tmp_path, 'fake-slow-tool', 'sleep 5')
    tools = runner.CommandRunner(search_path=[str(tmp_path), '/bin',
                                              '/usr/bin'])
    with _Delta('cyborg_vendor_tool_runs_total', tool='fake-ok-tool',
                result='ok') as ok, \
            _Delta('cyborg_vendor_tool_runs_total', tool='fake-bad-tool',
                   result='failed') as failed, \
            _Delta('cyborg_vendor_tool_runs_total', tool='fake-slow-tool',
                   result='timeout') as slow:
        assert tools.run(['fake-ok-tool']).ok
        assert not tools.run(['fake-bad-tool']).ok
        with pytest.raises(tool_errors.ToolTimeout):
            tools.run(['fake-slow-tool'], timeout=0.2)
        with pytest.raises(tool_errors.ToolNotAvailable):
            tools.run(['no-such-tool'])
    assert (ok.value, failed.value, slow.value) == (1, 1, 1)
    assert _value('cyborg_vendor_tool_runs_total', tool='no-such-tool',
                  result='failed') == 0
    assert _value('cyborg_vendor_tool_duration_seconds_count',
                  tool='fake-slow-tool') >= 1
