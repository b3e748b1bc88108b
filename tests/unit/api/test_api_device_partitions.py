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

"""Devices' partitions in the API (microversion 2.10): what a report
stored, on each database, and the admin call that sets a profile (the
conductor is a mock here; see tests/unit/conductor/test_partitions.py)."""

from unittest import mock

import pytest
import webob

from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.api import app as api_app
from cyborg.common import rpc
from cyborg.conductor import inventory
from cyborg.domain import device_tree
from cyborg.domain import partitions

STATE = partitions.state('homogeneous', '1g.18gb', True, 2, 5)


def _report(context, conf, documents):
    """Report the fake driver's two devices, the first with
    ``documents[0]`` as its partitions (when not None), and so on."""
    conf.set_override('num_devices', 2, group='fake_driver')
    try:
        wire = device_tree.tree_to_wire(fake.FakeDriver(conf).discover())
    finally:
        conf.clear_override('num_devices', group='fake_driver')
    for device, document in zip(wire, documents, strict=True):
        if document is not None:
            device['partitions'] = document
    inventory.apply(context, 'host1', 'host1', wire,
                    device_tree.tree_digest(wire), [])
    return wire


@pytest.fixture
def app(conf, database, admin_context):
    conf.set_override('auth_strategy', 'noauth', group='api')
    _report(admin_context, conf, [STATE, None])
    with mock.patch('cyborg.conductor.rpcapi.ConductorAPI') as api:
        application = api_app.setup_app(conf, transport=object())
        application.conductor = api.return_value
        yield application


def _request(app, method, path, version='2.10', body=None, roles='admin'):
    headers = {'x-roles': roles,
               'OpenStack-API-Version': 'accelerator ' + version}
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.json = body
    return request.get_response(app)


def _shown(app, version='2.10'):
    response = _request(app, 'GET', '/v2/devices', version)
    assert response.status_int == 200
    return response.json['devices']


def test_partitions_at_2_10(app):
    devices = _shown(app)
    assert sorted((d['partitions'] is None) for d in devices) == [
        False, True]
    [partitioned] = [d for d in devices if d['partitions']]
    assert partitioned['partitions'] == STATE
    one = _request(app, 'GET', '/v2/devices/' + partitioned['uuid'])
    assert one.json['partitions'] == STATE


@pytest.mark.parametrize('version', ['2.0', '2.9'])
def test_below_2_10_the_response_is_as_before(app, version):
    response = _request(app, 'GET', '/v2/devices', version)
    assert b'partitions' not in response.body


def test_each_report_replaces_them(app, conf, admin_context):
    changed = dict(STATE, in_use=3, creatable=4)
    _report(admin_context, conf, [changed, None])
    assert [d['partitions'] for d in _shown(app)
            if d['partitions']] == [changed]
    # Not partitioned any more (the mode changed), and a document an agent
    # got wrong: stored as none.
    _report(admin_context, conf, [None, dict(STATE, mode='dynamic')])
    assert [d['partitions'] for d in _shown(app)] == [None, None]


def _uuid(app):
    return _shown(app)[0]['uuid']


def test_setting_a_profile_asks_the_conductor(app):
    uuid = _uuid(app)
    response = _request(app, 'PUT', '/v2/devices/%s/partitions' % uuid,
                        body={'profile': '2g.35gb', 'pinned': True})
    assert response.status_int == 202, response.body
    assert response.body == b''
    call = app.conductor.device_set_partitions
    assert call.call_args.args[1:] == (uuid, '2g.35gb', True)


@pytest.mark.parametrize('version, body, status', [
    ('2.9', {'profile': '2g.35gb', 'pinned': True}, 406),
    ('2.10', {'profile': None, 'pinned': True}, 400),
    ('2.10', {'profile': '2g', 'pinned': True}, 400),
    ('2.10', {'profile': '2g.35gb', 'pinned': 'yes'}, 400),
    ('2.10', {'pinned': False}, 400),
    ('2.10', [], 400),
])
def test_a_bad_request_changes_nothing(app, version, body, status):
    uuid = _uuid(app)
    response = _request(app, 'PUT', '/v2/devices/%s/partitions' % uuid,
                        version, body=body)
    assert response.status_int == status, response.body
    assert not app.conductor.device_set_partitions.called


def test_a_conductor_capped_below_1_8_is_503(app):
    app.conductor.device_set_partitions.side_effect = rpc.RPCVersionCapped(
        'cyborg-conductor', 'device_set_partitions', '1.8', '1.7',
        'conductor')
    response = _request(app, 'PUT', '/v2/devices/%s/partitions'
                        % _uuid(app), body={'profile': '2g.35gb',
                                            'pinned': False})
    assert response.status_int == 503, response.body


def test_members_may_not_set_a_profile(app):
    response = _request(app, 'PUT', '/v2/devices/%s/partitions'
                        % _uuid(app), body={'profile': None,
                                            'pinned': False},
                        roles='member')
    assert response.status_int == 403
    assert not app.conductor.device_set_partitions.called
