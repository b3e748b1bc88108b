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

"""Devices' utilization in the API (microversion 2.6), from what a
report stored, on each database."""

import json
from unittest import mock

import pytest
import webob

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.api import app as api_app
from cyborg.conductor import inventory
from cyborg.domain import device_tree


@pytest.fixture
def app(conf, database, admin_context):
    conf.set_override('auth_strategy', 'noauth', group='api')
    conf.set_override('num_devices', 2, group='fake_driver')
    wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    measured = wire[0]['address']
    inventory.apply(admin_context, 'host1', 'host1', wire,
                    device_tree.tree_digest(wire), [],
                    {measured: {'gpu_percent': 37, 'memory_used_mib': 1024,
                                'memory_total_mib': 15360}})
    conf.clear_override('num_devices', group='fake_driver')
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI'):
        yield api_app.setup_app(conf, transport=object())


def _get(app, path, version=None):
    headers = {'x-roles': 'admin'}
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    response = webob.Request.blank(path, headers=headers).get_response(app)
    assert response.status_int == 200
    return response


def test_utilization_at_2_6(app):
    devices = _get(app, '/v2/devices', '2.6').json['devices']
    shown = [d['utilization'] for d in devices]
    assert shown.count(None) == 1
    [measured] = [u for u in shown if u is not None]
    assert measured['metrics'] == {'gpu_percent': 37.0,
                                   'memory_used_mib': 1024,
                                   'memory_total_mib': 15360}
    assert measured['reported_at'].endswith('Z')
    uuid = [d['uuid'] for d in devices if d['utilization']][0]
    one = _get(app, '/v2/devices/' + uuid, '2.6').json
    assert one['utilization'] == measured


@pytest.mark.parametrize('version', [None, '2.4', '2.5'])
def test_below_2_6_the_response_is_as_before(app, version):
    response = _get(app, '/v2/devices', version)
    devices = json.loads(response.body)['devices']
    assert all('utilization' not in d for d in devices)
    assert b'utilization' not in response.body
    uuid = devices[0]['uuid']
    assert b'utilization' not in _get(app, '/v2/devices/' + uuid,
                                      version).body
