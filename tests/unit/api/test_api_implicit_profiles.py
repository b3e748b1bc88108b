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

"""The implicit profiles class:<RC>, through the assembled app: listed
at 2.9, readable by name and uuid at any version Nova reads with, not
creatable, updatable or deletable; their first ARQ stores them."""

import json
from unittest import mock

import pytest
import webob

from cyborg.api import app as api_app
from cyborg.common import exception
from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.domain import implicit_profiles
from tests import factories

PATH = '/v2/device_profiles'
V2_9 = {'OpenStack-API-Version': 'accelerator 2.9'}
V2_8 = {'OpenStack-API-Version': 'accelerator 2.8'}


@pytest.fixture
def conductor():
    conductor = mock.Mock()
    conductor.device_profile_delete.side_effect = (
        lambda context, idents: profiles_db.device_profile_delete(
            context, [tuple(i) for i in idents]))
    conductor.device_profile_update.side_effect = (
        lambda context, uuid, values: profiles_db.device_profile_update(
            context, uuid, values)[1])
    return conductor


@pytest.fixture
def reported(database):
    """Two deployables reporting PGPU and one VGPU."""
    with database.begin() as connection:
        for rc in ('PGPU', 'VGPU', 'PGPU'):
            deployable = factories.create_test_deployable(connection)
            factories.create_test_attribute(
                connection, deployable_id=deployable['id'], key='rc',
                value=rc)
    factories.create_test_device_profile(name='stored')


@pytest.fixture
def app(conf, conductor, reported):
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


def test_listed_at_2_9_only(app):
    names = [p['name'] for p in
             _request(app, 'GET', PATH).json['device_profiles']]
    assert names == ['stored', 'class:PGPU', 'class:VGPU']
    older = _request(app, 'GET', PATH, headers=V2_8).json
    assert [p['name'] for p in older['device_profiles']] == ['stored']


@pytest.mark.parametrize('headers', [{}, V2_8, V2_9])
def test_nova_reads_one_by_name_at_any_version(app, headers):
    [profile] = _request(app, 'GET', PATH + '?name=class:PGPU',
                         headers=headers).json['device_profiles']
    assert profile['groups'] == [{'resources:PGPU': '1'}]
    assert profile['uuid'] == implicit_profiles.uuid_of('class:PGPU')
    # A class nobody reports has no profile.
    assert _request(app, 'GET', PATH + '?name=class:FPGA',
                    headers=headers).json == {'device_profiles': []}


def test_shown_by_name_and_uuid(app):
    uuid = implicit_profiles.uuid_of('class:VGPU')
    by_name = _request(app, 'GET', PATH + '/class:VGPU').json
    by_uuid = _request(app, 'GET', PATH + '/' + uuid).json
    assert by_name == by_uuid
    assert by_name['device_profile']['groups'] == [{'resources:VGPU': '1'}]
    assert _request(app, 'GET', PATH + '/class:FPGA').status_int == 404


def test_read_only(app, conductor):
    created = _request(app, 'POST', PATH, {
        'name': 'class:FPGA', 'groups': [{'resources:FPGA': '1'}]})
    assert created.status_int == 400
    for path in (PATH + '/class:PGPU', PATH + '?value=stored,class:PGPU'):
        response = _request(app, 'DELETE', path)
        assert response.status_int == 403, response.body
        assert 'implicit and read-only' in response.json['error_message']
    for ident in ('class:PGPU', implicit_profiles.uuid_of('class:PGPU')):
        response = _request(app, 'PATCH', PATH + '/' + ident,
                            {'enabled': False})
        assert response.status_int == 403, response.body
    conductor.device_profile_delete.assert_not_called()
    conductor.device_profile_update.assert_not_called()


def test_the_first_arq_stores_it_read_only(app, admin_context):
    [arq] = arq_db.arq_create(admin_context, 'class:PGPU', 'p1')
    assert arq['device_profile_name'] == 'class:PGPU'
    stored = profiles_db.device_profile_get(admin_context,
                                            name='class:PGPU')
    assert stored['uuid'] == implicit_profiles.uuid_of('class:PGPU')
    assert len(arq_db.arq_create(admin_context, 'class:PGPU', 'p1')) == 1
    # Listed once, and still not in an older client's list.
    names = [p['name'] for p in
             _request(app, 'GET', PATH).json['device_profiles']]
    assert names == ['stored', 'class:PGPU', 'class:VGPU']
    older = _request(app, 'GET', PATH, headers=V2_8).json
    assert [p['name'] for p in older['device_profiles']] == ['stored']
    # Stored, it is as read-only, by uuid too.
    assert _request(app, 'DELETE', PATH + '/' + stored['uuid']
                    ).status_int == 403
    assert _request(app, 'PATCH', PATH + '/' + stored['uuid'],
                    {'enabled': False}).status_int == 403


def test_an_unreported_class_creates_no_arq(app, admin_context):
    with pytest.raises(exception.DeviceProfileNotFound):
        arq_db.arq_create(admin_context, 'class:FPGA', 'p1')
