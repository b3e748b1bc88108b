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

"""amd_gpu_driver on a fixture host: passthrough, MxGPU VFs, health."""

from __future__ import annotations

import logging

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers.amd_gpu import driver as amd
from cyborg.accelerator.drivers.amd_gpu import opts as amd_conf
from cyborg.agent import discovery
from cyborg.conf import agent as agent_conf
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts

NONE = device_tree.Preparation.NONE


@pytest.fixture
def make(tmp_path):
    """``make(options)`` -> (tree, conf) of the AMD host."""
    def _make(ini: str = ''):
        root = str(tmp_path / 'host')
        tree = hosts.amd_gpu_host(root)
        conf = cfg.ConfigOpts()
        agent_conf.register_opts(conf)
        amd_conf.register_opts(conf)
        path = tmp_path / 'cyborg.conf'
        path.write_text('[agent]\nhost_root = %s\nenabled_drivers = '
                        'amd_gpu_driver\n%s' % (root, ini))
        conf(['--config-file', str(path)], project='cyborg',
             default_config_files=[])
        return tree, conf
    return _make


def summary(devices):
    """Per device, its deployables parents first: (name, parent,
    count, resource class, traits, preparation, handles)."""
    return [(d['address'], d['model'], d['std_board_info']['mode'],
             [(dep['name'], parent, dep['num_accelerators'],
               dep['resource_class'], dep['traits'], dep['preparation'],
               ['%(bus)s:%(device)s.%(function)s' % h['attach_info']
                for h in dep['attach_handles']])
              for dep, parent, _depth in device_tree.walk_wire(
                  d['deployables'])])
            for d in device_tree.tree_to_wire(devices)]


def _vgpu_count(device):
    """What the device offers: its VFs' child, or the whole GPU."""
    (top,) = device.deployables
    return sum(c.num_accelerators for c in top.children) or (
        top.num_accelerators)


def test_discovery(make, caplog):
    tree, conf = make()
    driver = amd.AmdGpuDriver(conf)
    with caplog.at_level(logging.WARNING):
        devices = driver.discover()
        driver.discover()
    assert summary(devices) == [
        # MxGPU: the GPU (no inventory) and its VFs' child.
        (hosts.S7150, 'FirePro S7150', 'mxgpu', [
            ('0000_83_00_0', None, 0, 'PGPU', [
                'CUSTOM_AMD_6929', 'CUSTOM_GPU_AMD', 'OWNER_CYBORG'],
             'none', []),
            ('0000_83_00_0_vf', '0000_83_00_0', 3, 'VGPU', [
                'CUSTOM_AMD_6929', 'CUSTOM_AMD_6929_MXGPU',
                'CUSTOM_GPU_AMD', 'OWNER_CYBORG'], 'none',
             ['83:02.0', '83:02.1', '83:02.2'])]),
        # Passthrough: flat.
        (hosts.MI210, 'Instinct MI210', 'passthrough', [
            ('0000_c1_00_0', None, 1, 'PGPU', [
                'CUSTOM_AMD_740F', 'CUSTOM_GPU_AMD', 'OWNER_CYBORG'],
             'none', ['c1:00.0'])])]
    # The V520 the host's amdgpu holds is skipped, said once.
    assert caplog.text.count('0000:05:00.0 is bound to amdgpu') == 1
    wire = device_tree.tree_to_wire(devices)
    assert wire[1]['std_board_info'] == {
        'vendor_id': '0x1002', 'device_id': '0x740f', 'class': '0x038000',
        'numa_node': 1, 'mode': 'passthrough'}
    assert {h['attach_type'] for d in wire
            for dep, _, _ in device_tree.walk_wire(d['deployables'])
            for h in dep['attach_handles']} == {'PCI'}


def test_discovery_is_deterministic(make):
    tree, conf = make()
    first = device_tree.tree_to_wire(amd.AmdGpuDriver(conf).discover())
    driver = amd.AmdGpuDriver(conf)
    assert device_tree.tree_to_wire(driver.discover()) == first
    assert device_tree.tree_to_wire(driver.discover()) == first


def test_options_choose_the_drivers(make):
    tree, conf = make('[amd_gpu]\npassthrough_drivers = vfio-pci,amdgpu\n'
                      'vf_drivers = vfio-pci,amdgpu\n')
    devices = amd.AmdGpuDriver(conf).discover()
    assert [(d.address, _vgpu_count(d)) for d in devices] == [
        (hosts.V520, 1), (hosts.S7150, 4), (hosts.MI210, 1)]


def test_unknown_boards_are_named_by_device_id(make):
    tree, conf = make()
    tree.add_pci('0000:c2:00.0', hosts.AMD, 0x74ff, hosts.CLASS_DISPLAY)
    devices = amd.AmdGpuDriver(conf).discover()
    assert [d.model for d in devices if d.address == '0000:c2:00.0'] == [
        '0x74ff']


def test_no_usable_vf_no_deployable(make):
    tree, conf = make()
    for vf in hosts.S7150_VFS[:3]:
        tree.bind(vf, 'amdgpu')
    (s7150,) = [d for d in amd.AmdGpuDriver(conf).discover()
                if d.address == hosts.S7150]
    # The GPU stays, with no child: Placement takes no inventory of 0.
    (gpu,) = s7150.deployables
    assert (gpu.num_accelerators, gpu.children) == (0, [])


def test_a_gpu_whose_iommu_group_the_host_holds_is_skipped(make, caplog):
    tree, conf = make()
    tree.add_pci('0000:c1:00.1', hosts.AMD, 0xab28, 0x040300,
                 driver='snd_hda_intel',
                 iommu_group=tree.iommu_group(hosts.MI210))
    with caplog.at_level(logging.WARNING):
        devices = amd.AmdGpuDriver(conf).discover()
    assert hosts.MI210 not in [d.address for d in devices]
    assert 'shares its iommu_group with 0000:c1:00.1' in caplog.text


def test_health(make):
    tree, conf = make()
    driver = amd.AmdGpuDriver(conf)
    devices = driver.discover()
    assert set(driver.health(devices).values()) == {'healthy'}
    tree.unbind(hosts.S7150)           # GIM gone, its VFs with it
    tree.bind(hosts.MI210, 'amdgpu')   # taken by the host
    assert driver.health(devices) == {hosts.S7150: 'unhealthy',
                                      hosts.MI210: 'unhealthy'}
    tree.remove_pci(hosts.MI210)
    assert driver.health(devices)[hosts.MI210] == 'unhealthy'


def test_nothing_to_prepare(make):
    tree, conf = make()
    driver = amd.AmdGpuDriver(conf)
    handle = driver.discover()[0].deployables[0].children[0].attach_handles[
        0]
    before = tree.read(tree.dev(hosts.S7150_VFS[0], 'driver_override'))
    driver.prepare_attach_handle(handle, 'u1', NONE)
    driver.release_attach_handle(handle, 'u1', NONE)
    assert tree.read(tree.dev(hosts.S7150_VFS[0], 'driver_override')) == (
        before)


def test_the_agent_loads_the_driver(make):
    tree, conf = make()
    (driver,) = discovery.load_drivers(conf)
    assert isinstance(driver, amd.AmdGpuDriver)
    wire, failed = discovery.Discovery('h1', 'h1', [driver], None).collect()
    assert failed == [] and len(wire) == 2


# Utilization --------------------------------------------------------------

def test_utilization_of_mxgpu_vfs_and_amdgpu_sysfs(make):
    """The S7150's VFs by driver; the V520, held by amdgpu (allowed
    here), shows what amdgpu's sysfs files say (VRAM in bytes)."""
    tree, conf = make('[amd_gpu]\npassthrough_drivers = vfio-pci,amdgpu\n')
    tree.write(tree.dev(hosts.V520, 'gpu_busy_percent'), '12')
    tree.write(tree.dev(hosts.V520, 'mem_info_vram_used'), str(512 << 20))
    tree.write(tree.dev(hosts.V520, 'mem_info_vram_total'), str(8 << 30))
    driver = amd.AmdGpuDriver(conf)
    assert driver.utilization(driver.discover()) == {
        hosts.S7150: {'vfs_total': 4, 'vfs_in_use': 2, 'vfs_host': 1},
        hosts.V520: {'gpu_percent': 12.0, 'memory_used_mib': 512,
                     'memory_total_mib': 8192}}


def test_unreadable_amdgpu_files_give_no_metric(make):
    tree, conf = make('[amd_gpu]\npassthrough_drivers = vfio-pci,amdgpu\n')
    tree.write(tree.dev(hosts.V520, 'gpu_busy_percent'), 'busy')
    tree.write(tree.dev(hosts.V520, 'mem_info_vram_total'), str(8 << 30))
    driver = amd.AmdGpuDriver(conf)
    found = driver.utilization(driver.discover())
    assert found[hosts.V520] == {'memory_total_mib': 8192}
    # The MI210 on vfio-pci belongs to its guest: nothing to read.
    assert hosts.MI210 not in found
