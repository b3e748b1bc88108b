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

"""The PCI driver base: the constructors' prelude, the option checks,
Once, and the driver errors."""

import types

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers import pci_opts
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.common import exception
from tests.fixtures.hosts import fpga_hosts

GROUP = 'sample_pci_driver'


def _sample_opts() -> types.SimpleNamespace:
    """Stands for a driver's options module; new per test, since an
    OptGroup keeps the overrides set through it."""
    group = cfg.OptGroup(GROUP)
    opts = pci_opts.pci_selection_opts('CUSTOM_SAMPLE', 'the samples',
                                       device_ids_help='Ids.')

    def register_opts(conf):
        conf.register_group(group)
        conf.register_opts(opts, group=group)
    return types.SimpleNamespace(group=group, register_opts=register_opts)


class SampleDriver(pci_base.PCIDriver):

    name = 'sample_pci_driver'

    def discover(self):
        return []


@pytest.fixture
def make(fresh_conf, tmp_path, monkeypatch):
    monkeypatch.setattr(SampleDriver, 'options_module', _sample_opts())
    tree = fpga_hosts.inspur_fpga_host(str(tmp_path))
    fresh_conf.set_override('host_root', tree.root, group='agent')

    def _make(runner=None, **options):
        driver = SampleDriver(fresh_conf, runner)
        for name, value in options.items():
            fresh_conf.set_override(name, value, group=GROUP)
        return driver
    return _make


def test_the_prelude_registers_and_reads_the_group(make, fresh_conf):
    driver = make()
    assert driver.group == GROUP
    assert driver._options.resource_class == 'CUSTOM_SAMPLE'
    assert driver._host.root == fresh_conf.agent.host_root
    assert isinstance(driver._runner, runner_mod.CommandRunner)
    assert isinstance(driver._once, pci_base.Once)


def test_a_runner_given_is_kept(make):
    fake = runner_mod.CommandRunner(search_path=['/nonexistent'])
    assert make(runner=fake)._runner is fake


def test_a_bad_resource_class_is_a_driver_config_error(make):
    driver = make(resource_class='not one')
    with pytest.raises(driver_errors.DriverConfigError) as error:
        driver._resource_class()
    assert isinstance(error.value, exception.ConfigInvalid)
    assert str(error.value) == (
        "Invalid configuration: [sample_pci_driver] resource_class: "
        "'not one' is not a resource class (a standard one or "
        "CUSTOM_[A-Z0-9_]+)")


def test_ids_outside_the_known_ones_are_refused(make):
    driver = make(device_ids=['0x0911', 'abcd'])
    with pytest.raises(driver_errors.DriverConfigError,
                       match=r'\[sample_pci_driver\] device_ids: abcd: not '
                             r'a sample id \(known: 0911, 2001\)'):
        driver._hex_ids(known={0x0911, 0x2001}, what='a sample id')


def test_no_ids_means_every_known_one(make):
    assert make()._hex_ids(known={0x0911}) == {0x0911}
    assert make()._hex_ids() == frozenset()
    assert make(device_ids=['0911'])._hex_ids() == {0x0911}


def test_an_id_that_is_not_hex_is_refused(make):
    with pytest.raises(driver_errors.DriverConfigError,
                       match="'09x1' is not a PCI id"):
        make(device_ids=['09x1'])._hex_ids()


def test_addresses_are_parsed_in_any_spelling(make):
    driver = make(addresses=['86:00.0', '0000:87:00.0'])
    assert driver._option_addresses() == {
        pci.parse_address(fpga_hosts.INSPUR_FPGA),
        pci.parse_address(fpga_hosts.INSPUR_NVME)}
    with pytest.raises(driver_errors.DriverConfigError,
                       match="addresses: 'x' is not a PCI address"):
        make(addresses=['x'])._option_addresses()


def test_configured_addresses_are_checked_against_the_host(make):
    driver = make()
    card = pci.parse_address(fpga_hosts.INSPUR_FPGA)
    absent = pci.parse_address('0000:99:00.0')  # may be hot-plugged later
    assert driver._check_addresses(
        [absent, card], lambda d: d.device_id == 0x0911,
        'a sample') == [card]
    nvme = pci.parse_address(fpga_hosts.INSPUR_NVME)
    with pytest.raises(driver_errors.DriverConfigError) as error:
        driver._check_addresses([card, nvme],
                                lambda d: d.device_id == 0x0911, 'a sample')
    assert str(error.value).endswith(
        '[sample_pci_driver] addresses: 0000:87:00.0 is 1bd4:2001, not a '
        'sample')


def test_once_says_a_key_once_per_round_it_lasts():
    once = pci_base.Once()
    once.next_round()
    assert once.first('a')
    assert not once.first('a')  # twice in one round: said once
    once.next_round()
    assert not once.first('a')
    once.next_round()  # gone for a round
    once.next_round()
    assert once.first('a')


def test_the_driver_errors():
    config = driver_errors.DriverConfigError(reason='[g] o: why')
    assert isinstance(config, driver_errors.DriverError)
    assert isinstance(config, exception.ConfigInvalid)
    assert str(config) == 'Invalid configuration: [g] o: why'
    # The reason alone: it becomes the ARQ's bind_error as the driver
    # wrote it.
    assert str(driver_errors.PrepareFailed(reason='no mdev')) == 'no mdev'
    assert str(driver_errors.ProgramFailed(device='0000:86:00.0',
                                           reason='refused')) == (
        'Programming 0000:86:00.0 failed: refused')
    for cls in (driver_errors.PrepareFailed, driver_errors.ProgramFailed):
        assert issubclass(cls, driver_errors.DriverError)
        assert not issubclass(cls, exception.ConfigInvalid)


def test_one_deployable_name_for_every_driver():
    address = pci.parse_address('0000:3b:00.0')
    assert passthrough.deployable_name(address) == '0000_3b_00_0'
    assert passthrough.deployable_name('0000:3b:00.0') == '0000_3b_00_0'
    assert passthrough.deployable_name(address, 'vf') == '0000_3b_00_0_vf'
    assert passthrough.deployable_name(address, 'GRID T4 4Q') == (
        '0000_3b_00_0_GRID_T4_4Q')
