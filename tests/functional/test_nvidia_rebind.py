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

"""GPUs the host's nvidia driver holds, through the agent and Nova's flow.

``cyborg-all-in-one --host-root`` reads a host tree with two Tesla T4s
bound to ``nvidia`` and no vGPU type, vfio-pci loaded, with the NVIDIA
driver alone enabled and its default ``[nvidia_gpu]
rebind_nvidia_gpus``. Both GPUs are offered (``PGPU``). Nova's flow on
one of them moves it to vfio-pci before the bound event; deleting the
ARQ gives it back to nvidia. With a host process holding its
``/dev/nvidia0`` (a ``proc/<pid>/fd`` link of the tree) the bind fails
with that process in the reason Nova reads, and the GPU stays on nvidia.
A thread calls the tree's ``settle()`` every 0.1 s in place of the
kernel, so the ``driver`` link moves on the agent's sysfs writes.
"""

import os

import pytest
import requests

from cyborg.allinone import demo_host
from cyborg.allinone import fake_tools
from tests.fixtures.hosts import hosts
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional.fake_nova import FakeNova

HOST = 'rebind-host'
SERVICE = {'X-Service-Roles': 'service'}
V2_5 = {'OpenStack-API-Version': 'accelerator 2.5'}
TIMEOUT = 30
DEPLOYABLE = '0000_3b_00_0'
GROUP = {'resources:PGPU': '1'}


class Flow:
    def __init__(self, process, url: str, tree, nova) -> None:
        self.process = process
        self.api = url + '/v2'
        self.url = url
        self.tree = tree
        self.nova = nova

    def rp_uuid(self) -> str:
        deployables = requests.get(self.api + '/deployables',
                                   timeout=TIMEOUT).json()['deployables']
        return {d['name']: d['rp_uuid'] for d in deployables}[DEPLOYABLE]

    def arq(self, arq_uuid: str) -> dict:
        response = requests.get(self.api + '/accelerator_requests/'
                                + arq_uuid, headers=V2_5, timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()

    def delete(self, instance: str) -> None:
        response = requests.delete(self.api + '/accelerator_requests',
                                   params={'instance': instance},
                                   headers=SERVICE, timeout=TIMEOUT)
        assert response.status_code == 204, response.text

    def driver(self) -> str | None:
        link = self.tree.abs(self.tree.dev(hosts.PGPU, 'driver'))
        return os.path.basename(os.readlink(link)) if os.path.islink(
            link) else None

    def handles_in_use(self) -> int:
        return conftest.all_in_one_handles_in_use(self.process.work_dir)

    def wait(self, predicate, what: str) -> None:
        servers.wait_for(predicate, TIMEOUT, what, self.process.process,
                         self.process.log)


def _config(nova_url: str) -> dict:
    return {
        'DEFAULT': {'host': HOST},
        'agent': {'enabled_drivers': 'nvidia_gpu_driver'},
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5},
    }


@pytest.fixture(scope='module')
def flow(work_dir):
    directory = os.path.join(work_dir, 'nvidia-rebind')
    tree = hosts.nvidia_gpu_host(os.path.join(directory, 'host'))
    fake_tools.write_dmesg(tree.tools_dir, [])
    port = servers.free_port()
    with FakeNova() as nova, demo_host.DemoKernel(tree), \
            conftest.all_in_one_on_host(_config(nova.url), directory, tree,
                                        port) as process:
        yield Flow(process, 'http://%s:%d' % (servers.LOOPBACK, port),
                   tree, nova)


def test_gpus_on_nvidia_are_offered(flow):
    devices = conftest.api_devices(flow.url)
    assert [(d['type'], d['hostname']) for d in devices] == [
        ('GPU', HOST), ('GPU', HOST)], devices
    deployables = requests.get(flow.api + '/deployables',
                               timeout=TIMEOUT).json()['deployables']
    assert sorted(d['name'] for d in deployables) == [
        '0000_3b_00_0', '0000_d8_00_0']
    assert {d['num_accelerators'] for d in deployables} == {1}


def test_bind_moves_the_gpu_to_vfio_pci_and_delete_gives_it_back(flow):
    assert flow.driver() == 'nvidia'
    arq_uuid, instance = nova_flow.start_bind(
        flow.api, GROUP, HOST, flow.rp_uuid(), TIMEOUT)
    flow.nova.wait_tags([arq_uuid], TIMEOUT)
    arq = flow.arq(arq_uuid)
    assert arq['state'] == 'Bound', arq
    assert arq['attach_handle_type'] == 'PCI'
    assert '%(domain)s:%(bus)s:%(device)s.%(function)s' % arq[
        'attach_handle_info'] == hosts.PGPU
    # On vfio-pci before Nova heard of the bind: what libvirt attaches.
    assert flow.driver() == 'vfio-pci'
    assert flow.tree.override(hosts.PGPU) == 'vfio-pci'
    assert os.path.exists(flow.tree.abs(
        'dev/vfio/%d' % flow.tree.iommu_group(hosts.PGPU)))
    assert flow.handles_in_use() == 1

    flow.delete(instance)
    flow.wait(lambda: flow.handles_in_use() == 0, 'the handle free')
    assert flow.driver() == 'nvidia'
    assert flow.tree.override(hosts.PGPU) is None
    assert flow.tree.refused == []
    log = flow.process.log_text()
    assert ('nvidia_gpu_driver: moved GPU %s from nvidia to vfio-pci'
            % hosts.PGPU) in log
    assert 'nvidia_gpu_driver: gave GPU %s back to nvidia' % hosts.PGPU in (
        log)


def test_a_gpu_in_use_on_the_host_fails_the_bind(flow):
    flow.tree.add_holder(4242, 'python3', '/dev/nvidia0')
    try:
        arq_uuid, instance = nova_flow.start_bind(
            flow.api, GROUP, HOST, flow.rp_uuid(), TIMEOUT)
        flow.wait(lambda: flow.arq(arq_uuid)['bind_error'],
                  'the bind failure recorded')
        arq = flow.arq(arq_uuid)
        assert ('GPU %s is in use on the host: /dev/nvidia0 is open in '
                'process 4242 (python3)' % hosts.PGPU) in arq['bind_error']
        assert 'Traceback' not in arq['bind_error']
        flow.nova.wait_tags([arq_uuid], TIMEOUT)
        assert {e['status'] for e in flow.nova.events
                if e['tag'] == arq_uuid} == {'failed'}
        assert flow.driver() == 'nvidia'
        # Nova gives up on this host: it deletes the ARQ.
        flow.delete(instance)
        flow.wait(lambda: flow.handles_in_use() == 0, 'the handle free')
        assert flow.driver() == 'nvidia'
    finally:
        flow.tree.remove_holder(4242)
    # Free again: the next instance gets it.
    arq_uuid, instance = nova_flow.start_bind(
        flow.api, GROUP, HOST, flow.rp_uuid(), TIMEOUT)
    flow.nova.wait_tags([arq_uuid], TIMEOUT)
    assert flow.arq(arq_uuid)['state'] == 'Bound'
    assert flow.driver() == 'vfio-pci'
    flow.delete(instance)
    flow.wait(lambda: flow.driver() == 'nvidia', 'the GPU given back')
