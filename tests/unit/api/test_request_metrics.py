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

"""The API's request metrics and its /metrics route."""

from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.common import metrics

UUID = '7c3b2a8e-9f0d-4c6e-b1a2-3d4e5f607182'


@pytest.fixture
def app(conf):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
        return api_app.setup_app(conf, transport=object())


def _get(app, path, method='GET', **headers):
    return webob.Request.blank(path, method=method,
                               headers=headers).get_response(app)


def _count(method, route, status):
    return metrics.REGISTRY.get_sample_value(
        'cyborg_api_requests_total',
        {'method': method, 'route': route, 'status': str(status)}) or 0


def _observed(method, route):
    return metrics.REGISTRY.get_sample_value(
        'cyborg_api_request_duration_seconds_count',
        {'method': method, 'route': route}) or 0


@pytest.mark.parametrize('method,path,route,status', [
    ('GET', '/', '/', 200),
    ('GET', '/v2', '/v2', 200),
    ('GET', '/v2/', '/v2', 200),
    ('GET', '/healthcheck', '/healthcheck', 200),
    # The template of the route, whatever the identifier.
    ('GET', '/v2/accelerator_requests/not-a-uuid',
     '/v2/accelerator_requests/{uuid}', 400),
    ('GET', '/accelerator_requests/also-not-one',
     '/v2/accelerator_requests/{uuid}', 400),
    ('PUT', '/v2/devices', '/v2/devices', 405),
    ('GET', '/v2/devices/%s/enable' % UUID, '/v2/devices/{uuid}/enable',
     405),
    ('POST', '/v2', '/v2', 405),
    # What no route takes: one label, never the path.
    ('GET', '/v2/no-such-thing/%s' % UUID, 'unmatched', 404),
    ('GET', '/v2/devices/%s/x/y/z' % UUID, 'unmatched', 404),
    ('GET', '/device_profiles', 'unmatched', 406),
])
def test_requests_count_by_route_template(app, method, path, route, status):
    headers = {'Accept': 'text/html'} if status == 406 else {}
    before = _count(method, route, status), _observed(method, route)
    assert _get(app, path, method, **headers).status_int == status
    assert (_count(method, route, status),
            _observed(method, route)) == (before[0] + 1, before[1] + 1)


def test_a_method_no_route_knows_counts_as_other(app):
    before = _count('other', 'unmatched', 405) + _count('other', '/v2', 405)
    assert _get(app, '/v2', 'BREW').status_int == 405
    assert _count('other', '/v2', 405) + _count(
        'other', 'unmatched', 405) == before + 1


def test_metrics_route_is_off_by_default(app):
    response = _get(app, '/metrics')
    assert response.status_int == 404
    assert response.json['error_message']


def test_metrics_route_serves_the_text_format(app, conf):
    conf.set_override('api_enabled', True, group='metrics')
    _get(app, '/v2')
    response = _get(app, '/metrics', Accept='text/plain')
    assert response.status_int == 200
    assert response.content_type == 'text/plain'
    assert 'OpenStack-API-Version' not in response.headers
    text = response.body.decode()
    assert '# TYPE cyborg_api_requests_total counter' in text
    assert 'cyborg_api_requests_total{method="GET",route="/v2",' in text
    assert '_created' not in text


@pytest.mark.parametrize('roles,status', [
    ('admin', 200), ('service', 200), ('member', 403), ('manager', 403)])
def test_metrics_route_policy(app, conf, roles, status):
    conf.set_override('api_enabled', True, group='metrics')
    response = _get(app, '/metrics', **{'X-Roles': roles})
    assert response.status_int == status
    if status == 403:
        assert 'cyborg:metrics:get' in response.json['error_message']


def test_metrics_route_answers_get_only(app, conf):
    conf.set_override('api_enabled', True, group='metrics')
    response = _get(app, '/metrics', 'POST')
    assert response.status_int == 405
    assert response.headers['Allow'] == 'GET'
