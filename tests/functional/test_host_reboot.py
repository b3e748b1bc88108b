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

"""A compute host reboots: the agent restores what its ARQs hold.

``cyborg-all-in-one --host-root`` at the demo host tree (a T4 offering
the mdev type nvidia-223, an E810 whose VFs are put in VLAN 100 at bind,
an OFS N6000 FPGA), with the NVIDIA, NIC and FPGA drivers, a
:class:`FakeGlance` serving a GBS image for the FPGA's region and a
:class:`FakeNova`. Four ARQs are bound: a vGPU (its mdev created), two
NIC VFs (each put in the VLAN by the tree's fake ``ip``), and the FPGA
region programmed with the image at bind.

Then the host "reboots": the all-in-one stops, the tree loses its
runtime state as the kernel would (every mdev gone, the FPGA's port back
to its factory function), a persistent mdev definition brings back an
mdev of a handle no ARQ holds, the NIC's VFs are back in no VLAN, and
the fake ``ip`` now refuses the second VF. Started again, the agent,
before its first report: creates the vGPU's mdev again, puts the first
VF in the VLAN again (read back from the fake ``ip``), programs the
region again with its image, removes the orphan mdev; the second VF's
ARQ stays Bound with the reason as its ``bind_error`` and its device is
tainted ``cyborg.restore.failed``.
"""

import os
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg.allinone import demo_host
from cyborg.allinone import fake_ip
from cyborg.allinone import fake_tools
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional.fake_glance import FakeGlance
from tests.functional.fake_nova import FakeNova

HOST = 'reboot-host'
SERVICE = {'X-Service-Roles': 'service'}
TIMEOUT = 30
RUNNING = conftest.ALL_IN_ONE_RUNNING
GZIP_AFU = demo_host.DEMO_BITSTREAMS['gzip'][0]
VGPU = ('0000_d8_00_0_' + demo_host.DEMO_VGPU_TYPE,
        {'resources:VGPU': '1',
         'trait:' + demo_host.DEMO_VGPU_TRAIT: 'required'})
NIC = ('0000_af_00_0_vfs',
       {'resources:CUSTOM_NIC': '1',
        'trait:' + demo_host.DEMO_PHYSNET_TRAIT: 'required'})
FPGA_AFU_ID = ('fpga_region', 'region0', 'dfl-port.0', 'afu_id')


def _config(nova_url: str, glance_url: str) -> dict:
    return {
        'DEFAULT': {'host': HOST},
        'agent': {'enabled_drivers': 'nvidia_gpu_driver,intel_nic_driver,'
                  'intel_fpga_driver,intel_qat_driver',
                  'discovery_interval': '2'},
        'nvidia_gpu': {'enabled_vgpu_types': demo_host.DEMO_VGPU_TYPE},
        'vgpu_' + demo_host.DEMO_VGPU_TYPE: {
            'device_addresses': demo_host.DEMO_VGPU_PARENT},
        'intel_nic_driver': {
            'physical_device_mappings': '%s:%s' % (
                demo_host.DEMO_PHYSNET, demo_host.DEMO_NIC_PF),
            'vf_vlans': '%s:%d' % (demo_host.DEMO_PHYSNET,
                                   demo_host.DEMO_VLAN)},
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5},
        'glance': {'auth_type': 'admin_token', 'endpoint': glance_url,
                   'token': 'admin', 'endpoint_override': glance_url},
    }


class Host:
    """The all-in-one on the demo tree, with its Nova and Glance."""

    def __init__(self, process, url, tree, nova, glance, directory):
        self.process = process
        self.api = url + '/v2'
        self.tree = tree
        self.nova = nova
        self.glance = glance
        self.directory = directory

    def rp(self, deployable: str) -> str:
        deployables = requests.get(self.api + '/deployables',
                                   timeout=TIMEOUT).json()['deployables']
        return {d['name']: d['rp_uuid'] for d in deployables}[deployable]

    def fpga_rp(self) -> str:
        deployables = requests.get(self.api + '/deployables',
                                   timeout=TIMEOUT).json()['deployables']
        (rp,) = [d['rp_uuid'] for d in deployables
                 if d['name'].startswith(
                     demo_host.DEMO_FPGA_PF.replace(':', '_')
                     .replace('.', '_'))]
        return rp

    def bind(self, group: dict[str, str], rp: str) -> dict:
        """Nova's flow for a one-group profile on ``rp``: the ARQ once
        Nova got its event."""
        arq_uuid, _instance = nova_flow.start_bind(self.api, group, HOST,
                                                   rp, TIMEOUT)
        self.nova.wait_tags([arq_uuid], TIMEOUT)
        return self.arq(arq_uuid)

    def arq(self, arq_uuid: str) -> dict:
        response = requests.get(
            self.api + '/accelerator_requests/' + arq_uuid, timeout=TIMEOUT,
            headers={'openstack-api-version': 'accelerator 2.8'})
        assert response.status_code == 200, response.text
        return response.json()

    def db(self, sql: str) -> list:
        engine = sa.create_engine('sqlite:///' + os.path.join(
            self.directory, 'state', 'cyborg.sqlite'),
            poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                return connection.execute(sa.text(sql)).all()
        finally:
            engine.dispose()

    def afu_id(self) -> str:
        return self.tree.read(self.tree.dev(demo_host.DEMO_FPGA_PF,
                                            *FPGA_AFU_ID)).strip()

    def restart(self) -> None:
        """Start the all-in-one again on its state; until it runs."""
        started = self.process.log_text().count(RUNNING)
        self.process.start()
        servers.wait_for(
            lambda: self.process.log_text().count(RUNNING) > started,
            conftest.START_TIMEOUT, 'the all-in-one to start again',
            self.process.process, self.process.log)


def _properties() -> dict[str, str]:
    return {'bs-name': 'gzip.gbs', 'bs-uuid': uuid.uuid4().hex,
            'vendor': 'Intel', 'board': 'N6000', 'version': '1.0',
            'driver_ver': '1.0', 'driver_path': '/opt/opae',
            'function_uuid': GZIP_AFU, 'function_name': 'gzip',
            'region_uuid': demo_host.DEMO_FPGA_INTERFACE}


@pytest.fixture(scope='module')
def host(work_dir):
    directory = os.path.join(work_dir, 'host-reboot')
    tree = demo_host.build(os.path.join(directory, 'host'))
    port = servers.free_port()
    with FakeNova() as nova, FakeGlance() as glance, \
            demo_host.DemoKernel(tree), \
            conftest.all_in_one_on_host(_config(nova.url, glance.url),
                                        directory, tree, port) as process:
        yield Host(process, 'http://%s:%d' % (servers.LOOPBACK, port),
                   tree, nova, glance, directory)


def _vf_index(arq: dict) -> int:
    info = arq['attach_handle_info']
    return demo_host.DEMO_NIC_VFS.index(
        '%(domain)s:%(bus)s:%(device)s.%(function)s' % info)


def _reboot(host: Host, refused_vf: int) -> str:
    """What a reboot does to the tree; the uuid of the orphan mdev a
    persistent definition brought back."""
    tree = host.tree
    # Every mdev gone; the board came back with its factory function.
    tree.reboot()
    assert tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == []
    assert host.afu_id() == demo_host.DEMO_FPGA_AFU
    # mdevctl defined an mdev for a handle that no ARQ holds any more.
    (orphan,) = host.db(
        "SELECT uuid FROM attach_handles WHERE attach_type = 'MDEV' AND "
        'in_use = 0 ORDER BY id LIMIT 1')[0]
    assert tree.create_mdev(demo_host.DEMO_VGPU_PARENT,
                            demo_host.DEMO_VGPU_TYPE, orphan)
    # Every VF back in no VLAN; the NIC now refuses to configure one.
    assert set(_vlans(host).values()) == {0}
    fake_ip.refuse_vf(tree.tools_dir, demo_host.DEMO_NIC_IFNAME, refused_vf)
    return orphan


def _vlans(host: Host) -> dict[int, int]:
    """Each VF's VLAN as the NIC has it."""
    return {vf: setting['vlan'] for vf, setting in fake_ip.vf_settings(
        host.tree.tools_dir, demo_host.DEMO_NIC_IFNAME).items()}


def test_a_rebooted_host_gets_back_what_its_arqs_hold(host):
    vgpu = host.bind(VGPU[1], host.rp(VGPU[0]))
    nic_ok = host.bind(NIC[1], host.rp(NIC[0]))
    nic_lost = host.bind(NIC[1], host.rp(NIC[0]))
    image = host.glance.add_image(
        fake_tools.gbs_image(demo_host.DEMO_FPGA_INTERFACE, GZIP_AFU),
        _properties())
    fpga = host.bind({'resources:FPGA': '1', 'accel:bitstream_id': image},
                     host.fpga_rp())
    arqs = (vgpu, nic_ok, nic_lost, fpga)
    assert [a['state'] for a in arqs] == ['Bound'] * 4, arqs
    mdev = vgpu['attach_handle_uuid']
    assert host.tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [mdev]
    assert host.afu_id() == GZIP_AFU
    in_vlan = {_vf_index(nic_ok), _vf_index(nic_lost)}
    assert _vlans(host) == {vf: demo_host.DEMO_VLAN if vf in in_vlan else 0
                            for vf in range(len(demo_host.DEMO_NIC_VFS))}

    host.process.stop()
    orphan = _reboot(host, _vf_index(nic_lost))
    assert host.tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [orphan]
    mark = len(fake_tools.calls(host.tree.tools_dir))
    log_mark = len(host.process.log_text())
    host.restart()

    log = host.process.log_text()[log_mark:]
    # Restored before the first report: before the ready line (printed
    # once the first report is applied) ...
    ready = log.index(RUNNING)
    for arq in (vgpu, nic_ok, fpga):
        line = 'Restored attach handle %s of ARQ %s' % (
            arq['attach_handle_uuid'], arq['uuid'])
        assert 0 <= log.find(line) < ready, log
    assert 0 <= log.find('Released attach handle %s, prepared but held '
                         'by no ARQ' % orphan) < ready, log
    # ... and before the first discovery (QAT has nothing to restore: its
    # tool runs in discoveries only).
    calls = fake_tools.calls(host.tree.tools_dir)[mark:]
    first_discovery = [c[0] for c in calls].index('adf_ctl')
    restore_calls = calls[:first_discovery]
    assert ['ip'] + demo_host.vf_vlan_args(
        _vf_index(nic_ok), demo_host.DEMO_VLAN) in restore_calls
    assert 'fpgaconf' in [c[0] for c in restore_calls]

    # The host holds again what the bound ARQs hold, and nothing else.
    assert _vlans(host) == {vf: demo_host.DEMO_VLAN if vf == _vf_index(
        nic_ok) else 0 for vf in range(len(demo_host.DEMO_NIC_VFS))}
    assert host.tree.mdevs_of(demo_host.DEMO_VGPU_PARENT) == [mdev]
    assert host.afu_id() == GZIP_AFU
    assert host.tree.refused == []

    # The VF that could not be configured: still Bound (its guest holds
    # it), with the reason, and its device tainted.
    lost = host.arq(nic_lost['uuid'])
    assert lost['state'] == 'Bound'
    assert lost['bind_error'].startswith(
        'Restoring attach handle %s after its host restarted failed: '
        % nic_lost['attach_handle_uuid']), lost
    assert 'cannot configure virtual function' in lost['bind_error']
    for arq in (vgpu, nic_ok, fpga):
        assert host.arq(arq['uuid'])['bind_error'] is None
    nic = [d for d in requests.get(
        host.api + '/devices', timeout=TIMEOUT,
        headers={'x-roles': 'admin',
                 'openstack-api-version': 'accelerator 2.8'}).json()[
                     'devices'] if d['type'] == 'NIC']
    (device,) = nic
    assert [t['key'] for t in device['taints']] == ['cyborg.restore.failed']
    assert lost['device_health']['status'] != 'Healthy', lost
