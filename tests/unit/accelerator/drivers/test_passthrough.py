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

"""The QAT, NIC, NVMe and PCI drivers as the agent loads them (entry
points, their option groups, a bad option stopping the start), what
they share, and their fixture hosts."""

import os

import pytest

from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.nic import intel as nic
from cyborg.accelerator.drivers.pci import driver as pci_driver
from cyborg.accelerator.drivers.qat import intel as qat
from cyborg.accelerator.drivers.ssd import inspur
from cyborg.agent import discovery
from cyborg.common import exception
from cyborg.conf import opts
from cyborg.domain import device_tree
from tests.fixtures.hosts import hosts
from tests.fixtures.hosts import passthrough_hosts as more
from tests.unit import test_host_fixtures as fixture_checks

DRIVERS = {
    'intel_qat_driver': qat.IntelQATDriver,
    'intel_nic_driver': nic.IntelNICDriver,
    'inspur_nvme_ssd_driver': inspur.InspurNVMeSSDDriver,
    'pci_driver': pci_driver.PCIDriver,
}


@pytest.fixture
def host(conf, tmp_path):
    tree = more.inspur_nvme_host(str(tmp_path))
    conf.set_override('host_root', tree.root, group='agent')
    return tree


def test_entry_points_load_with_the_agent(conf, host):
    conf.set_override('enabled_drivers', list(DRIVERS), group='agent')
    # No real adf_ctl may run.
    conf.set_override('use_adf_ctl', False, group='intel_qat_driver')
    drivers = discovery.load_drivers(conf)
    assert [d.name for d in drivers] == list(DRIVERS)
    for driver, cls in zip(drivers, DRIVERS.values(), strict=True):
        assert type(driver) is cls
    wire, failed = discovery.Discovery('h', 'h', drivers, None).collect()
    assert failed == []
    assert [(d['driver'], d['address']) for d in wire] == [
        ('inspur_nvme_ssd_driver', more.INSPUR_FREE),
        ('inspur_nvme_ssd_driver', more.INSPUR_VFIO)]


@pytest.mark.parametrize('name, group, option, value', [
    ('intel_qat_driver', 'intel_qat_driver', 'device_ids', ['xyz']),
    ('intel_nic_driver', 'intel_nic_driver', 'physical_device_mappings',
     ['eth0']),
    ('inspur_nvme_ssd_driver', 'inspur_nvme_ssd_driver', 'vendor_ids',
     ['x']),
    ('pci_driver', 'pci_driver', 'device_spec', ['{"bad": 1}']),
])
def test_bad_options_stop_the_agent(conf, host, name, group, option, value):
    conf.set_override('enabled_drivers', [name], group='agent')
    conf.set_override(option, value, group=group)
    with pytest.raises(exception.ConfigInvalid) as error:
        discovery.load_drivers(conf)
    assert 'accelerator driver %s cannot be loaded' % name in str(
        error.value)
    assert '[%s] %s: ' % (group, option) in str(error.value)


def test_option_groups_are_listed():
    groups = [group.name for group, _ in opts.list_opts()
              if hasattr(group, 'name')]
    for name in DRIVERS:
        assert name in groups


def test_config_error_is_config_invalid():
    error = pci_base.config_error('g', 'o', 'why')
    assert isinstance(error, exception.ConfigInvalid)
    assert str(error) == 'Invalid configuration: [g] o: why'


def test_once_logs_a_lasting_condition_once():
    once = pci_base.Once()
    once.next_round()
    assert once.first('a') and once.first('b')
    once.next_round()
    assert not once.first('a')  # lasts: already said
    once.next_round()  # 'a' went away
    once.next_round()
    assert once.first('a')  # came back: said again


BUILDERS = [more.qat_c6xx_host, more.connectx_host, more.inspur_nvme_host]
CHECKS = fixture_checks.REAL_HOST_CHECKS


@pytest.mark.parametrize('build', BUILDERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize('check', CHECKS, ids=lambda f: f.__name__[5:])
def test_fixture_hosts_look_real(tmp_path, build, check):
    check(build(str(tmp_path / 'host')))


def _files(root):
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if name == '.calls':
                continue
            if os.path.islink(path):
                found[path] = os.readlink(path)
            elif os.path.isfile(path):
                with open(path, 'rb') as f:
                    found[path] = f.read()
            else:
                found[path] = None
    return found


@pytest.mark.parametrize('name, build, options', [
    # Loaded by the agent, the driver would run the host's adf_ctl.
    ('intel_qat_driver', hosts.qat_4xxx_host, {'use_adf_ctl': False}),
    ('intel_qat_driver', more.qat_c6xx_host, {'use_adf_ctl': False}),
    ('intel_nic_driver', hosts.sriov_nic_host,
     {'physical_device_mappings': ['physnet1:ens785f0']}),
    ('intel_nic_driver', more.connectx_host, {}),
    ('inspur_nvme_ssd_driver', more.inspur_nvme_host, {}),
    ('inspur_nvme_ssd_driver', hosts.nvme_host, {'vendor_ids': ['19e5']}),
    ('pci_driver', hosts.nvidia_gpu_host,
     {'device_spec': ['{"vendor_id": "10de"}']}),
    ('pci_driver', hosts.sriov_nic_host,
     {'device_spec': ['{"address": "*:af:01.*"}']}),
], ids=lambda v: getattr(v, '__name__', None))
def test_discovery_is_stable_and_writes_nothing(conf, tmp_path, name, build,
                                                options):
    tree = build(str(tmp_path / 'host'))
    conf.set_override('host_root', tree.root, group='agent')
    for option, value in options.items():
        conf.set_override(option, value, group=name)
    conf.set_override('enabled_drivers', [name], group='agent')
    [driver] = discovery.load_drivers(conf)
    before = _files(tree.root)
    wire = device_tree.tree_to_wire(driver.discover())
    assert wire, 'the host has devices for %s' % name
    assert device_tree.tree_to_wire(driver.discover()) == wire
    assert _files(tree.root) == before
    for device in wire:
        for deployable in device['deployables']:
            assert (deployable['num_accelerators']
                    == len(deployable['attach_handles']))
            assert all(h['attach_type'] == 'PCI'
                       for h in deployable['attach_handles'])
