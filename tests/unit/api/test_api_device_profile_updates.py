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

"""PATCH /v2/device_profiles/{uuid} and what a disabled profile reads
as, through the assembled app, in process: the conductor is a mock that
updates with the database layer, as the real one does; bad input is a
4xx that never reaches it."""

import json
from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import device_profiles as profiles_db
from tests import factories

PATH = '/v2/device_profiles'
V2_9 = {'OpenStack-API-Version': 'accelerator 2.9'}
V2_8 = {'OpenStack-API-Version': 'accelerator 2.8'}
MEMBER = dict(V2_9, **{'X-Project-Id': 'p1', 'X-Roles': 'member'})
UUID = '5b8e2d1c-7a4f-4c9e-b3d6-1e0f8a2c4b97'


@pytest.fixture
def conductor():
    conductor = mock.Mock()
    conductor.device_profile_update.side_effect = (
        lambda context, uuid, values: profiles_db.device_profile_update(
            context, uuid, values)[1])
    return conductor


@pytest.fixture
def profile(database):
    return factories.create_test_device_profile(
        name='gpu-small', uuid=UUID, description='one',
        groups=[{'resources:PGPU': '1'}])


@pytest.fixture
def app(conf, conductor, database, profile):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=conductor):
        return api_app.setup_app(conf, transport=object())


def _request(app, method, path, body=None, headers=V2_9):
    request = webob.Request.blank(path, method=method,
                                  headers=dict(headers))
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _fault(response) -> str:
    return json.loads(response.json['error_message'])['faultstring']


def test_patch_changes_description_groups_and_enabled(app, conductor):
    response = _request(app, 'PATCH', PATH + '/' + UUID, {
        'description': 'two', 'enabled': False,
        'groups': [{'resources:vgpu': 2, 'trait:custom-a': 'required'}]})
    assert response.status_int == 200, response.body
    shown = response.json['device_profile']
    assert shown['name'] == 'gpu-small'
    assert shown['description'] == 'two'
    assert shown['enabled'] is False
    # Checked and normalized as at creation.
    assert shown['groups'] == [{'resources:VGPU': '2',
                                'trait:CUSTOM_A': 'required'}]
    assert shown['updated_at'] is not None
    read = _request(app, 'GET', PATH + '/' + UUID).json['device_profile']
    assert read == shown


def test_patch_by_name(app):
    response = _request(app, 'PATCH', PATH + '/gpu-small',
                        {'enabled': False})
    assert response.status_int == 200, response.body
    assert response.json['device_profile']['enabled'] is False


@pytest.mark.parametrize('body, status, text', [
    ({'name': 'other'}, 400, 'name'),
    ({}, 400, ''),
    ({'enabled': 'no'}, 400, 'enabled'),
    ({'groups': [{'resources:PGPU': '0'}]}, 400, 'Resources number'),
    ({'groups': [{'trait:CUSTOM_A': 'required'}]}, 400,
     'requests no resources'),
    ({'groups': []}, 400, ''),
    ({'description': 'x' * 256}, 400, ''),
])
def test_bad_patch_is_refused_and_changes_nothing(app, conductor, body,
                                                  status, text):
    response = _request(app, 'PATCH', PATH + '/' + UUID, body)
    assert response.status_int == status, response.body
    assert text in _fault(response)
    conductor.device_profile_update.assert_not_called()
    shown = _request(app, 'GET', PATH + '/' + UUID).json['device_profile']
    assert shown['description'] == 'one' and shown['enabled'] is True


def test_patch_needs_2_9_and_an_admin(app, conductor):
    assert _request(app, 'PATCH', PATH + '/' + UUID, {'enabled': False},
                    headers=V2_8).status_int == 406
    assert _request(app, 'PATCH', PATH + '/' + UUID, {'enabled': False},
                    headers=MEMBER).status_int == 403
    # The collection takes no PATCH, at any version.
    assert _request(app, 'PATCH', PATH, {'enabled': False}
                    ).status_int == 405
    conductor.device_profile_update.assert_not_called()


def test_patch_of_a_missing_profile_is_404(app):
    missing = '44444444-4444-4444-8444-444444444444'
    assert _request(app, 'PATCH', PATH + '/' + missing,
                    {'enabled': False}).status_int == 404
    assert _request(app, 'PATCH', PATH + '/nope',
                    {'enabled': False}).status_int == 404


def test_enabled_shown_at_2_9_only(app):
    listed = _request(app, 'GET', PATH).json['device_profiles']
    assert listed[0]['enabled'] is True
    older = _request(app, 'GET', PATH, headers=V2_8).json['device_profiles']
    assert 'enabled' not in older[0]


def test_nova_reads_a_disabled_profile_as_unschedulable(app):
    assert _request(app, 'PATCH', PATH + '/' + UUID,
                    {'enabled': False}).status_int == 200
    # Nova's read: by name, no microversion.
    nova = _request(app, 'GET', PATH + '?name=gpu-small', headers={})
    assert nova.json['device_profiles'][0]['groups'] == [
        {'resources:CUSTOM_DEVICE_PROFILE_DISABLED_GPU_SMALL': '1'}]
    # At 2.9 the profile shows its real groups and that it is disabled.
    shown = _request(app, 'GET', PATH + '?name=gpu-small').json
    assert shown['device_profiles'][0]['groups'] == [
        {'resources:PGPU': '1'}]
    # Enabled again, Nova reads the groups at once (the cache dropped).
    assert _request(app, 'PATCH', PATH + '/' + UUID,
                    {'enabled': True}).status_int == 200
    nova = _request(app, 'GET', PATH + '?name=gpu-small', headers={})
    assert nova.json['device_profiles'][0]['groups'] == [
        {'resources:PGPU': '1'}]


def test_a_conductor_capped_below_1_6_makes_an_update_503(app, conductor):
    conductor.device_profile_update.side_effect = rpc.RPCVersionCapped(
        'cyborg-conductor', 'device_profile_update', '1.6', '1.5',
        'conductor')
    response = _request(app, 'PATCH', PATH + '/' + UUID, {'enabled': False})
    assert response.status_int == 503, response.body
    shown = _request(app, 'GET', PATH + '/' + UUID).json['device_profile']
    assert shown['enabled'] is True


def test_the_client_refuses_to_send_above_its_cap():
    with mock.patch.object(rpc, 'get_client') as get_client:
        get_client.return_value.can_send_version.return_value = False
        api = rpcapi.ConductorAPI(object(), version_cap='1.5')
        with pytest.raises(rpc.RPCVersionCapped):
            api.device_profile_update(None, UUID, {'enabled': False})
