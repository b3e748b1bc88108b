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

"""/v2/quotas/{project_id} and the 403 of an ARQ creation past a limit,
through the assembled app in front of a real conductor manager, with
oslo.limit's LimitFixture as Keystone."""

import json
from unittest import mock

from oslo_limit import fixture as limit_fixture
import pytest
import webob

from cyborg.api import app as api_app
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import quotas
from cyborg.db import device_profiles as profiles_db
from tests.unit.api import test_api_hostile

V2_9 = {'OpenStack-API-Version': 'accelerator 2.9'}
P1 = dict(V2_9, **{'X-Project-Id': 'p1', 'X-Roles': 'member,reader'})
P2 = dict(V2_9, **{'X-Project-Id': 'p2', 'X-Roles': 'member,reader'})
ADMIN = dict(V2_9, **{'X-Project-Id': 'admin', 'X-Roles': 'admin'})


@pytest.fixture
def keystone_limits(conf):
    conf.set_override('endpoint_id', 'cyborg-endpoint', group='oslo_limit')
    fixture = limit_fixture.LimitFixture(
        {'accelerator_requests': 10, 'class:FPGA': 3},
        {'p1': {'class:FPGA': 2}})
    fixture.setUp()
    yield fixture
    fixture.cleanUp()


def _app(conf, driver):
    conf.set_override('driver', driver, group='quota')
    conf.set_override('auth_strategy', 'noauth', group='api')
    manager = conductor_manager.ConductorManager(
        'c1', quotas=quotas.from_conf(conf))
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=test_api_hostile.DirectConductor(manager)):
        return api_app.setup_app(conf, transport=object())


@pytest.fixture
def app(conf, keystone_limits, database, admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'fpga', 'groups': [{'resources:FPGA': '2'}]})
    return _app(conf, 'unified_limits')


def _request(app, method, path, body=None, headers=P1):
    request = webob.Request.blank(path, method=method,
                                  headers=dict(headers))
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


def _create(app, headers=P1):
    return _request(app, 'POST', '/v2/accelerator_requests',
                    {'device_profile_name': 'fpga'}, headers)


def test_a_creation_past_a_limit_is_a_403_naming_the_numbers(app):
    assert _create(app).status_int == 201
    response = _create(app)
    assert response.status_int == 403
    assert _fault(response) == (
        'Quota exceeded for project p1: class:FPGA: limit 2, usage 2, '
        'requested 2')
    listed = _request(app, 'GET', '/v2/accelerator_requests')
    assert len(listed.json['arqs']) == 2


def test_quotas_show_each_limit_and_usage(app):
    assert _create(app).status_int == 201
    response = _request(app, 'GET', '/v2/quotas/p1')
    assert response.status_int == 200, response.body
    assert response.json == {'quota': {'project_id': 'p1', 'resources': {
        'accelerator_requests': {'limit': 10, 'usage': 2},
        'class:FPGA': {'limit': 2, 'usage': 2}}}}
    # The registered limits for a project without its own.
    response = _request(app, 'GET', '/v2/quotas/p2', headers=P2)
    assert response.json['quota']['resources'] == {
        'accelerator_requests': {'limit': 10, 'usage': 0},
        'class:FPGA': {'limit': 3, 'usage': 0}}


def test_quotas_are_for_the_project_or_an_admin(app):
    response = _request(app, 'GET', '/v2/quotas/p1', headers=P2)
    assert response.status_int == 403
    response = _request(app, 'GET', '/v2/quotas/p1', headers=ADMIN)
    assert response.status_int == 200
    assert response.json['quota']['project_id'] == 'p1'


def test_quotas_need_2_9(app):
    response = _request(app, 'GET', '/v2/quotas/p1', headers=dict(
        P1, **{'OpenStack-API-Version': 'accelerator 2.8'}))
    assert response.status_int == 406
    assert '2.9' in _fault(response)


def test_a_project_id_too_long_is_a_400(app):
    response = _request(app, 'GET', '/v2/quotas/' + 'a' * 65,
                        headers=ADMIN)
    assert response.status_int == 400


def test_noop_driver_shows_usage_without_limits(conf, database,
                                                admin_context):
    profiles_db.device_profile_create(admin_context, {
        'name': 'fpga', 'groups': [{'resources:FPGA': '2'}]})
    app = _app(conf, 'noop')
    for _ in range(3):
        assert _create(app).status_int == 201
    response = _request(app, 'GET', '/v2/quotas/p1')
    assert response.json['quota']['resources'] == {
        'accelerator_requests': {'limit': -1, 'usage': 6},
        'class:FPGA': {'limit': -1, 'usage': 6}}


@pytest.mark.parametrize('method, path, status', [
    ('GET', '/v2/quotas', 405),
    ('POST', '/v2/quotas/p1', 405),
    ('DELETE', '/v2/quotas/p1', 405),
])
def test_only_get_of_one_project(app, method, path, status):
    assert _request(app, method, path, headers=ADMIN).status_int == status
