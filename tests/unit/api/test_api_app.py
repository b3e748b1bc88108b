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

"""The assembled API application, in process, with a fake conductor."""

import json
from unittest import mock

from keystonemiddleware import opts as ksm_opts
import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import hooks
from cyborg.common import exception

KEYSTONE = 'http://127.0.0.1:5000/v3'


@pytest.fixture
def conductor():
    return mock.Mock()


def _app(conf, conductor, auth_strategy='noauth'):
    conf.set_override('auth_strategy', auth_strategy, group='api')
    if auth_strategy == 'keystone':
        for group, opts in ksm_opts.list_auth_token_opts():
            conf.register_opts(opts, group=group)
        conf.set_override(
            'www_authenticate_uri', KEYSTONE, group='keystone_authtoken'
        )
    with mock.patch(
        'cyborg.conductor.rpcapi.ConductorAPI', return_value=conductor
    ):
        return api_app.setup_app(conf, transport=object())


def _request(app, method, path, body=None, **headers):
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.body = (
            body if isinstance(body, bytes) else json.dumps(body).encode()
        )
        request.content_type = headers.get('Content-Type', 'application/json')
    return request.get_response(app)


def _fault(response):
    return json.loads(response.json['error_message'])


def test_keystone_mode_requires_a_token(conf, conductor):
    app = _app(conf, conductor, auth_strategy='keystone')
    response = _request(app, 'GET', '/v2/device_profiles')
    assert response.status_int == 401
    assert response.headers['WWW-Authenticate'] == (
        'Keystone uri="%s"' % KEYSTONE
    )
    assert _request(app, 'GET', '/').status_int == 200
    assert _request(app, 'GET', '/v2').status_int == 200
    assert _request(app, 'GET', '/v2/').status_int == 200


@pytest.mark.parametrize('path', ['/v2', '/v2/', '/v2/device_profiles'])
@pytest.mark.parametrize('version', ['accelerator 2.' + '9' * 4400,
                                     '9' * 5000 + '.1'])
def test_keystone_mode_refuses_a_huge_microversion_without_a_token(
        conf, conductor, path, version):
    """A number over Python's 4,300-digit limit answered a plain-text
    500 from the WSGI server on the public GET /v2."""
    app = _app(conf, conductor, auth_strategy='keystone')
    response = _request(app, 'GET', path,
                        **{'OpenStack-API-Version': version})
    assert response.status_int == 406
    assert _fault(response)['faultcode'] == 'Client'
    assert response.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert response.headers['OpenStack-API-Maximum-Version']
    assert response.headers['x-openstack-request-id'].startswith('req-')


@pytest.mark.parametrize('environ,expected', [
    ({'SERVER_NAME': 'api.example.org', 'SERVER_PORT': '443',
      'wsgi.url_scheme': 'https'}, 'https://api.example.org'),
    ({'SERVER_NAME': '::1', 'SERVER_PORT': '6666'}, 'http://[::1]:6666'),
    ({'SERVER_NAME': '10.0.0.1', 'SERVER_PORT': '80',
      'SCRIPT_NAME': '/accelerator'}, 'http://10.0.0.1/accelerator'),
    ({'HTTP_HOST': 'evil.example.com'}, 'http://localhost'),
])
def test_links_without_public_endpoint_name_the_server(environ, expected):
    assert hooks.server_url(environ) == expected


def test_keystone_mode_ignores_identity_headers(conf, conductor):
    app = _app(conf, conductor, auth_strategy='keystone')
    response = _request(
        app,
        'GET',
        '/v2/device_profiles',
        **{'X-Roles': 'admin', 'X-Project-Id': 'p'},
    )
    assert response.status_int == 401


def test_unexpected_error_is_500_without_details(conf, conductor, database):
    conductor.device_profile_create.side_effect = RuntimeError(
        'SELECT secret FROM table'
    )
    app = _app(conf, conductor)
    response = _request(
        app,
        'POST',
        '/v2/device_profiles',
        [{'name': 'a', 'groups': [{'resources:FPGA': 1}]}],
    )
    assert response.status_int == 500
    fault = _fault(response)
    assert fault['faultcode'] == 'Server'
    assert 'secret' not in fault['faultstring']


def test_conductor_errors_keep_their_status(conf, conductor, database):
    conductor.device_profile_create.side_effect = (
        exception.DuplicateDeviceProfileName(name='a')
    )
    app = _app(conf, conductor)
    response = _request(
        app,
        'POST',
        '/v2/device_profiles',
        [{'name': 'a', 'groups': [{'resources:FPGA': 1}]}],
    )
    assert response.status_int == 409
    assert _fault(response)['faultstring'] == (
        'A device_profile with name a already exists.'
    )


def test_bad_input_never_reaches_the_conductor(conf, conductor, database):
    app = _app(conf, conductor)
    for body in (
        b'{not json',
        [],
        [{'name': 'a'}],
        {'name': 'a'},
        [{'name': 'a', 'groups': [{}]}],
    ):
        response = _request(app, 'POST', '/v2/device_profiles', body)
        assert response.status_int == 400, body
    response = _request(
        app,
        'POST',
        '/v2/device_profiles',
        b'x',
        **{'Content-Type': 'text/plain'},
    )
    assert response.status_int == 415
    assert not conductor.device_profile_create.called


def test_policy_is_checked_before_the_body(conf, conductor, database):
    app = _app(conf, conductor)
    response = _request(
        app,
        'POST',
        '/v2/device_profiles',
        b'{not json',
        **{'X-Roles': 'reader'},
    )
    assert response.status_int == 403


def test_create_passes_normalised_values(conf, conductor, database):
    conductor.device_profile_create.return_value = {
        'uuid': 'u',
        'name': 'a',
        'description': None,
        'groups': [{'resources:CUSTOM_X': '2'}],
        'created_at': '2026-01-01T00:00:00',
        'updated_at': None,
    }
    app = _app(conf, conductor)
    response = _request(
        app,
        'POST',
        '/v2/device_profiles',
        [
            {
                'name': 'a',
                'groups': [{'resources:custom-x': 2}],
                'uuid': 'ABCDEF00-0000-4000-8000-000000000001',
            }
        ],
    )
    assert response.status_int == 201
    values = conductor.device_profile_create.call_args[0][1]
    assert values['groups'] == [{'resources:CUSTOM_X': '2'}]
    assert values['uuid'] == 'abcdef00-0000-4000-8000-000000000001'
    assert response.json['created_at'] == '2026-01-01T00:00:00+00:00'
    assert response.json['links'] == [
        {'href': 'http://localhost/v2/device_profiles/u', 'rel': 'self'}
    ]


def test_public_endpoint_builds_links(conf, conductor, database):
    conf.set_override(
        'public_endpoint', 'https://cloud/accelerator/', group='api'
    )
    app = _app(conf, conductor)
    document = _request(app, 'GET', '/').json
    assert document['versions'][0]['links'][0]['href'] == (
        'https://cloud/accelerator/v2'
    )
    assert _request(app, 'GET', '/v2').json['links'][0]['href'] == (
        'https://cloud/accelerator/v2/'
    )
    conf.clear_override('public_endpoint', group='api')


def test_delete_names(conf, conductor, database):
    app = _app(conf, conductor)
    assert _request(app, 'DELETE', '/v2/device_profiles/a,b').status_int == 204
    conductor.device_profile_delete.assert_called_with(
        mock.ANY, [['name', 'a'], ['name', 'b']]
    )
    uuid = 'ABCDEF00-0000-4000-8000-000000000001'
    assert (
        _request(app, 'DELETE', '/v2/device_profiles?value=' + uuid).status_int
        == 204
    )
    conductor.device_profile_delete.assert_called_with(
        mock.ANY, [['uuid', uuid.lower()]]
    )
    assert (
        _request(app, 'DELETE', '/v2/device_profiles/a,,b').status_int == 400
    )


UUID = '11111111-1111-4111-8111-111111111111'
BIND = {UUID: [
    {'op': 'add', 'path': '/hostname', 'value': 'compute-1'},
    {'op': 'add', 'path': '/device_rp_uuid', 'value': UUID},
    {'op': 'add', 'path': '/instance_uuid', 'value': UUID}]}
SERVICE = {'X-Service-Roles': 'service'}


@pytest.mark.parametrize('method, path, body, headers', [
    ('PATCH', '/v2/accelerator_requests', BIND, SERVICE),
    ('DELETE', '/v2/accelerator_requests?instance=' + UUID, None, SERVICE),
    ('DELETE', '/v2/device_profiles/a', None, {}),
    ('POST', '/v2/devices/%s/disable' % UUID, None, {}),
    ('POST', '/v2/devices/%s/enable' % UUID, None, {}),
    ('DELETE', '/v2/attributes/' + UUID, None, {}),
    ('GET', '/v2/accelerator_requests', None, {}),
])
@pytest.mark.parametrize('accept', [
    'application/json', '*/*', 'application/json, */*;q=0.5'])
def test_json_clients_are_served_by_every_endpoint(
        conf, conductor, database, method, path, body, headers, accept):
    """Bodyless answers (202, 204) too: keystoneauth-based clients send
    ``Accept: application/json`` on every request."""
    app = _app(conf, conductor)
    plain = _request(app, method, path, body, **headers)
    asked = _request(app, method, path, body, Accept=accept, **headers)
    assert asked.status_int == plain.status_int != 406


@pytest.mark.parametrize('method, path, body, headers', [
    ('GET', '/v2/device_profiles', None, {}),
    ('PATCH', '/v2/accelerator_requests', BIND, SERVICE),
    ('DELETE', '/v2/device_profiles/a', None, {}),
])
def test_non_json_accept_is_406_and_changes_nothing(
        conf, conductor, database, method, path, body, headers):
    app = _app(conf, conductor)
    response = _request(app, method, path, body, Accept='application/xml',
                        **headers)
    assert response.status_int == 406
    assert response.content_type == 'application/json'
    assert not conductor.method_calls


def test_json_body_is_parsed_once(conf, conductor, database):
    """Pecan's keyword arguments come from the document the body guard
    parsed: webob does not parse the body again."""
    conductor.device_profile_create.return_value = {
        'uuid': 'u', 'name': 'a', 'description': None,
        'groups': [{'resources:CUSTOM_X': '1'}],
        'created_at': '2026-01-01T00:00:00', 'updated_at': None}
    app = _app(conf, conductor)
    webob_json = mock.PropertyMock(side_effect=AssertionError('parsed'))
    with mock.patch.object(webob.request.BaseRequest, 'json', webob_json), \
            mock.patch.object(webob.request.BaseRequest, 'json_body',
                              webob_json):
        response = _request(app, 'POST', '/v2/device_profiles',
                            [{'name': 'a',
                              'groups': [{'resources:CUSTOM_X': '1'}]}])
    assert response.status_int == 201
    webob_json.assert_not_called()


def test_request_json_without_the_guard_is_webobs():
    request = api_app.Request.blank('/v2/x', method='POST',
                                    body=b'{"a": 1}')
    request.content_type = 'application/json'
    assert request.json == {'a': 1}
    request.environ['cyborg.json_body'] = {'b': 2}
    assert request.json == {'b': 2}
    request.environ['cyborg.json_body_error'] = ValueError('bad')
    assert request.json == {'a': 1}
