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

"""The Keystone fixture: a real Keystone issues and validates tokens."""

from __future__ import annotations

from keystoneauth1 import loading
from keystoneauth1 import session

from tests.functional import keystone as keystone_server


def _session(options: dict[str, str]) -> session.Session:
    options = dict(options)
    options.pop('auth_type')
    options.pop('region_name')
    auth = loading.get_plugin_loader('password').load_from_options(**options)
    return session.Session(auth=auth)


def test_token_issued_and_validated(keystone):
    assert keystone.startup_seconds is not None
    user_id = keystone.add_user('ks-test-user', 'pw-1', 'ks-test-project',
                                ['member', 'reader'])
    # Idempotent: the same ids again, the password updated.
    assert keystone.add_user('ks-test-user', 'pw-2', 'ks-test-project',
                             ['member']) == user_id
    project_id = keystone.add_project('ks-test-project')
    assert keystone.add_project('ks-test-project') == project_id
    assert keystone.add_role('member') == keystone.add_role('member')

    user = _session(keystone.ksa_options('ks-test-user', 'pw-2',
                                         'ks-test-project'))
    token = user.get_token()
    assert user.get_user_id() == user_id
    assert user.get_project_id() == project_id

    response = keystone.admin_session().get(
        keystone.url + '/v3/auth/tokens',
        headers={'X-Subject-Token': token})
    assert response.status_code == 200
    body = response.json()['token']
    assert body['user']['id'] == user_id
    assert body['project']['id'] == project_id
    assert {r['name'] for r in body['roles']} >= {'member', 'reader'}
    # A token that was never issued is refused.
    response = keystone.admin_session().get(
        keystone.url + '/v3/auth/tokens',
        headers={'X-Subject-Token': token[:-4] + 'AAAA'}, raise_exc=False)
    assert response.status_code == 404


def test_service_in_catalog(keystone):
    keystone.add_user('ks-test-service', 'pw', 'service',
                      ['admin', 'service'])
    keystone.add_service('ks-test-type', 'ks-test', 'http://127.0.0.1:9/x')
    keystone.add_service('ks-test-type', 'ks-test', 'http://127.0.0.1:9/y')
    sess = _session(keystone.ksa_options('ks-test-service', 'pw'))
    for interface in ('public', 'internal', 'admin'):
        assert sess.get_endpoint(service_type='ks-test-type',
                                 interface=interface,
                                 region_name=keystone_server.REGION) == (
            'http://127.0.0.1:9/y')
    assert sess.get_endpoint(service_type='identity',
                             interface='public') == keystone.url
    options = keystone.authtoken_options('ks-test-service', 'pw')
    assert options['www_authenticate_uri'] == keystone.url
    assert options['auth_type'] == 'password'
