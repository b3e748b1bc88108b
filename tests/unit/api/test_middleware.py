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

import json

import pytest
import webob

from cyborg.api import errors
from cyborg.api import middleware


def _echo_environ(environ, start_response):
    body = json.dumps(
        {
            k: v
            for k, v in environ.items()
            if k.startswith(('HTTP_', 'PATH', 'cyborg'))
        }
    ).encode()
    start_response('200 OK', [('Content-Type', 'application/json')])
    return [body]


def _html_error(environ, start_response):
    start_response('404 Not Found', [('Content-Type', 'text/html')])
    return [
        b'<html><body><h1>404 Not Found</h1>The resource could not '
        b'be found.</body></html>'
    ]


def _get(app, path, **headers):
    return webob.Request.blank(path, headers=headers).get_response(app)


@pytest.mark.parametrize(
    'path, public',
    [
        ('/', True),
        ('', True),
        ('/v2', True),
        ('/v2/', True),
        ('/v2.json', True),
        ('/.json', True),
        ('/v2/device_profiles', False),
        ('/device_profiles', False),
        ('/v20', False),
    ],
)
def test_public_paths(path, public):
    assert middleware.is_public_path(path) is public


def test_expand_roles():
    assert middleware.expand_roles(['admin']) == [
        'admin',
        'manager',
        'member',
        'reader',
    ]
    assert middleware.expand_roles(['member', 'service']) == [
        'member',
        'service',
        'reader',
    ]


def test_version_middleware_routes_unversioned_paths():
    app = middleware.VersionMiddleware(_echo_environ)
    response = _get(app, '/device_profiles')
    assert response.json['PATH_INFO'] == '/v2/device_profiles'
    assert response.json['cyborg.api_version'] == [2, 0]
    assert response.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert response.headers['Vary'] == 'OpenStack-API-Version'


def test_version_middleware_leaves_root_alone():
    app = middleware.VersionMiddleware(_echo_environ)
    response = _get(app, '/', **{'OpenStack-API-Version': 'garbage'})
    assert response.status_int == 200
    assert 'OpenStack-API-Version' not in response.headers


def test_version_middleware_rejects_bad_header():
    app = middleware.VersionMiddleware(_echo_environ)
    response = _get(app, '/v2', **{'OpenStack-API-Version': 'accelerator x'})
    assert response.status_int == 406
    fault = json.loads(response.json['error_message'])
    assert fault['faultstring'] == (
        'Invalid value for OpenStack-API-Version header'
    )
    # Every error carries the supported range.
    assert response.headers['OpenStack-API-Minimum-Version'] == '2.0'
    assert response.headers['OpenStack-API-Maximum-Version'] == '2.10'


def test_version_middleware_rejects_unsupported_version():
    app = middleware.VersionMiddleware(_echo_environ)
    response = _get(app, '/v2',
                    **{'OpenStack-API-Version': 'accelerator 2.99'})
    assert response.status_int == 406
    assert response.headers['OpenStack-API-Maximum-Version'] == '2.10'
    assert response.headers['Content-Type'] == 'application/json'


def test_error_envelope_wraps_html_errors():
    app = middleware.ErrorEnvelopeMiddleware(_html_error)
    response = _get(app, '/x')
    assert response.status_int == 404
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert fault == {
        'faultcode': 'Client',
        'debuginfo': None,
        'faultstring': 'The resource could not be found.',
    }


def test_error_envelope_passes_json_and_success_through():
    app = middleware.ErrorEnvelopeMiddleware(_echo_environ)
    assert _get(app, '/x').status_int == 200


def test_fault_body_server_error():
    body = json.loads(errors.fault_body(503, 'down'))
    assert json.loads(body['error_message'])['faultcode'] == 'Server'


def test_noauth_defaults_and_headers():
    app = middleware.NoAuthMiddleware(_echo_environ, 'proj', ['admin'])
    seen = _get(app, '/').json
    assert seen['HTTP_X_PROJECT_ID'] == 'proj'
    assert seen['HTTP_X_ROLES'] == 'admin,manager,member,reader'
    seen = _get(app, '/', **{'X-Roles': 'member', 'X-Project-Id': 'p9'}).json
    assert seen['HTTP_X_PROJECT_ID'] == 'p9'
    assert seen['HTTP_X_ROLES'] == 'member,reader'


def test_noauth_counts_an_x_service_token_as_a_service_token():
    app = middleware.NoAuthMiddleware(_echo_environ, 'proj', ['admin'])
    # Nova with [service_user] send_service_user_token sends only this.
    seen = _get(app, '/', **{'X-Service-Token': 'anything'}).json
    assert seen['HTTP_X_SERVICE_ROLES'] == 'service'
    # X-Service-Roles decides when present.
    seen = _get(app, '/', **{'X-Service-Token': 'anything',
                             'X-Service-Roles': 'reader'}).json
    assert seen['HTTP_X_SERVICE_ROLES'] == 'reader'
    seen = _get(app, '/').json
    assert 'HTTP_X_SERVICE_ROLES' not in seen


def test_an_unhandled_error_is_a_json_500_without_details():
    def broken(environ, start_response):
        raise RecursionError('deep inside')

    app = middleware.ErrorEnvelopeMiddleware(broken)
    response = webob.Request.blank('/v2').get_response(app)
    assert response.status_int == 500
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Server'
    assert 'deep inside' not in response.text


@pytest.mark.parametrize('path,accept,status', [
    ('/v2/devices', 'text/html', 406),
    ('/v2/devices', 'application/json;q=0', 406),
    ('/v2/devices.xml', None, 404),
    ('/v2/devices', 'text/html, application/json;q=0.1', 200),
    ('/v2/devices', '*/*;q=abc', 200),
    ('/v2/devices.json', 'application/*', 200),
])
def test_json_only_refuses_what_would_not_be_json(path, accept, status):
    app = middleware.JSONOnly(_echo_environ)
    headers = {} if accept is None else {'Accept': accept}
    response = _get(app, path, **headers)
    assert response.status_int == status
    if status >= 400:
        fault = json.loads(response.json['error_message'])
        assert fault['faultcode'] == 'Client'
