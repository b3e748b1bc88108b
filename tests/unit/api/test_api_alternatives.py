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

"""Ordered alternatives in the API: accepted at 2.9 only; the profile
Nova reads (below 2.9) answers each group as the alternative the
conductor's probe found, cached and composed with the taints' forbidden
traits; an ARQ shows the alternative its bind matched at 2.9; on each
database."""

import datetime
import json
import time
from unittest import mock

from oslo_utils import timeutils
import pytest
import webob

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.api import app as api_app
from cyborg.common import rpc
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import inventory
from cyborg.db import providers as providers_db
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import device_tree
from cyborg.domain import providers

T0 = datetime.datetime(2026, 3, 1, 10, 0, 0)
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
ADMIN = {'x-roles': 'admin'}
OWNER = {'x-roles': 'member,reader', 'x-project-id': 'p1'}
XID = {'key': 'gpu.xid', 'effect': 'NoSchedule', 'value': '79',
       'source': 'driver', 'reason': 'Xid 79'}
FORBIDDEN = {'trait:CUSTOM_TAINT_GPU_XID': 'forbidden'}
PGPU = {'resources:PGPU': '1', 'trait:CUSTOM_GPU_H100': 'required'}
FPGA = {'resources:FPGA': '1'}
GROUPS = [{'accel:attach_target': 'VM', 'alternatives': [PGPU, FPGA]}]


@pytest.fixture
def wire(conf, database, admin_context):
    """One fake FPGA of host1 with a NoSchedule taint, and the profile
    ``either`` of one group: an H100 PGPU, else an FPGA."""
    timeutils.set_time_override(T0)
    conf.set_override('num_devices', 1, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.clear_override('num_devices', group='fake_driver')
    wire[0]['taints'] = [XID]
    inventory.apply_report(admin_context, 'host1', 'host1', wire,
                           device_tree.tree_digest(wire), [])
    # Its provider written to Placement since: the taint is active.
    rows = providers_db.host_rows(admin_context, 'host1')
    timeutils.set_time_override(T0 + datetime.timedelta(minutes=1))
    providers_db.save_sync(admin_context, rows.service.id,
                           providers_db.SyncRecord(providers=[
                               dict(uuid=row.rp_uuid, host='host1',
                                    name=row.name, parent_uuid='compute',
                                    generation=1, inventory_hash='i',
                                    traits_hash='t', adopted=False)
                               for row in rows.deployables]))
    profiles_db.device_profile_create(admin_context, {
        'name': 'either', 'groups': GROUPS})
    profiles_db.device_profile_create(admin_context, {
        'name': 'plain', 'groups': [FPGA]})
    yield wire
    timeutils.clear_time_override()


@pytest.fixture
def conductor():
    conductor = mock.Mock()
    conductor.alternatives_probe.return_value = [1]
    return conductor


@pytest.fixture
def app(conf, conductor, wire):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI',
                    return_value=conductor):
        yield api_app.setup_app(conf, transport=object())
    conf.clear_override('alternatives_probe_ttl', group='api')


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


def _create(app, version, groups):
    return _request(app, '/v2/device_profiles', version, method='POST',
                    body={'name': 'new', 'groups': groups})


def test_alternatives_are_accepted_at_2_9_only(app, conductor):
    groups = [{'alternatives': [{'resources:pgpu': 1}, FPGA]}]
    refused = _create(app, '2.8', groups)
    assert refused.status_int == 400
    assert 'alternatives need microversion 2.9' in refused.text
    conductor.device_profile_create.assert_not_called()
    conductor.device_profile_create.return_value = {
        'uuid': '2f2b4e9e-6b8a-4f2c-9d0e-5b1d6c7a8e01', 'name': 'new',
        'description': None, 'groups': groups, 'created_at': T0,
        'updated_at': None}
    assert _create(app, '2.9', groups).status_int == 201
    values = conductor.device_profile_create.call_args[0][1]
    assert values['groups'] == [
        {'alternatives': [{'resources:PGPU': '1'}, FPGA]}]


@pytest.mark.parametrize('groups, message', [
    ([{'alternatives': [FPGA] * 9}], 'is too long'),
    ([{'alternatives': [{'resources:FPGA': 1.5}]}], 'is not of type'),
    ([{'alternatives': [FPGA, {'resources:PGPU': 2}]}],
     'request different numbers of accelerators'),
])
def test_bad_alternatives_are_a_clear_400(app, conductor, groups, message):
    response = _create(app, '2.9', groups)
    assert response.status_int == 400
    assert message in response.text
    conductor.device_profile_create.assert_not_called()


@pytest.mark.parametrize('version', [None, '2.0', '2.8'])
def test_nova_reads_the_alternative_placement_can_satisfy(
        app, conductor, version):
    assert _groups(app, 'either', version) == [
        dict({'accel:attach_target': 'VM'}, **FPGA, **FORBIDDEN)]
    # The probe asked about each alternative as Nova would read it: with
    # the group's keys and the taints it forbids.
    [candidates] = conductor.alternatives_probe.call_args[0][1:]
    assert candidates == [[
        dict({'accel:attach_target': 'VM'}, **option, **FORBIDDEN)
        for option in (PGPU, FPGA)]]
    # By name or uuid, one profile: the same answer.
    one = _request(app, '/v2/device_profiles/either', '2.2').json
    assert one['device_profile']['groups'] == _groups(app, 'either', version)


def test_none_satisfiable_answers_the_first(app, conductor):
    conductor.alternatives_probe.return_value = [0]
    assert _groups(app, 'either') == [
        dict({'accel:attach_target': 'VM'}, **PGPU, **FORBIDDEN)]


@pytest.mark.parametrize('error', [
    rpc.RPCVersionCapped(topic='conductor', method='alternatives_probe',
                         version='1.7', version_cap='1.5',
                         option='conductor'),
    TimeoutError('no conductor')])
def test_without_a_probe_the_first_alternative_is_answered(
        app, conductor, error):
    conductor.alternatives_probe.side_effect = error
    assert _groups(app, 'either')[0]['resources:PGPU'] == '1'
    # Not cached: the next read asks again.
    _groups(app, 'either')
    assert conductor.alternatives_probe.call_count == 2


def test_the_choice_is_cached_for_the_probe_ttl(app, conductor, conf):
    for _ in range(3):
        assert 'resources:FPGA' in _groups(app, 'either')[0]
    assert conductor.alternatives_probe.call_count == 1
    conductor.alternatives_probe.return_value = [0]
    later = time.monotonic() + conf.api.alternatives_probe_ttl + 0.1
    with mock.patch('cyborg.api.profile_cache.time.monotonic',
                    return_value=later):
        # Stale but within alternatives_probe_max_stale: answered at once,
        # probed again in the background.
        assert 'resources:FPGA' in _groups(app, 'either')[0]
        deadline = time.time() + 10
        while ('resources:PGPU' not in _groups(app, 'either')[0]
               and time.time() < deadline):
            time.sleep(0.01)
        assert 'resources:PGPU' in _groups(app, 'either')[0]
    # One background probe, however many reads saw the stale choice.
    assert conductor.alternatives_probe.call_count == 2
    # Older than alternatives_probe_max_stale: the read waits for a probe.
    conductor.alternatives_probe.return_value = [1]
    much_later = later + conf.api.alternatives_probe_max_stale + 0.1
    with mock.patch('cyborg.api.profile_cache.time.monotonic',
                    return_value=much_later):
        assert 'resources:FPGA' in _groups(app, 'either')[0]
    assert conductor.alternatives_probe.call_count == 3


def test_plain_profiles_cost_no_probe(app, conductor):
    assert _groups(app, 'plain') == [dict(FPGA, **FORBIDDEN)]
    # The whole list shows first alternatives, probing nothing.
    listed = {p['name']: p['groups'] for p in _request(
        app, '/v2/device_profiles').json['device_profiles']}
    assert listed['either'] == [dict({'accel:attach_target': 'VM'}, **PGPU)]
    conductor.alternatives_probe.assert_not_called()


def test_at_2_9_the_alternatives_are_shown_as_stored(app, conductor):
    assert _groups(app, 'either', '2.9') == [
        {'accel:attach_target': 'VM', 'alternatives': [
            dict(option, **FORBIDDEN) for option in (PGPU, FPGA)]}]
    one = _request(app, '/v2/device_profiles/either', '2.9').json
    assert one['device_profile']['groups'][0]['alternatives'][1] == dict(
        FPGA, **FORBIDDEN)
    listed = _request(app, '/v2/device_profiles', '2.9').json
    assert GROUPS in [p['groups'] for p in listed['device_profiles']]
    conductor.alternatives_probe.assert_not_called()


def test_the_arq_records_the_alternative_its_bind_matched(
        app, admin_context, wire):
    [arq] = arq_db.arq_create(admin_context, 'either', 'p1')
    plain = arq_db.arq_create(admin_context, 'plain', 'p1')[0]['uuid']
    device = wire[0]
    rp_uuid = providers.provider_uuid('host1', device['address'],
                                      device['deployables'][0]['name'])
    for uuid in (arq['uuid'], plain):
        binding_db.bind(admin_context, {uuid: {
            'hostname': 'host1', 'instance_uuid': INSTANCE,
            'device_rp_uuid': rp_uuid}}, None, 'c1')
    path = '/v2/accelerator_requests/' + arq['uuid']
    shown = _request(app, path, '2.9', OWNER).json
    assert shown['state'] == 'Bound'
    assert shown['alternative'] == 1
    assert 'alternative' not in _request(app, path, '2.8', OWNER).json
    listed = {a['uuid']: a for a in _request(
        app, '/v2/accelerator_requests', '2.9', OWNER).json['arqs']}
    assert listed[plain]['alternative'] is None
    arq_db.arq_unbind(admin_context, [arq['uuid']], None)
    assert _request(app, path, '2.9', OWNER).json['alternative'] is None


def test_a_bind_to_a_device_no_alternative_fits_is_refused(
        admin_context, wire, database):
    profiles_db.device_profile_create(admin_context, {
        'name': 'gpus', 'groups': dp_rules.normalize_groups([
            {'alternatives': [PGPU, {'resources:VGPU': 1}]}])})
    [arq] = arq_db.arq_create(admin_context, 'gpus', 'p1')
    device = wire[0]
    with pytest.raises(Exception) as raised:
        binding_db.bind(admin_context, {arq['uuid']: {
            'hostname': 'host1', 'instance_uuid': INSTANCE,
            'device_rp_uuid': providers.provider_uuid(
                'host1', device['address'],
                device['deployables'][0]['name'])}}, None, 'c1')
    assert '(alternative 1) offers resource class FPGA, not VGPU' in str(
        raised.value)
    assert arq_db.arq_list(admin_context, None, uuids=[arq['uuid']])[0][
        'state'] == 'Initial'
