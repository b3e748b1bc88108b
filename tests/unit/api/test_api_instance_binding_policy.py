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

"""The policy rule arq_instance_binding: binding, unbinding and deleting
the accelerator requests of an instance need a service token by default,
and a policy file may say otherwise."""

import json
import os
import subprocess
import sys
from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.common import exception
from cyborg.policies import arq as arq_policy

PATH = '/v2/accelerator_requests'
ARQ = 'aaaaaaaa-0000-4000-8000-000000000001'
RP = '11111111-1111-4111-8111-111111111111'
INSTANCE = '22222222-2222-4222-8222-222222222222'
MEMBER = {'X-Project-Id': 'p1', 'X-Roles': 'member'}
NOVA = {**MEMBER, 'X-Service-Roles': 'service'}
BIND = {ARQ: [
    {'op': 'add', 'path': '/hostname', 'value': 'h1'},
    {'op': 'add', 'path': '/device_rp_uuid', 'value': RP},
    {'op': 'add', 'path': '/instance_uuid', 'value': INSTANCE},
]}


@pytest.fixture
def conductor():
    return mock.Mock()


@pytest.fixture
def make_app(conf, conductor, tmp_path):
    """The API, with ``policy.yaml`` holding ``rules`` if given."""
    def make(rules: dict[str, str] | None = None):
        conf.set_override('auth_strategy', 'noauth', group='api')
        if rules is not None:
            policy_file = tmp_path / 'policy.yaml'
            policy_file.write_text(json.dumps(rules))
            conf.set_override('policy_file', str(policy_file),
                              group='oslo_policy')
        with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                        return_value=conductor):
            return api_app.setup_app(conf, transport=object())
    return make


def _request(app, method, path, body=None, headers=None):
    request = webob.Request.blank(path, method=method,
                                  headers=dict(headers or {}))
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


def test_default_needs_a_service_token(make_app, conductor):
    app = make_app()
    response = _request(app, 'PATCH', PATH, BIND, headers=MEMBER)
    assert response.status_int == 403
    assert _fault(response) == exception.ServiceTokenRequired().message
    response = _request(app, 'DELETE', PATH + '?instance=' + INSTANCE,
                        headers=MEMBER)
    assert response.status_int == 403
    assert _fault(response) == exception.ServiceTokenRequired().message
    assert not conductor.arq_bind.called
    assert not conductor.arq_delete.called
    response = _request(app, 'PATCH', PATH, BIND, headers=NOVA)
    assert response.status_int == 202
    assert conductor.arq_bind.called


def test_policy_file_lets_project_members_bind(make_app, conductor):
    app = make_app({arq_policy.INSTANCE_BINDING: 'rule:project_member_api'})
    response = _request(app, 'PATCH', PATH, BIND, headers=MEMBER)
    assert response.status_int == 202, response.body
    conductor.arq_bind.assert_called_once()
    response = _request(app, 'DELETE', PATH + '?instance=' + INSTANCE,
                        headers=MEMBER)
    assert response.status_int == 204, response.body
    conductor.arq_delete.assert_called_once_with(mock.ANY,
                                                 instance_uuid=INSTANCE)
    # A reader is still refused by cyborg:arq:update, checked first.
    response = _request(app, 'PATCH', PATH, BIND,
                        headers={'X-Project-Id': 'p1', 'X-Roles': 'reader'})
    assert response.status_int == 403
    assert _fault(response) == (
        'Access was denied to the following resource: %s'
        % arq_policy.UPDATE)


def test_policy_file_may_name_the_service_role(make_app, conductor):
    app = make_app({arq_policy.INSTANCE_BINDING:
                    'service_token_role:nova_svc'})
    response = _request(app, 'PATCH', PATH, BIND, headers=NOVA)
    assert response.status_int == 403
    response = _request(app, 'PATCH', PATH, BIND,
                        headers={**MEMBER, 'X-Service-Roles': 'Nova_Svc'})
    assert response.status_int == 202, response.body


def test_policy_file_may_refuse_even_nova(make_app, conductor):
    app = make_app({arq_policy.INSTANCE_BINDING: '!'})
    response = _request(app, 'PATCH', PATH, BIND, headers=NOVA)
    assert response.status_int == 403
    assert _fault(response) == exception.ServiceTokenRequired().message
    assert not conductor.arq_bind.called


def test_the_sample_policy_documents_the_rule(tmp_path):
    output = tmp_path / 'policy.yaml.sample'
    generator = os.path.join(os.path.dirname(sys.executable),
                             'oslopolicy-sample-generator')
    subprocess.run([generator, '--namespace', 'cyborg.api',
                    '--output-file', str(output)], check=True,
                   capture_output=True)
    sample = output.read_text()
    assert '#"%s": "rule:service_token_api"' % arq_policy.INSTANCE_BINDING \
        in sample
    assert '#"service_token_api": "service_token_role:configured"' in sample
    assert 'needs a service token' in sample
