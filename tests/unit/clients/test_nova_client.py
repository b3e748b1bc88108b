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

"""Unit tests of cyborg.clients.nova and cyborg.conf.nova.

The client runs over a real keystoneauth1 Session and Adapter (so the
microversion headers keystoneauth adds are checked too); only the
requests transport is replaced.
"""

from __future__ import annotations

import json
import logging

from keystoneauth1 import token_endpoint
from oslo_config import cfg
import pytest
import requests

from cyborg.clients import nova
from cyborg.conf import nova as nova_conf
from tests.unit import fakes

URL = 'http://nova.test:8774/v2.1'
SERVER_A = '11111111-1111-4111-8111-111111111111'
SERVER_B = '22222222-2222-4222-8222-222222222222'
SERVER_C = '33333333-3333-4333-8333-333333333333'
ARQ_A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa'
ARQ_B = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb'
ARQ_C = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc'


FakeTransport = fakes.FakeTransport


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
def client(transport):
    client = nova.NovaClient.for_endpoint(URL + '/')
    client.adapter.session.session.mount('http://', transport)
    return client


EVENTS = [
    nova.make_event(ARQ_A, SERVER_A, 'completed'),
    nova.make_event(ARQ_B, SERVER_B, 'failed'),
    nova.make_event(ARQ_C, SERVER_C, 'completed'),
]


def answer(codes):
    pairs = zip(EVENTS, codes, strict=True)
    return {'events': [dict(event, code=code) for event, code in pairs]}


# Request ---------------------------------------------------------------------


def test_one_post_with_microversion(client, transport):
    transport.reply(200, answer([200, 200, 200]))
    assert client.send_events(EVENTS) == {
        ARQ_A: 'sent', ARQ_B: 'sent', ARQ_C: 'sent'}
    assert len(transport.sent) == 1
    sent = transport.sent[0]
    assert sent.method == 'POST'
    assert sent.url == URL + '/os-server-external-events'
    assert sent.headers['OpenStack-API-Version'] == 'compute 2.82'
    assert sent.headers['X-OpenStack-Nova-API-Version'] == '2.82'
    assert sent.headers['X-Auth-Token'] == 'admin'
    assert json.loads(sent.body) == {'events': EVENTS}
    assert EVENTS[0] == {'name': 'accelerator-request-bound',
                         'server_uuid': SERVER_A, 'tag': ARQ_A,
                         'status': 'completed'}


def test_no_events_no_request(client, transport):
    assert client.send_events([]) == {}
    assert transport.sent == []


def test_make_event_checks_status():
    with pytest.raises(ValueError):
        nova.make_event(ARQ_A, SERVER_A, 'bound')


# Response mapping ------------------------------------------------------------


def test_207_per_event(client, transport):
    transport.reply(207, answer([200, 404, 422]))
    results = client.send_events(EVENTS)
    # 422: the instance has no host yet (Nova binds before placing it).
    assert results == {ARQ_A: 'sent', ARQ_B: 'rejected', ARQ_C: 'unhosted'}
    assert results[ARQ_A].detail is None
    assert '404' in results[ARQ_B].detail
    assert '422' in results[ARQ_C].detail


def test_207_bad_event_rejected_unknown_code_retried(client, transport):
    transport.reply(207, answer([400, 500, 200]))
    assert client.send_events(EVENTS) == {
        ARQ_A: 'rejected', ARQ_B: 'retry', ARQ_C: 'sent'}


def test_207_event_missing_from_answer_is_retried(client, transport):
    body = answer([200, 200, 200])
    del body['events'][1]
    transport.reply(207, body)
    assert client.send_events(EVENTS) == {
        ARQ_A: 'sent', ARQ_B: 'retry', ARQ_C: 'sent'}


def test_207_without_body_is_retried(client, transport):
    transport.reply(207, text='<html>oops</html>')
    assert set(client.send_events(EVENTS).values()) == {'retry'}


def test_404_rejects_all(client, transport, caplog):
    transport.reply(404, {'itemNotFound': {
        'code': 404, 'message': 'No instances found for any event'}})
    with caplog.at_level(logging.WARNING):
        results = client.send_events(EVENTS)
    assert results == {ARQ_A: 'rejected', ARQ_B: 'rejected',
                       ARQ_C: 'rejected'}
    assert 'No instances found' in results[ARQ_A].detail
    assert 'No instances found' in caplog.text


@pytest.mark.parametrize('status', [500, 502, 503, 504, 408, 429])
def test_transient_errors_retry_all(client, transport, status):
    transport.reply(status, text='busy')
    results = client.send_events(EVENTS)
    assert set(results.values()) == {'retry'}
    assert results[ARQ_A].detail == 'HTTP %d: busy' % status


@pytest.mark.parametrize('status', [400, 401, 403, 409])
def test_other_4xx_rejects_all_and_logs_body(client, transport, caplog,
                                             status):
    transport.reply(status, {'badRequest': {'message': 'Invalid input'}})
    with caplog.at_level(logging.ERROR):
        results = client.send_events(EVENTS)
    assert set(results.values()) == {'rejected'}
    assert 'Invalid input' in caplog.text
    assert 'HTTP %d' % status in results[ARQ_B].detail


@pytest.mark.parametrize('error', [
    requests.exceptions.ConnectionError('refused'),
    requests.exceptions.ConnectTimeout('connect timeout'),
    requests.exceptions.ReadTimeout('read timeout'),
])
def test_connection_errors_and_timeouts_retry_all(client, transport, error):
    transport.fail(error)
    results = client.send_events(EVENTS)
    assert results == {ARQ_A: 'retry', ARQ_B: 'retry', ARQ_C: 'retry'}
    assert results[ARQ_A].detail


def test_refused_connection_for_real():
    # Nothing listens on port 9 of the loopback (discard service).
    client = nova.NovaClient.for_endpoint('http://127.0.0.1:9/v2.1',
                                          timeout=2)
    assert client.send_events(EVENTS[:1]) == {ARQ_A: 'retry'}


def test_logging_client_reports_sent(caplog):
    with caplog.at_level(logging.INFO):
        results = nova.LoggingNovaClient().send_events(EVENTS)
    assert results == {ARQ_A: 'sent', ARQ_B: 'sent', ARQ_C: 'sent'}
    assert ARQ_B in caplog.text


# Configuration ---------------------------------------------------------------


def make_conf(tmp_path, text=''):
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    conf = cfg.ConfigOpts()
    nova_conf.register_opts(conf)
    conf([], default_config_files=[str(config)])
    return conf


def test_conf_defaults(tmp_path):
    conf = make_conf(tmp_path)
    assert conf.nova.service_type == 'compute'
    assert conf.nova.valid_interfaces == ['internal', 'public']
    assert conf.nova.timeout == 10
    assert conf.nova.events_batch_size == 100
    assert conf.nova.retry_interval == 1
    assert conf.nova.retry_max_interval == 60
    assert conf.nova.claim_timeout == 30
    assert conf.nova.poll_interval == 1.0
    assert conf.nova.auth_type is None


def test_list_opts():
    ((group, opts),) = nova_conf.list_opts().items()
    assert group.name == 'nova'
    names = [opt.dest for opt in opts]
    assert len(names) == len(set(names))
    for name in ('auth_type', 'auth_url', 'username', 'password',
                 'service_type', 'valid_interfaces', 'endpoint_override',
                 'timeout', 'events_batch_size', 'retry_interval',
                 'retry_max_interval', 'claim_timeout', 'poll_interval'):
        assert name in names
    defaults = {opt.dest: opt.default for opt in opts}
    assert defaults['service_type'] == 'compute'
    assert defaults['timeout'] == 10
    assert all(opt.help for opt in opts)


def test_from_conf_without_keystone(tmp_path):
    conf = make_conf(tmp_path, (
        '[nova]\nauth_type = admin_token\nendpoint = %s\ntoken = admin\n'
        'endpoint_override = %s\n' % (URL, URL)))
    client = nova.NovaClient.from_conf(conf)
    assert isinstance(client.adapter.auth, token_endpoint.Token)
    assert client.adapter.service_type == 'compute'
    assert client.adapter.get_endpoint() == URL
    assert isinstance(nova.client_from_conf(conf), nova.NovaClient)


def test_from_conf_unconfigured(tmp_path):
    conf = make_conf(tmp_path)
    with pytest.raises(nova.NovaNotConfigured):
        nova.NovaClient.from_conf(conf)
    assert isinstance(nova.client_from_conf(conf), nova.LoggingNovaClient)
