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

"""Taints in the API: the profile answer Nova reads forbids the taints a
group does not tolerate, tolerations at 2.8, devices' taints and the
device health of accelerator requests at 2.8; on each database."""

import datetime
import json
import time
from unittest import mock

from oslo_utils import timeutils
import pytest
import sqlalchemy as sa
import webob

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.api import app as api_app
from cyborg.api import profile_cache
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import providers as providers_db
from cyborg.db import taints as taints_db
from cyborg.domain import device_tree
from cyborg.domain import providers
from cyborg.domain import tolerations

T0 = datetime.datetime(2026, 3, 1, 10, 0, 0)
T1 = T0 + datetime.timedelta(minutes=1)
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
XID = {'key': 'gpu.xid', 'effect': 'NoSchedule', 'value': '79',
       'source': 'driver', 'reason': 'Xid 79'}
FORBIDDEN = {'trait:CUSTOM_TAINT_GPU_XID': 'forbidden'}
ADMIN = {'x-roles': 'admin'}
OWNER = {'x-roles': 'member,reader', 'x-project-id': 'p1'}


@pytest.fixture
def clock():
    timeutils.set_time_override(T0)
    yield timeutils.set_time_override
    timeutils.clear_time_override()


@pytest.fixture
def conductor():
    return mock.Mock()


@pytest.fixture
def wire(conf, database, admin_context, clock):
    """Two devices of host1, the first with a NoSchedule driver taint,
    and their providers recorded as written to Placement since."""
    conf.set_override('num_devices', 2, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')
    wire[0]['taints'] = [XID]
    wire[0]['health'] = 'unhealthy'
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    rows = providers_db.host_rows(admin_context, 'host1')
    clock(T1)
    providers_db.save_sync(admin_context, rows.service.id,
                           providers_db.SyncRecord(providers=[
                               dict(uuid=row.rp_uuid, host='host1',
                                    name=row.name, parent_uuid='compute',
                                    generation=1, inventory_hash='i',
                                    traits_hash='t', adopted=False)
                               for row in rows.deployables]))
    for name, groups in (
            ('plain', [{'resources:FPGA': '1'}]),
            ('tolerant', [{'resources:FPGA': '1',
                           'toleration:gpu.xid': 'Exists'}]),
            ('picky', [{'resources:FPGA': '1',
                        'toleration:gpu.xid': 'Equal:31'}])):
        profiles_db.device_profile_create(admin_context, {
            'name': name, 'groups': groups})
    return wire


@pytest.fixture
def app(conf, conductor, wire):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=conductor):
        yield api_app.setup_app(conf, transport=object())
    conf.clear_override('device_profile_cache_ttl', group='api')
    conf.clear_override('health_unknown_after', group='taints')


def _request(app, path, version=None, headers=ADMIN, method='GET',
             body=None):
    headers = dict(headers)
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.body = json.dumps(body).encode()
        request.content_type = 'application/json'
    return request.get_response(app)


def _groups(app, name, version=None):
    response = _request(app, '/v2/device_profiles?name=' + name, version)
    assert response.status_int == 200
    return response.json['device_profiles'][0]['groups']


@pytest.mark.parametrize('version', [None, '2.7', '2.8'])
def test_nova_reads_the_untolerated_taints_as_forbidden(app, version):
    assert _groups(app, 'plain', version) == [
        dict({'resources:FPGA': '1'}, **FORBIDDEN)]
    assert _groups(app, 'tolerant', version) == [
        {'resources:FPGA': '1', 'toleration:gpu.xid': 'Exists'}]
    # Equal:31 does not tolerate the value 79.
    assert _groups(app, 'picky', version) == [{
        'resources:FPGA': '1', 'toleration:gpu.xid': 'Equal:31',
        'trait:' + tolerations.value_trait_name('gpu.xid', '79'):
        'forbidden'}]


def test_by_name_or_uuid_too_but_not_the_whole_list(app):
    one = _request(app, '/v2/device_profiles/plain', '2.2').json
    assert one['device_profile']['groups'][0] == dict(
        {'resources:FPGA': '1'}, **FORBIDDEN)
    by_uuid = _request(app, '/v2/device_profiles/'
                       + one['device_profile']['uuid']).json
    assert by_uuid['device_profile']['groups'] == one['device_profile'][
        'groups']
    listed = _request(app, '/v2/device_profiles').json['device_profiles']
    assert {'resources:FPGA': '1'} in [p['groups'][0] for p in listed]


def test_the_active_taints_cost_one_cached_query(app, conf):
    calls = []
    real = taints_db.active_scheduling_taints

    def counted(context):
        calls.append(1)
        return real(context)
    with mock.patch.object(taints_db, 'active_scheduling_taints', counted):
        for _ in range(3):
            _groups(app, 'plain')
    # The default cache (2 s) answers the second and third reads.
    assert len(calls) == 1


def test_a_disabled_cache_reads_the_active_taints_every_time():
    cache = profile_cache.ProfileCache(0)
    answers = iter([{'a': {''}}, {}])
    assert cache.active_taints(lambda: next(answers)) == {'a': {''}}
    assert cache.active_taints(lambda: next(answers)) == {}


def test_without_active_taints_the_groups_are_as_stored(
        app, database, admin_context):
    assert 'trait:CUSTOM_TAINT_GPU_XID' in _groups(app, 'plain')[0]
    with database.begin() as connection:
        connection.execute(sa.delete(models.TAINTS))
    # Within the cache's time the taint is still answered...
    assert 'trait:CUSTOM_TAINT_GPU_XID' in _groups(app, 'plain')[0]
    # ... and no longer after it.
    later = time.monotonic() + 3
    with mock.patch('cyborg.api.profile_cache.time.monotonic',
                    return_value=later):
        assert _groups(app, 'plain') == [{'resources:FPGA': '1'}]


def _create(app, version, groups):
    return _request(app, '/v2/device_profiles', version, method='POST',
                    body={'name': 'new', 'groups': groups})


def test_tolerations_are_accepted_at_2_8_only(app, conductor):
    groups = [{'resources:FPGA': '1', 'toleration:gpu.xid': 'Exists'}]
    refused = _create(app, '2.7', groups)
    assert refused.status_int == 400
    assert 'group keys must be of the form' in refused.text
    conductor.device_profile_create.assert_not_called()
    conductor.device_profile_create.return_value = {
        'uuid': '2f2b4e9e-6b8a-4f2c-9d0e-5b1d6c7a8e01', 'name': 'new',
        'description': None, 'groups': groups, 'created_at': T0,
        'updated_at': None}
    assert _create(app, '2.8', groups).status_int == 201
    values = conductor.device_profile_create.call_args[0][1]
    assert values['groups'] == groups


def test_a_bad_toleration_is_a_clear_400(app, conductor):
    response = _create(app, '2.8', [{'resources:FPGA': '1',
                                     'toleration:gpu.xid': 'Sometimes'}])
    assert response.status_int == 400
    assert json.loads(response.json['error_message'])['faultstring'] == (
        'value of toleration:gpu.xid must be "Exists" or "Equal:<value>", '
        "not 'Sometimes' (group 0)")
    conductor.device_profile_create.assert_not_called()


def test_devices_show_their_taints_at_2_8(app):
    devices = _request(app, '/v2/devices', '2.8').json['devices']
    shown = {d['hostname'] + str(i): d['taints']
             for i, d in enumerate(sorted(devices,
                                          key=lambda d: d['created_at']))}
    assert sorted(map(len, shown.values())) == [0, 1]
    [taint] = [t for taints in shown.values() for t in taints]
    assert taint == {'key': 'gpu.xid', 'value': '79', 'effect': 'NoSchedule',
                     'source': 'driver', 'reason': 'Xid 79',
                     'added_at': '2026-03-01T10:00:00+00:00'}
    uuid = next(d['uuid'] for d in devices if d['taints'])
    assert _request(app, '/v2/devices/' + uuid, '2.8').json['taints'] == [
        taint]
    below = _request(app, '/v2/devices', '2.7')
    assert b'taints' not in below.body


def _bind(admin_context, wire, address_index=0):
    arq = arq_db.arq_create(admin_context, 'tolerant', 'p1')[0]
    device = wire[address_index]
    binding_db.bind(admin_context, {arq['uuid']: {
        'hostname': 'host1', 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            'host1', device['address'], device['deployables'][0]['name'])}},
        None, 'c1')
    return arq['uuid']


def test_the_owner_sees_the_health_of_its_device_at_2_8(
        app, admin_context, wire):
    uuid = _bind(admin_context, wire)
    unbound = arq_db.arq_create(admin_context, 'plain', 'p1')[0]['uuid']
    arqs = {arq['uuid']: arq for arq in _request(
        app, '/v2/accelerator_requests', '2.8', OWNER).json['arqs']}
    assert arqs[uuid]['device_health'] == {
        'status': 'Unhealthy', 'reason': 'gpu.xid: Xid 79',
        'since': '2026-03-01T10:00:00+00:00'}
    assert arqs[unbound]['device_health'] is None
    one = _request(app, '/v2/accelerator_requests/' + uuid, '2.8', OWNER)
    assert one.json['device_health']['status'] == 'Unhealthy'
    below = _request(app, '/v2/accelerator_requests/' + uuid, '2.7', OWNER)
    assert b'device_health' not in below.body
    # Another project sees nothing of it.
    other = _request(app, '/v2/accelerator_requests/' + uuid, '2.8',
                     dict(OWNER, **{'x-project-id': 'p2'}))
    assert other.status_int == 404


def test_health_is_unknown_when_the_agent_is_silent(app, conf,
                                                    admin_context, wire):
    uuid = _bind(admin_context, wire, 1)
    health = _request(app, '/v2/accelerator_requests/' + uuid, '2.8',
                      OWNER).json['device_health']
    assert health['status'] == 'Healthy'
    conf.set_override('health_unknown_after', 30, group='taints')
    timeutils.advance_time_seconds(31)
    health = _request(app, '/v2/accelerator_requests/' + uuid, '2.8',
                      OWNER).json['device_health']
    assert health == {
        'status': 'Unknown',
        'reason': "no report from the device's host for more than 30 "
                  "seconds",
        'since': '2026-03-01T10:00:00+00:00'}
