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

"""Ordered alternatives with real Nova services (nova_services.py): a
flavor's device profile asks for a FIRST device, else a SECOND one.
While a FIRST unit is free, boots land on it; with every FIRST unit
taken, 20 boots land on SECOND devices; freeing a FIRST unit brings the
next boot back to it; with no unit of either left, a boot ends ERROR
(NoValidHost) exactly as for a plain profile. Each ARQ shows (2.9) the
alternative its bind matched. Nova is unchanged: it reads the profile's
plain form, which the service resolves by probing Placement.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid

import pytest

from tests.functional import nova_services
from tests.functional import test_real_nova as real_nova

HOST = 'alt-nova-1'
FIRST = 'CUSTOM_ALT_NOVA_FIRST'
SECOND = 'CUSTOM_ALT_NOVA_SECOND'
FIRST_UNITS = 2
SECOND_UNITS = 20
V2_9 = 'accelerator 2.9'
# Short, so that a test need not wait long for a new probe: a read
# within PROBE_TTL of a probe answers its choice and probes again in the
# background (alternatives_probe_max_stale), a later read probes first.
PROBE_TTL = 0.2


def _device(address: str, trait: str, units: int) -> dict:
    return dict(real_nova._device(address, trait), accelerators=units)


COMPUTES = [nova_services.ComputeSpec(HOST, [
    _device('0000:91:00.0', FIRST, FIRST_UNITS),
    _device('0000:92:00.0', SECOND, SECOND_UNITS // 2),
    _device('0000:93:00.0', SECOND, SECOND_UNITS // 2)])]


@pytest.fixture(scope='module')
def rn(postgres, rabbitmq, placement_pg, keystone, work_dir):
    with nova_services.real_nova(
            'alt-nova', postgres, rabbitmq, placement_pg, keystone,
            work_dir, COMPUTES, cyborg_options={
                'api': {'alternatives_probe_ttl': 0,
                        'alternatives_probe_max_stale': PROBE_TTL}}) as d:
        d.cyborg('POST', '/device_profiles', version=V2_9, json=[{
            'name': 'first-else-second',
            'groups': [{'alternatives': [
                {'resources:FPGA': 1, 'trait:' + FIRST: 'required'},
                {'resources:FPGA': 1, 'trait:' + SECOND: 'required'}]}]}])
        flavor = d.compute('POST', '/flavors', json={'flavor': {
            'name': 'alt-nova', 'ram': 64, 'vcpus': 1, 'disk': 1}})['flavor']
        d.compute('POST', '/flavors/%s/os-extra_specs' % flavor['id'],
                  json={'extra_specs': {
                      'accel:device_profile': 'first-else-second'}})
        d.flavor = flavor['id']
        yield d
        d.check_alive()


def _boot(rn) -> str:
    return rn.compute('POST', '/servers', json={'server': {
        'name': 'alt-%s' % uuid.uuid4().hex[:6],
        'imageRef': nova_services.IMAGE_ID, 'flavorRef': rn.flavor,
        'networks': 'none'}})['server']['id']


def _boot_all(rn, count: int) -> dict[str, dict]:
    """Boot ``count`` servers at once, each ACTIVE: {server: its one
    ARQ as shown at 2.9}."""
    with concurrent.futures.ThreadPoolExecutor(min(count, 5)) as pool:
        booted = list(pool.map(lambda _n: _boot(rn), range(count)))
    result = {}
    for server in booted:
        real_nova._wait_status(rn, server, 'ACTIVE')
        [result[server]] = real_nova._assert_bound(rn, server, HOST).values()
    arqs = rn.cyborg('GET', '/accelerator_requests', version=V2_9)['arqs']
    shown = {arq['instance_uuid']: arq for arq in arqs}
    for server, arq in result.items():
        assert shown[server]['uuid'] == arq['uuid']
        result[server] = shown[server]
    # Reads after this one probe Placement afresh.
    time.sleep(PROBE_TTL)
    return result


def _traits(rn, arq: dict) -> list[str]:
    return rn.placement_get('/resource_providers/%s/traits'
                            % arq['device_rp_uuid'])['traits']


def test_alternatives_fall_back_return_and_fail_as_today(rn):
    started = time.monotonic()
    first = _boot_all(rn, FIRST_UNITS)
    assert [arq['alternative'] for arq in first.values()] == [0, 0]
    assert all(FIRST in _traits(rn, arq) for arq in first.values())

    second = _boot_all(rn, SECOND_UNITS)
    assert [arq['alternative'] for arq in second.values()] == [1] * len(
        second)
    assert all(SECOND in _traits(rn, arq) for arq in second.values())

    # A FIRST unit freed: the next boot takes it again.
    freed = next(iter(first))
    rn.compute_response('DELETE', '/servers/%s' % freed)
    real_nova._wait_gone(rn, freed)
    time.sleep(PROBE_TTL)
    [again] = _boot_all(rn, 1).values()
    assert again['alternative'] == 0
    assert FIRST in _traits(rn, again)

    # Nothing left of either: Nova's NoValidHost, as for a plain profile.
    extra = _boot(rn)
    failed = real_nova._wait_status(rn, extra, 'ERROR')
    assert 'No valid host' in failed['fault']['message'], failed['fault']
    assert real_nova._arqs(rn, extra) == []
    assert real_nova._allocations(rn, extra) == {}
    real_nova._report('alternatives: %d boots in %.1f s'
                      % (FIRST_UNITS + SECOND_UNITS + 2,
                         time.monotonic() - started))
