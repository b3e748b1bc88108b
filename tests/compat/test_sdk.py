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

"""openstacksdk's accelerator proxy against a running Cyborg.

The connection is built the way a user of a no-auth endpoint builds it:
``auth_type='none'`` with the ``endpoint`` auth option, so keystoneauth
really performs version discovery (GET / then GET /v2) and learns the
microversion range from the documents.
"""

import uuid
import warnings

from keystoneauth1 import discover
from keystoneauth1 import session as ksa_session
from keystoneauth1.loading import get_plugin_loader
from openstack import connection
from openstack import exceptions as sdk_exc
import pytest

from cyborg.api import microversion

# What the service advertises (the SDK must read the same).
MIN_VERSION = microversion.MIN_VERSION
MAX_VERSION = microversion.MAX_VERSION
MAX = '%d.%d' % MAX_VERSION


def _connect(endpoint, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return connection.Connection(auth_type='none',
                                     auth={'endpoint': endpoint}, **kwargs)


@pytest.fixture(scope='module')
def conn(cyborg_endpoint):
    c = _connect(cyborg_endpoint)
    yield c
    c.close()


@pytest.fixture
def profile_factory(conn, unique_name):
    created = []

    def make(groups, name=None, **attrs):
        dp = conn.accelerator.create_device_profile(
            name=name or unique_name('sdk'), groups=groups, **attrs)
        created.append(dp.uuid)
        return dp

    yield make
    for dp_uuid in created:
        conn.accelerator.delete_device_profile(dp_uuid, ignore_missing=True)


GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
          {'resources:PGPU': '2', 'trait:CUSTOM_NO_MIG': 'forbidden'}]


# ---------------------------------------------------------------- discovery

@pytest.mark.parametrize('how', ['auth-endpoint', 'endpoint-override',
                                 'endpoint-override-v2'])
def test_discovery_finds_v2_and_microversion_range(cyborg_endpoint, how):
    if how == 'auth-endpoint':
        c = _connect(cyborg_endpoint)
    else:
        override = cyborg_endpoint
        if how == 'endpoint-override-v2':
            override += '/v2'
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            c = connection.Connection(auth_type='none',
                                      accelerator_endpoint_override=override)
    try:
        data = c.accelerator.get_endpoint_data()
        assert data.url.rstrip('/') == cyborg_endpoint + '/v2'
        assert data.api_version == (2, 0)
        assert data.min_microversion == MIN_VERSION
        assert data.max_microversion == MAX_VERSION
        assert c.accelerator.get_api_major_version() == (2, 0)
        assert c.accelerator.get_endpoint().rstrip('/') == (
            cyborg_endpoint + '/v2')
    finally:
        c.close()


def test_ksa_discovery_documents(cyborg_endpoint):
    auth = get_plugin_loader('none').load_from_options(
        endpoint=cyborg_endpoint)
    sess = ksa_session.Session(auth=auth)
    for url in (cyborg_endpoint, cyborg_endpoint + '/v2'):
        disc = discover.get_discovery(sess, url, authenticated=False)
        versions = disc.version_data()
        assert len(versions) == 1, versions
        v = versions[0]
        assert v['version'] == (2, 0)
        assert v['min_microversion'] == MIN_VERSION
        assert v['max_microversion'] == MAX_VERSION
        assert v['url'].rstrip('/') == cyborg_endpoint + '/v2'
        assert v['status'] == discover.Status.CURRENT


def test_microversion_negotiation_headers(conn):
    for requested, expected in (('2.0', '2.0'), ('2.2', '2.2'),
                                ('latest', MAX)):
        resp = conn.accelerator.get('/device_profiles',
                                    microversion=requested)
        assert resp.status_code == 200
        assert resp.headers['OpenStack-API-Version'] == (
            'accelerator ' + expected)
        assert resp.headers['OpenStack-API-Minimum-Version'] == '2.0'
        assert resp.headers['OpenStack-API-Maximum-Version'] == MAX


# ------------------------------------------------------------------ CRUD

def test_create_returns_profile(profile_factory, unique_name):
    name = unique_name('sdk-create')
    dp = profile_factory(GROUPS, name=name, description='two groups')
    assert isinstance(dp.uuid, str)
    uuid.UUID(dp.uuid)
    assert dp.id == dp.uuid
    assert dp.name == name
    assert dp.description == 'two groups'
    assert dp.groups == GROUPS
    assert dp.created_at
    assert dp.updated_at is None


def test_create_without_description(profile_factory):
    dp = profile_factory([{'resources:CUSTOM_QAT': '1'}])
    assert dp.description is None
    assert dp.groups == [{'resources:CUSTOM_QAT': '1'}]


def test_list_contains_created(conn, profile_factory):
    dp = profile_factory(GROUPS)
    listed = {p.uuid: p for p in conn.accelerator.device_profiles()}
    assert dp.uuid in listed
    assert listed[dp.uuid].name == dp.name
    assert listed[dp.uuid].groups == GROUPS


def test_list_filter_by_name(conn, profile_factory):
    first = profile_factory(GROUPS)
    profile_factory([{'resources:FPGA': '1'}])
    found = list(conn.accelerator.device_profiles(name=first.name))
    assert [p.uuid for p in found] == [first.uuid]
    assert list(conn.accelerator.device_profiles(name='no-such-dp')) == []


def test_get_by_uuid(conn, profile_factory):
    dp = profile_factory(GROUPS, description='d')
    got = conn.accelerator.get_device_profile(dp.uuid)
    assert got.uuid == dp.uuid
    assert got.name == dp.name
    assert got.description == 'd'
    assert got.groups == GROUPS
    assert got.created_at


def test_get_by_name_needs_microversion_2_2(cyborg_endpoint, conn,
                                            profile_factory):
    dp = profile_factory(GROUPS)
    with pytest.raises(sdk_exc.HttpException) as info:
        conn.accelerator.get_device_profile(dp.name)
    assert info.value.status_code == 406
    assert 'minimal required API version should be 2.2' in str(info.value)

    c22 = _connect(cyborg_endpoint, accelerator_default_microversion='2.2')
    try:
        got = c22.accelerator.get_device_profile(dp.name)
        assert got.uuid == dp.uuid
        assert got.groups == GROUPS
    finally:
        c22.close()


def test_delete_by_uuid(conn, profile_factory):
    dp = profile_factory(GROUPS)
    conn.accelerator.delete_device_profile(dp.uuid, ignore_missing=False)
    assert dp.uuid not in {p.uuid for p in conn.accelerator.device_profiles()}
    with pytest.raises(sdk_exc.NotFoundException):
        conn.accelerator.get_device_profile(dp.uuid)


def test_delete_resource_object_and_by_name(conn, profile_factory):
    a = profile_factory(GROUPS)
    b = profile_factory(GROUPS)
    conn.accelerator.delete_device_profile(a)
    # delete by name is part of the contract (DELETE /device_profiles/<name>)
    conn.accelerator.delete_device_profile(b.name, ignore_missing=False)
    remaining = {p.uuid for p in conn.accelerator.device_profiles()}
    assert a.uuid not in remaining
    assert b.uuid not in remaining


def test_delete_missing(conn):
    missing = str(uuid.uuid4())
    assert conn.accelerator.delete_device_profile(
        missing, ignore_missing=True) is None
    with pytest.raises(sdk_exc.NotFoundException) as info:
        conn.accelerator.delete_device_profile(missing, ignore_missing=False)
    assert info.value.status_code == 404
    assert 'Device Profile not found with uuid=%s' % missing in str(
        info.value)


# ---------------------------------------------------------------- errors

def test_duplicate_name_conflict(conn, profile_factory):
    dp = profile_factory(GROUPS)
    with pytest.raises(sdk_exc.ConflictException) as info:
        conn.accelerator.create_device_profile(
            name=dp.name, groups=[{'resources:FPGA': '1'}])
    err = info.value
    assert err.status_code == 409
    expected = 'A device_profile with name %s already exists.' % dp.name
    assert err.details == expected
    assert expected in str(err)
    # the failed create must not have added a second profile
    assert len(list(conn.accelerator.device_profiles(name=dp.name))) == 1


def test_get_missing_not_found(conn):
    missing = str(uuid.uuid4())
    with pytest.raises(sdk_exc.NotFoundException) as info:
        conn.accelerator.get_device_profile(missing)
    err = info.value
    assert isinstance(err, sdk_exc.ResourceNotFound)
    assert err.status_code == 404
    assert err.details == 'Device Profile not found with uuid=%s' % missing
    assert err.details in str(err)
    assert err.request_id and err.request_id.startswith('req-')


@pytest.mark.parametrize('groups, fragment', [
    ([{'bogus:FPGA': '1'}], 'Device profile group keys must be of the form'),
    ([{'resources:FPGA': '1', 'trait:CUSTOM_A': 'maybe'}],
     'Unsupported trait value'),
    ([{'resources:FPGA': 'many'}], 'Resources number'),
])
def test_invalid_group_bad_request(conn, unique_name, groups, fragment):
    name = unique_name('sdk-bad')
    with pytest.raises(sdk_exc.BadRequestException) as info:
        conn.accelerator.create_device_profile(name=name, groups=groups)
    assert info.value.status_code == 400
    assert fragment in info.value.details
    assert fragment in str(info.value)
    assert list(conn.accelerator.device_profiles(name=name)) == []


# ---------------------------------------------------------------- updates

def test_update_and_disable_through_the_generic_path(conn, profile_factory):
    """openstacksdk's DeviceProfile cannot commit: an update goes
    through the proxy's generic PATCH at microversion 2.9."""
    dp = profile_factory(GROUPS, description='before')
    path = '/device_profiles/' + dp.uuid
    body = {'description': 'after', 'enabled': False,
            'groups': [{'resources:FPGA': '2'}]}
    assert conn.accelerator.patch(path, json=body,
                                  microversion='2.8').status_code == 406
    resp = conn.accelerator.patch(path, json=body, microversion='2.9')
    assert resp.status_code == 200, resp.text
    shown = resp.json()['device_profile']
    assert (shown['name'], shown['enabled']) == (dp.name, False)
    assert shown['groups'] == [{'resources:FPGA': '2'}]
    got = conn.accelerator.get_device_profile(dp.uuid)
    assert got.description == 'after'
    assert got.updated_at
    # The SDK's own reads (no microversion) see a disabled profile as
    # Nova does.
    [listed] = conn.accelerator.device_profiles(name=dp.name)
    assert listed.groups == [
        {'resources:CUSTOM_DEVICE_PROFILE_DISABLED_'
         + dp.name.upper().replace('-', '_'): '1'}]
    with pytest.raises(sdk_exc.ConflictException) as info:
        conn.accelerator.create_accelerator_request(
            device_profile_name=dp.name)
    assert 'is disabled' in str(info.value)
    resp = conn.accelerator.patch(path, json={'enabled': True},
                                  microversion='2.9')
    assert resp.json()['device_profile']['enabled'] is True
    [listed] = conn.accelerator.device_profiles(name=dp.name)
    assert listed.groups == [{'resources:FPGA': '2'}]
