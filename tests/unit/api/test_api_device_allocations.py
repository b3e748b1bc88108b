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

"""Devices at microversion 2.7: why they have their health and since
when, and, to admins, who holds them; on each database."""

import datetime
from unittest import mock

from oslo_utils import timeutils
import pytest
import webob

from cyborg import context
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.api import app as api_app
from cyborg.conductor import inventory
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.domain import arq_states
from cyborg.domain import device_tree
from cyborg.domain import devices as device_rules
from cyborg.domain import providers

REPORTED = datetime.datetime(2026, 3, 1, 10, 0, 0)
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
ADMIN = {'x-roles': 'admin', 'x-project-id': 'admin-project'}
MANAGER = {'x-roles': 'manager', 'x-project-id': 'p1'}


@pytest.fixture
def wire(conf, database, admin_context):
    """Two devices of host1 reported at REPORTED, the first measured and
    held by an ARQ of project p1, the second unhealthy."""
    conf.set_override('num_devices', 2, group='fake_driver')
    conf.set_override('accelerators_per_device', 2, group='fake_driver')
    found = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    conf.set_override('unhealthy_devices', [found[1]['address']],
                      group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    timeutils.set_time_override(REPORTED)
    try:
        inventory.apply(admin_context, 'host1', 'host1', wire,
                        device_tree.tree_digest(wire), [],
                        {wire[0]['address']: {'gpu_percent': 37}})
    finally:
        timeutils.clear_time_override()
        for name in ('num_devices', 'accelerators_per_device',
                     'unhealthy_devices'):
            conf.clear_override(name, group='fake_driver')
    profiles_db.device_profile_create(admin_context, {
        'name': 'one', 'groups': [{'resources:FPGA': '1'}]})
    [arq] = arq_db.arq_create(admin_context, 'one', 'p1')
    binding_db.bind(admin_context, {arq['uuid']: {
        'hostname': 'host1', 'instance_uuid': INSTANCE,
        'device_rp_uuid': providers.provider_uuid(
            'host1', wire[0]['address'], wire[0]['deployables'][0]['name'])}},
        None, 'c1')
    return wire


@pytest.fixture
def app(conf, wire):
    conf.set_override('auth_strategy', 'noauth', group='api')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
        yield api_app.setup_app(conf, transport=object())


def _get(app, path, version, headers=ADMIN):
    headers = dict(headers)
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    response = webob.Request.blank(path, headers=headers).get_response(app)
    assert response.status_int == 200, response.body
    return response.json


def _by_address(app, wire, version, headers=ADMIN):
    devices = _get(app, '/v2/devices', version, headers)['devices']
    assert len(devices) == len(wire)
    shown = {d['uuid']: d for d in devices}
    return [shown[uuid] for uuid in _uuids(wire)]


def _uuids(wire):
    """The devices' uuids, in the order of ``wire``."""
    uuids = {d['address']: d['uuid'] for d in hardware.device_list(
        context.get_admin_context(), {})}
    return [uuids[device['address']] for device in wire]


def _arq(admin_context):
    [arq] = arq_db.arq_list(admin_context, None)
    return arq


def test_admins_see_who_holds_each_deployable(app, wire, admin_context):
    held, unhealthy = _by_address(app, wire, '2.7')
    arq = _arq(admin_context)
    deployable = wire[0]['deployables'][0]
    [shown] = held['deployables']
    assert shown == {
        'uuid': shown['uuid'], 'name': deployable['name'],
        'parent_uuid': None, 'num_accelerators': 2,
        'allocations': [{'arq_uuid': arq['uuid'],
                         'state': arq_states.shown(arq['state']),
                         'instance_uuid': INSTANCE, 'project_id': 'p1'}]}
    assert [d['allocations'] for d in unhealthy['deployables']] == [[]]
    # The same in the device's own document.
    assert _get(app, '/v2/devices/' + held['uuid'], '2.7') == held


def test_health_reason_and_since(app, wire):
    held, unhealthy = _by_address(app, wire, '2.7')
    since = '2026-03-01T10:00:00+00:00'
    assert (held['health'], held['health_reason'], held['health_since']) == (
        'healthy', device_rules.REASON_DISCOVERED, since)
    assert (unhealthy['health'], unhealthy['health_reason'],
            unhealthy['health_since']) == (
        'unhealthy', device_rules.REASON_UNHEALTHY, since)


def test_utilization_keeps_its_report_time(app, wire):
    held, unhealthy = _by_address(app, wire, '2.7')
    assert held['utilization'] == {'metrics': {'gpu_percent': 37.0},
                                   'reported_at': '2026-03-01T10:00:00Z'}
    assert unhealthy['utilization'] is None


def test_others_see_health_but_not_who_holds_the_devices(app, wire):
    for device in _by_address(app, wire, '2.7', MANAGER):
        assert 'deployables' not in device
        assert device['health_reason'] in device_rules.REASONS
    uuid = _uuids(wire)[0]
    assert 'deployables' not in _get(app, '/v2/devices/' + uuid, '2.7',
                                     MANAGER)


@pytest.mark.parametrize('version', [None, '2.4', '2.6'])
def test_below_2_7_the_response_is_as_before(app, wire, version):
    for device in _by_address(app, wire, version):
        assert not {'deployables', 'health_reason', 'health_since'} & set(
            device)
