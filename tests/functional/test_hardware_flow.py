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

"""The real drivers, end to end: host tree, agent, Placement, Nova's flow.

One host tree (an NVIDIA T4 on vfio-pci for passthrough, a T4 offering
the mdev type nvidia-223, a QAT 4xxx with 4 VFs, an E810 with 4 VFs on
physnet1) is read by ``cyborg-all-in-one --host-root`` with the NVIDIA,
QAT and NIC drivers enabled, and the process's PATH holding only the
tree's fake vendor commands. The nested kinds (the vGPU type under its
GPU, the VFs under their QAT or NIC PF) are child providers under their
device's provider in Placement. For each kind a device profile finds its
provider through Placement's allocation candidates, and Nova's flow
(create, bind with that provider, the event, the resolved ARQ, delete)
gives the device Nova attaches; a NIC VF is put in its physical
network's VLAN at bind (the tree's fake ``ip`` logs the call) and taken
out at unbind. A thread calls the tree's ``settle()``
every 0.1 s in place of the kernel, so the vGPU's mdev appears when the
driver writes to ``create`` and goes when it writes to ``remove``.
"""

import os
import re

import pytest
import requests

from cyborg.allinone import demo_host
from cyborg.allinone import fake_ip
from cyborg.allinone import fake_tools
from cyborg.clients import placement as placement_client
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional.fake_nova import FakeNova

HOST = 'hw-host'
SERVICE = {'X-Service-Roles': 'service'}
TIMEOUT = 30
VGPU_GROUP = 'vgpu_' + demo_host.DEMO_VGPU_TYPE


class Flow:
    """The running all-in-one, its tree, its Placement and its Nova."""

    def __init__(self, process, url, tree, nova):
        self.process = process
        self.url = url
        self.api = url + '/v2'
        self.tree = tree
        self.nova = nova
        with open(process.log) as f:
            match = re.search(r'Placement:\s+(http://\S+)', f.read())
        assert match, process.log_text()
        self.placement = placement_client.PlacementClient.for_endpoint(
            match.group(1))

    def rp_uuids(self) -> dict[str, str]:
        """Deployable name -> its resource provider."""
        deployables = requests.get(self.api + '/deployables',
                                   timeout=TIMEOUT).json()['deployables']
        return {d['name']: d['rp_uuid'] for d in deployables}

    def candidates(self, query: str) -> set[str]:
        """The providers of Placement's allocation candidates for
        ``query``."""
        response = self.placement.request(
            'GET', '/allocation_candidates?' + query)
        return {rp for request in response.json()['allocation_requests']
                for rp in request['allocations']}

    def bind(self, group: dict[str, str], rp: str) -> tuple[str, dict]:
        """Nova's flow for a one-group profile bound on ``rp``: the
        instance and its ARQ once resolved (its event accepted)."""
        arq_uuid, instance = nova_flow.start_bind(self.api, group, HOST, rp,
                                                  TIMEOUT)
        self.nova.wait_tags([arq_uuid], TIMEOUT)
        response = requests.get(self.api + '/accelerator_requests',
                                timeout=TIMEOUT,
                                params={'instance': instance,
                                        'bind_state': 'resolved'})
        assert response.status_code == 200, response.text
        (resolved,) = response.json()['arqs']
        assert resolved['state'] == 'Bound', resolved
        return instance, resolved

    def delete(self, instance: str) -> None:
        response = requests.delete(self.api + '/accelerator_requests',
                                   params={'instance': instance},
                                   headers=SERVICE, timeout=TIMEOUT)
        assert response.status_code == 204, response.text

    def handles_in_use(self) -> int:
        return conftest.all_in_one_handles_in_use(self.process.work_dir)


def _config(nova_url: str) -> dict:
    return {
        'DEFAULT': {'host': HOST},
        'agent': {'enabled_drivers': ','.join(demo_host.DRIVERS)},
        'nvidia_gpu': {'enabled_vgpu_types': demo_host.DEMO_VGPU_TYPE},
        VGPU_GROUP: {'device_addresses': demo_host.DEMO_VGPU_PARENT},
        'intel_nic_driver': {
            'physical_device_mappings': '%s:%s' % (
                demo_host.DEMO_PHYSNET, demo_host.DEMO_NIC_PF),
            'vf_vlans': '%s:%d' % (demo_host.DEMO_PHYSNET,
                                   demo_host.DEMO_VLAN)},
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5},
    }


@pytest.fixture(scope='module')
def flow(work_dir):
    directory = os.path.join(work_dir, 'hardware-flow')
    tree = demo_host.build(os.path.join(directory, 'host'))
    port = servers.free_port()
    with FakeNova() as nova, demo_host.DemoKernel(tree), \
            conftest.all_in_one_on_host(_config(nova.url), directory, tree,
                                        port) as process:
        yield Flow(process, 'http://%s:%d' % (servers.LOOPBACK, port),
                   tree, nova)


def _address(info: dict) -> str:
    return '%(domain)s:%(bus)s:%(device)s.%(function)s' % info


def _wait(predicate, what: str, process) -> None:
    servers.wait_for(predicate, TIMEOUT, what, process.process, process.log)


def test_devices_of_the_tree_are_reported(flow):
    devices = conftest.api_devices(flow.url)
    assert sorted((d['type'], d['hostname']) for d in devices) == [
        ('FPGA', HOST), ('GPU', HOST), ('GPU', HOST), ('NIC', HOST),
        ('QAT', HOST)]
    # The drivers' health reads ran the tree's fake commands.
    ran = {call[0] for call in fake_tools.calls(flow.tree.tools_dir)}
    assert {'nvidia-smi', 'adf_ctl', 'dmesg'} <= ran, ran


def _utilization(url: str) -> dict:
    """Each device's utilization at microversion 2.6, by type and
    address (from the first control path)."""
    response = requests.get(url + '/v2/devices', timeout=10, headers={
        'x-roles': 'admin', 'openstack-api-version': 'accelerator 2.6'})
    response.raise_for_status()
    return {d['type'] + ' ' + d['std_board_info']: d['utilization']
            for d in response.json()['devices']}


def test_utilization_is_shown_at_2_6(flow):
    """The vGPU parent (held by nvidia) as the tree's nvidia-smi measures
    it; the passthrough GPU (vfio-pci, the guest's) has none; QAT and
    NIC count their VFs (all pre-bound to vfio-pci in this tree); the
    FPGA driver measures nothing."""
    def shown():
        found = _utilization(flow.url)
        return found if all(
            v is not None for k, v in found.items()
            if 'passthrough' not in k and not k.startswith('FPGA')
        ) else None
    _wait(shown, 'utilization of every measured device', flow.process)
    found = shown()
    metrics = sorted(((key.split()[0], value and value['metrics'])
                      for key, value in found.items()),
                     key=lambda item: (item[0], item[1] is not None))
    assert metrics == [
        ('FPGA', None),
        ('GPU', None),
        ('GPU', {'gpu_percent': 0.0, 'memory_total_mib': 15360,
                 'memory_used_mib': 0}),
        ('NIC', {'vfs_host': 0, 'vfs_in_use': 4, 'vfs_total': 4}),
        ('QAT', {'vfs_host': 0, 'vfs_in_use': 4, 'vfs_total': 4})]


# (deployable, profile group, allocation candidates query); the nested
# kinds' deployables are children of their device's deployable.
KINDS = {
    'pgpu': ('0000_3b_00_0', {'resources:PGPU': '1'}, 'resources=PGPU:1'),
    'vgpu': ('0000_d8_00_0_' + demo_host.DEMO_VGPU_TYPE,
             {'resources:VGPU': '1',
              'trait:' + demo_host.DEMO_VGPU_TRAIT: 'required'},
             'resources=VGPU:1&required=' + demo_host.DEMO_VGPU_TRAIT),
    'qat': ('0000_6b_00_0_vfs', {'resources:CUSTOM_QAT': '1'},
            'resources=CUSTOM_QAT:1'),
    'nic': ('0000_af_00_0_vfs', {'resources:CUSTOM_NIC': '1',
                                 'trait:' + demo_host.DEMO_PHYSNET_TRAIT:
                                 'required'},
            'resources=CUSTOM_NIC:1&required='
            + demo_host.DEMO_PHYSNET_TRAIT),
}


# The nested kinds' parent: the device's deployable, a provider with no
# inventory under the compute node's.
PARENTS = {'vgpu': '0000_d8_00_0', 'qat': '0000_6b_00_0',
           'nic': '0000_af_00_0'}


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_allocation_candidates_find_each_kind(flow, kind):
    deployable, _group, query = KINDS[kind]
    rps = flow.rp_uuids()
    rp = rps[deployable]
    assert flow.candidates(query) == {rp}
    provider = flow.placement.get_provider(rp)
    root = provider['root_provider_uuid']
    if kind not in PARENTS:  # a whole GPU: flat, under the compute node
        assert provider['parent_provider_uuid'] == root
        return
    parent = rps[PARENTS[kind]]
    assert provider['parent_provider_uuid'] == parent
    assert flow.placement.get_provider(parent)['parent_provider_uuid'] == (
        root)
    assert flow.placement.get_inventories(parent)[1] == {}


# The PCI kinds: the device Nova passes through.
PCI_DEVICES = {
    'pgpu': [demo_host.DEMO_PGPU],
    'qat': demo_host.DEMO_QAT_VFS,
    'nic': demo_host.DEMO_NIC_VFS,
}


def _ip_calls(flow) -> list[list[str]]:
    return [call[1:] for call in fake_tools.calls(flow.tree.tools_dir)
            if call[0] == 'ip']


def _vlan(flow, vf: int) -> int:
    """VF ``vf``'s VLAN as the NIC has it."""
    return fake_ip.vf_settings(flow.tree.tools_dir,
                               demo_host.DEMO_NIC_IFNAME)[vf]['vlan']


@pytest.mark.parametrize('kind', sorted(PCI_DEVICES))
def test_nova_flow_attaches_the_pci_device(flow, kind):
    deployable, group, _query = KINDS[kind]
    before = _ip_calls(flow)
    instance, arq = flow.bind(group, flow.rp_uuids()[deployable])
    assert arq['attach_handle_type'] == 'PCI', arq
    info = arq['attach_handle_info']
    assert _address(info) in PCI_DEVICES[kind], arq
    if kind == 'nic':
        assert info['physical_network'] == demo_host.DEMO_PHYSNET
        # Its vf preparation ran before the bound event: the VF is in
        # the physical network's VLAN.
        index = demo_host.DEMO_NIC_VFS.index(_address(info))
        assert _ip_calls(flow) == before + [
            demo_host.vf_vlan_args(index, demo_host.DEMO_VLAN)]
        assert _vlan(flow, index) == demo_host.DEMO_VLAN
    else:
        assert _ip_calls(flow) == before  # passthrough: nothing to do
    assert flow.handles_in_use() == 1
    flow.delete(instance)
    _wait(lambda: flow.handles_in_use() == 0, 'the handle free',
          flow.process)
    if kind == 'nic':
        # Unbind took it out again.
        _wait(lambda: _ip_calls(flow)[-1:] == [
            demo_host.vf_vlan_args(index, 0)], 'the VF out of the VLAN',
              flow.process)
        assert len(_ip_calls(flow)) == len(before) + 2
        assert _vlan(flow, index) == 0


def test_nova_flow_creates_and_removes_the_mdev(flow):
    deployable, group, _query = KINDS['vgpu']
    tree = flow.tree
    available = tree.dev(demo_host.DEMO_VGPU_PARENT, 'mdev_supported_types',
                         demo_host.DEMO_VGPU_TYPE, 'available_instances')
    assert tree.read(available).strip() == str(demo_host.DEMO_VGPU_COUNT)
    instance, arq = flow.bind(group, flow.rp_uuids()[deployable])
    assert arq['attach_handle_type'] == 'MDEV', arq
    info = arq['attach_handle_info']
    assert _address(info) == demo_host.DEMO_VGPU_PARENT
    assert info['asked_type'] == demo_host.DEMO_VGPU_TYPE
    mdev = arq['attach_handle_uuid']
    # What Nova's libvirt driver looks for: the mdev, of the type, on
    # the GPU, as the kernel made it on the driver's write to create.
    link = tree.abs('sys/bus/mdev/devices/' + mdev)
    _wait(lambda: os.path.isdir(link), 'mdev %s' % mdev, flow.process)
    assert tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [mdev]
    assert os.path.basename(os.readlink(os.path.join(
        link, 'mdev_type'))) == demo_host.DEMO_VGPU_TYPE
    # The simulated kernel counts the instance just after it makes the
    # mdev's directory (another process reads both): wait for the count.
    _wait(lambda: tree.read(available).strip() == str(
        demo_host.DEMO_VGPU_COUNT - 1), 'one instance fewer available',
        flow.process)
    assert os.path.islink(tree.abs(tree.dev(
        demo_host.DEMO_VGPU_PARENT, 'mdev_supported_types',
        demo_host.DEMO_VGPU_TYPE, 'devices', mdev)))
    assert flow.handles_in_use() == 1

    flow.delete(instance)
    _wait(lambda: not os.path.lexists(link), 'mdev %s removed' % mdev,
          flow.process)
    _wait(lambda: flow.handles_in_use() == 0, 'the handle free',
          flow.process)
    # The simulated kernel removes the bus link before the mdev's own
    # directory (another process reads both): wait for the directory.
    _wait(lambda: tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [],
          'no mdev on the GPU', flow.process)
    _wait(lambda: tree.read(available).strip() == str(
        demo_host.DEMO_VGPU_COUNT), 'every instance available again',
        flow.process)
    assert tree.refused == []
    log = flow.process.log_text()
    assert 'nvidia_gpu_driver: created mdev %s of type %s on %s' % (
        mdev, demo_host.DEMO_VGPU_TYPE, demo_host.DEMO_VGPU_PARENT) in log
    assert 'nvidia_gpu_driver: removed mdev %s' % mdev in log
