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

"""Nova's own Cyborg client (nova.accelerator.cyborg from the installed
``nova`` package) against a running Cyborg.

Nova builds its adapter with ``nova.utils.get_sdk_adapter('accelerator',
admin=False, ksa_auth=<user auth from the RequestContext>)``: a keystoneauth
session from the ``[cyborg]`` options and an openstacksdk Connection with
``oslo_conf=CONF``. With ``[cyborg]endpoint_override`` set, no Keystone or
service catalog is involved; the user's token is sent and ignored by noauth.
The calls run in a separate interpreter (see nova_probe.py for why).
"""

import json
import os
import subprocess
import sys
import uuid

from keystoneauth1 import session as ksa_session
from keystoneauth1.loading import get_plugin_loader
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, 'nova_probe.py')

FPGA_FUNCTION = '3afb1c0e-1f6e-4b5e-9b6b-9f2b6a1c0d11'
GROUPS = [
    {'resources:FPGA': '1',
     'trait:CUSTOM_FPGA_INTEL_ARRIA10': 'required',
     'trait:CUSTOM_FPGA_SLOW': 'forbidden',
     'accel:function_id': FPGA_FUNCTION},
    {'resources:PGPU': '2',
     'trait:CUSTOM_GPU_MODEL_A': 'required'},
    {'resources:CUSTOM_ACCELERATOR_QAT': '1'},
]


def _probe(request):
    proc = subprocess.run([sys.executable, PROBE, json.dumps(request)],
                          capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _admin_session(endpoint):
    auth = get_plugin_loader('none').load_from_options(endpoint=endpoint)
    return ksa_session.Session(auth=auth)


@pytest.fixture(scope='module')
def profiles(cyborg_endpoint):
    """Create the profiles with a plain keystoneauth session (noauth)."""
    sess = _admin_session(cyborg_endpoint)
    suffix = uuid.uuid4().hex[:12]
    made = {}
    for key, groups in (('multi', GROUPS),
                        ('single', [{'resources:FPGA': '2'}])):
        name = 'nova-%s-%s' % (key, suffix)
        resp = sess.post(cyborg_endpoint + '/v2/device_profiles',
                         json=[{'name': name, 'groups': groups}])
        assert resp.status_code == 201, resp.text
        made[key] = name
    made['missing'] = 'nova-missing-%s' % suffix
    yield made
    for key in ('multi', 'single'):
        sess.delete(cyborg_endpoint + '/v2/device_profiles/' + made[key],
                    raise_exc=False)


@pytest.fixture(scope='module', params=['base-url', 'v2-url'])
def nova_results(request, cyborg_endpoint, profiles):
    """One probe run per endpoint_override form: the unversioned base URL
    (keystoneauth discovers /v2) and the devstack-style catalog form
    ending in /v2."""
    override = cyborg_endpoint
    if request.param == 'v2-url':
        override += '/v2'
    owner = '9f0c5a4e-1f2b-4c3d-8e9f-0a1b2c3d4e5f'
    ops = [['request_groups', profiles['multi'], None],
           ['groups', profiles['multi'], None],
           ['request_groups', profiles['single'], owner],
           ['request_groups', profiles['missing'], None],
           ['groups', profiles['missing'], None]]
    result = _probe({'endpoint_override': override, 'ops': ops})
    result['owner'] = owner
    return result


def test_import_does_not_monkey_patch(nova_results):
    assert nova_results['nova_monkey_patched'] is False
    assert nova_results.get('eventlet_patched', []) == []


def test_import_without_env_var_does_not_monkey_patch(cyborg_endpoint):
    result = _probe({'endpoint_override': cyborg_endpoint, 'ops': [],
                     'disable_patching_env': False})
    assert result['nova_monkey_patched'] is False
    assert result.get('eventlet_patched', []) == []


def test_device_profile_groups(nova_results):
    answer = nova_results['answers'][1]
    assert answer == {'groups': GROUPS}


def test_request_groups_multi_group_profile(nova_results):
    answer = nova_results['answers'][0]
    assert 'error' not in answer, answer
    assert answer['types'] == ['nova.objects.request_spec.RequestGroup']
    groups = answer['request_groups']
    assert [g['requester_id'] for g in groups] == [
        'device_profile_0', 'device_profile_1', 'device_profile_2']
    assert groups[0]['resources'] == {'FPGA': 1}
    assert groups[0]['required_traits'] == ['CUSTOM_FPGA_INTEL_ARRIA10']
    assert groups[0]['forbidden_traits'] == ['CUSTOM_FPGA_SLOW']
    assert groups[1]['resources'] == {'PGPU': 2}
    assert groups[1]['required_traits'] == ['CUSTOM_GPU_MODEL_A']
    assert groups[1]['forbidden_traits'] == []
    assert groups[2]['resources'] == {'CUSTOM_ACCELERATOR_QAT': 1}
    assert groups[2]['required_traits'] == []
    assert groups[2]['forbidden_traits'] == []
    for group in groups:
        assert group['use_same_provider'] is True
        assert group['provider_uuids'] == []


def test_request_groups_with_port_owner(nova_results):
    answer = nova_results['answers'][2]
    assert 'error' not in answer, answer
    [group] = answer['request_groups']
    assert group['requester_id'] == 'device_profile_0' + nova_results['owner']
    assert group['resources'] == {'FPGA': 2}


@pytest.mark.parametrize('index', [3, 4])
def test_missing_profile_raises_device_profile_error(nova_results, profiles,
                                                     index):
    answer = nova_results['answers'][index]
    assert answer['error']['type'] == 'nova.exception.DeviceProfileError'
    message = answer['error']['message']
    assert profiles['missing'] in message
    assert 'Expected 1 device profile but got nothing.' in message
