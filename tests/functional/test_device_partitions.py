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

"""An administrator steers a MIG GPU's partition profile through the
device API (microversion 2.10), end to end.

``cyborg-all-in-one --host-root`` reads a vGPU 17+ host tree whose H200
runs MIG mode under the fake ``nvidia-smi`` (its GPU instances kept in
a state file), with ``[nvidia_gpu] partition_mode = homogeneous``. The
device shows its partitions from 2.10; pinning 2g.35gb through
``PUT /v2/devices/{uuid}/partitions`` reaches the agent through the
conductor and the next report shows it (the deployable's resource class
with it); while an instance holds one of its partitions the call is
refused (409) and changes nothing; once released, unpinning gives the
GPU back to the policy.
"""

import os

import pytest
import requests

from cyborg.allinone import demo_host
from cyborg.allinone import fake_mig
from cyborg.allinone import fake_tools
from tests.fixtures.hosts import hosts
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional.fake_nova import FakeNova

HOST = 'mig-host'
TIMEOUT = 30
ADMIN = {'x-roles': 'admin', 'openstack-api-version': 'accelerator 2.10'}
TYPES = hosts.VGPU17_TYPES + [(1415, 'NVIDIA H200X-2-35C')]


def _mig_host(root: str):
    tree = hosts.nvidia_vgpu17_host(root)
    for vf in hosts.vgpu17_vfs():
        tree.add_vendor_vgpu(vf, TYPES)
    fake_mig.write_nvidia_smi_mig(
        tree.tools_dir, [fake_tools.Gpu(0, hosts.VGPU17_PF, 'GPU-h',
                                        'NVIDIA H200')],
        root + '.mig.state', {0: 'NVIDIA H200'})
    return tree


def _config(nova_url: str) -> dict:
    return {
        'DEFAULT': {'host': HOST},
        # Reports every second: binds and releases show soon.
        'agent': {'enabled_drivers': 'nvidia_gpu_driver',
                  'discovery_interval': 1},
        'nvidia_gpu': {'partition_mode': 'homogeneous',
                       'mig_profiles': '1g.18gb,2g.35gb'},
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5},
    }


class Flow:
    def __init__(self, process, url: str, nova) -> None:
        self.process = process
        self.api = url + '/v2'
        self.nova = nova

    def gpu(self) -> dict:
        response = requests.get(self.api + '/devices', headers=ADMIN,
                                timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        (device,) = [d for d in response.json()['devices']
                     if d['partitions'] is not None]
        return device

    def partitions(self) -> dict:
        return self.gpu()['partitions']

    def put(self, profile: str | None, pinned: bool) -> requests.Response:
        return requests.put(
            '%s/devices/%s/partitions' % (self.api, self.gpu()['uuid']),
            json={'profile': profile, 'pinned': pinned}, headers=ADMIN,
            timeout=TIMEOUT)

    def offered(self) -> tuple[str, int, str]:
        """(name, total, rp uuid) of the GPU's partitions' deployable."""
        deployables = requests.get(self.api + '/deployables',
                                   timeout=TIMEOUT).json()['deployables']
        (child,) = [d for d in deployables
                    if d['num_accelerators']]
        return child['name'], child['num_accelerators'], child['rp_uuid']

    def wait(self, predicate, what: str) -> None:
        servers.wait_for(predicate, TIMEOUT, what, self.process.process,
                         self.process.log)


@pytest.fixture(scope='module')
def flow(work_dir):
    directory = os.path.join(work_dir, 'device-partitions')
    tree = _mig_host(os.path.join(directory, 'host'))
    port = servers.free_port()
    with FakeNova() as nova, demo_host.DemoKernel(tree), \
            conftest.all_in_one_on_host(_config(nova.url), directory, tree,
                                        port) as process:
        flow = Flow(process, 'http://%s:%d' % (servers.LOOPBACK, port),
                    nova)
        flow.wait(lambda: flow.partitions()['creatable'] == 7,
                  'the MIG GPU reported')
        yield flow


def test_pin_a_profile_then_refused_while_a_partition_is_held(flow):
    assert flow.partitions() == {
        'mode': 'homogeneous', 'profile': '1g.18gb', 'pinned': False,
        'in_use': 0, 'creatable': 7}
    # Pinned: the agent reports the new profile before it answers.
    response = flow.put('2g.35gb', True)
    assert response.status_code == 202, response.text
    flow.wait(lambda: flow.partitions()['profile'] == '2g.35gb',
              'the pinned profile reported')
    assert flow.partitions() == {
        'mode': 'homogeneous', 'profile': '2g.35gb', 'pinned': True,
        'in_use': 0, 'creatable': 3}
    name, total, rp_uuid = flow.offered()
    assert (name, total) == ('0000_41_00_0_2g.35gb', 3)

    # An instance takes a partition of the pinned profile.
    arq_uuid, instance = nova_flow.start_bind(
        flow.api, {'resources:CUSTOM_MIG_2G_35GB': '1'}, HOST, rp_uuid,
        TIMEOUT)
    flow.nova.wait_tags([arq_uuid], TIMEOUT)
    flow.wait(lambda: flow.partitions()['in_use'] == 1,
              'the partition in use reported')
    for profile, pinned in (('1g.18gb', True), (None, False)):
        response = flow.put(profile, pinned)
        assert response.status_code == 409, response.text
        assert 'holds partitions' in response.json()['error_message']
    assert flow.partitions() == {
        'mode': 'homogeneous', 'profile': '2g.35gb', 'pinned': True,
        'in_use': 1, 'creatable': 2}

    # Released: unpinned, the policy serves 1g.18gb again.
    response = requests.delete(flow.api + '/accelerator_requests',
                               params={'instance': instance},
                               headers=nova_flow.SERVICE, timeout=TIMEOUT)
    assert response.status_code == 204, response.text
    flow.wait(lambda: conftest.all_in_one_handles_in_use(
        flow.process.work_dir) == 0, 'the partition released')
    flow.wait(lambda: flow.put(None, False).status_code == 202,
              'the profile unpinned')
    flow.wait(lambda: flow.partitions()['profile'] == '1g.18gb',
              'the policy\'s profile reported')
    assert flow.partitions()['pinned'] is False
