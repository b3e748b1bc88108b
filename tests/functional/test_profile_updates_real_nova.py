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

"""Device profile updates with real Nova services (nova_services.py): a
server boots with a profile's flavor; the profile disabled, a new boot
of the flavor fails at once in the scheduler (NoValidHost, the reason's
resource class in nova-scheduler's log, no ARQ, no allocation) while
the server booted before keeps its ARQ through a reboot and its delete;
enabled again, the next boot works; its groups changed to another
device's trait, the next boot gets that device. A flavor naming the
implicit profile ``class:FPGA`` boots with an accelerator; one asking
``resources:FPGA=1`` without a profile boots without an ARQ, and
``cyborg-manage audit allocations`` finds exactly that allocation.
"""

from __future__ import annotations

import pytest

from tests.functional import nova_services
from tests.functional import servers
from tests.functional import test_real_nova as real_nova

HOST = 'profiles-nova-1'
FIRST_TRAIT = 'CUSTOM_PROFILE_UPD_FIRST'
SECOND_TRAIT = 'CUSTOM_PROFILE_UPD_SECOND'
FIRST_ADDRESS = '0000:91:00.0'
SECOND_ADDRESS = '0000:92:00.0'
NAME = 'upd-fpga'
DISABLED_CLASS = 'CUSTOM_DEVICE_PROFILE_DISABLED_UPD_FPGA'
V2_9 = 'accelerator 2.9'
COMPUTES = [nova_services.ComputeSpec(HOST, [
    real_nova._device(FIRST_ADDRESS, FIRST_TRAIT),
    real_nova._device(SECOND_ADDRESS, SECOND_TRAIT)])]


@pytest.fixture(scope='module')
def rn(postgres, rabbitmq, placement_pg, keystone, work_dir):
    with nova_services.real_nova(
            'profiles-nova', postgres, rabbitmq, placement_pg, keystone,
            work_dir, COMPUTES) as d:
        d.profiles = {}
        d.flavors = {}
        yield d
        d.check_alive()


@pytest.fixture(scope='module')
def flavor(rn):
    """A flavor of profile NAME (one FPGA of the first trait): (flavor
    id, profile uuid)."""
    profile = rn.cyborg('POST', '/device_profiles', json=[{
        'name': NAME, 'groups': [{'resources:FPGA': '1',
                                  'trait:' + FIRST_TRAIT: 'required'}]}])
    created = rn.compute('POST', '/flavors', json={'flavor': {
        'name': 'upd-flavor', 'ram': 64, 'vcpus': 1, 'disk': 1}})['flavor']
    rn.compute('POST', '/flavors/%s/os-extra_specs' % created['id'],
               json={'extra_specs': {'accel:device_profile': NAME}})
    return created['id'], profile['uuid']


@pytest.fixture
def boots(rn):
    ids: list[str] = []
    yield ids
    for server in ids:
        rn.compute_response('DELETE', '/servers/%s' % server)
    for server in ids:
        real_nova._wait_gone(rn, server)
        real_nova._assert_nothing_left(rn, server)


def _flavor(rn, name: str, extra_specs: dict) -> str:
    created = rn.compute('POST', '/flavors', json={'flavor': {
        'name': name, 'ram': 64, 'vcpus': 1, 'disk': 1}})['flavor']
    rn.compute('POST', '/flavors/%s/os-extra_specs' % created['id'],
               json={'extra_specs': extra_specs})
    return created['id']


def _boot(rn, boots, flavor_id: str) -> str:
    server = rn.compute('POST', '/servers', json={'server': {
        'name': 'upd', 'imageRef': nova_services.IMAGE_ID,
        'flavorRef': flavor_id, 'networks': 'none'}})['server']['id']
    boots.append(server)
    return server


def _patch(rn, profile: str, body: dict) -> dict:
    return rn.cyborg('PATCH', '/device_profiles/' + profile, json=body,
                     version=V2_9)['device_profile']


def _address(rn, arq: dict) -> str:
    return real_nova._deployables(rn)[arq['device_rp_uuid']][1]


def test_disable_enable_and_update(rn, flavor, boots):
    flavor_id, profile = flavor
    before = _boot(rn, boots, flavor_id)
    real_nova._wait_status(rn, before, 'ACTIVE')
    [held] = real_nova._assert_bound(rn, before, HOST).values()
    assert _address(rn, held) == FIRST_ADDRESS

    assert _patch(rn, profile, {'enabled': False})['enabled'] is False
    refused = _boot(rn, boots, flavor_id)
    failed = real_nova._wait_status(rn, refused, 'ERROR', timeout=60)
    assert 'No valid host' in failed['fault']['message']
    # Refused before any claim and any ARQ; the scheduler says why.
    real_nova._assert_nothing_left(rn, refused)
    assert DISABLED_CLASS in rn.log_of('nova-scheduler')
    # The server booted before keeps its ARQ through a reboot.
    real_nova._action(rn, before, {'reboot': {'type': 'HARD'}})
    assert real_nova._assert_bound(rn, before, HOST) == {held['uuid']: held}

    assert _patch(rn, profile, {'enabled': True})['enabled'] is True
    again = _boot(rn, boots, flavor_id)
    real_nova._wait_status(rn, again, 'ACTIVE')
    [arq] = real_nova._assert_bound(rn, again, HOST).values()
    assert _address(rn, arq) == FIRST_ADDRESS

    updated = _patch(rn, profile, {'groups': [
        {'resources:FPGA': '1', 'trait:' + SECOND_TRAIT: 'required'}]})
    assert updated['groups'][0]['trait:' + SECOND_TRAIT] == 'required'
    moved = _boot(rn, boots, flavor_id)
    real_nova._wait_status(rn, moved, 'ACTIVE')
    [arq] = real_nova._assert_bound(rn, moved, HOST).values()
    assert _address(rn, arq) == SECOND_ADDRESS
    # The servers booted before the change keep theirs.
    assert real_nova._assert_bound(rn, before, HOST) == {held['uuid']: held}

    # Delete of the server booted before the disable releases its ARQ.
    rn.compute_response('DELETE', '/servers/%s' % before)
    real_nova._wait_gone(rn, before)
    real_nova._assert_nothing_left(rn, before)
    servers.wait_for(lambda: real_nova._handles_in_use(
        rn, FIRST_ADDRESS) == 1, 30, 'the first server handle released')


def test_implicit_profile_boots_with_an_accelerator(rn, boots):
    flavor_id = _flavor(rn, 'upd-implicit',
                        {'accel:device_profile': 'class:FPGA'})
    server = _boot(rn, boots, flavor_id)
    real_nova._wait_status(rn, server, 'ACTIVE')
    [arq] = real_nova._assert_bound(rn, server, HOST).values()
    assert arq['device_profile_name'] == 'class:FPGA'
    # Read-only, also once an ARQ stored it.
    rn.cyborg('DELETE', '/device_profiles/class:FPGA', ok=(403,))


def test_audit_finds_an_accelerator_allocated_without_a_profile(rn, boots):
    bare = _flavor(rn, 'upd-bare', {'resources:FPGA': '1'})
    server = _boot(rn, boots, bare)
    real_nova._wait_status(rn, server, 'ACTIVE')
    assert real_nova._arqs(rn, server) == []
    [device_rp] = [rp for rp in real_nova._allocations(rn, server)
                   if rp in real_nova._deployables(rn)]
    result = servers.run_script('cyborg-manage', 'audit', 'allocations',
                                config_file=rn.cyborg_conf)
    assert result.returncode == 3, result.stdout + result.stderr
    address = real_nova._deployables(rn)[device_rp][1]
    assert result.stdout.splitlines()[:-1] == [
        'Allocation without an ARQ: consumer %s holds FPGA=1 of provider '
        '%s (host %s, device %s)' % (server, device_rp, HOST, address)]
