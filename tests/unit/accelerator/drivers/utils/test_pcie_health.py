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

"""The PCIe signals of sysfs, on a fixture host."""

import pytest

from cyborg.accelerator.drivers.utils import pcie_health
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone.host_tree import HostTree

ADDRESS = '0000:3b:00.0'
VF = '0000:3b:02.0'


@pytest.fixture
def tree(tmp_path):
    tree = HostTree(str(tmp_path))
    tree.add_pci(ADDRESS, 0x8086, 0x1572, 0x020000, driver='i40e')
    tree.add_sriov(ADDRESS, [VF], 0x154c, total_vfs=4, offset=16,
                   vf_drivers=['vfio-pci'])
    return tree


def _names(found):
    return [signal.name for signal in found]


def test_aer_counters_rising_after_the_baseline(tree):
    monitor = pcie_health.Monitor(sysfs.HostRoot(tree.root))
    assert monitor.signals(ADDRESS) == []  # no AER statistics at all
    tree.set_aer(ADDRESS, fatal=2, nonfatal=5)
    assert monitor.signals(ADDRESS) == []  # the baseline
    tree.set_aer(ADDRESS, fatal=3, nonfatal=5)
    (signal,) = monitor.signals(ADDRESS)
    assert signal.name == pcie_health.AER_FATAL
    assert signal.reason == 'TOTAL_ERR_FATAL rose from 2 to 3'
    assert monitor.signals(ADDRESS) == []  # given once
    tree.set_aer(ADDRESS, fatal=3, nonfatal=9)
    assert _names(monitor.signals(ADDRESS)) == [pcie_health.AER_NONFATAL]
    tree.set_aer(ADDRESS)  # counters cleared (a reset): no signal
    assert monitor.signals(ADDRESS) == []


def test_aer_total_reads_the_kernels_format(tree):
    host = sysfs.HostRoot(tree.root)
    tree.set_aer(ADDRESS, fatal=7)
    assert pcie_health.aer_total(host, ADDRESS, 'aer_dev_fatal',
                                 'TOTAL_ERR_FATAL') == 7
    tree.write(tree.dev(ADDRESS, 'aer_dev_fatal'), 'TOTAL_ERR_FATAL x')
    assert pcie_health.aer_total(host, ADDRESS, 'aer_dev_fatal',
                                 'TOTAL_ERR_FATAL') is None


def test_link_below_its_maximum(tree):
    host = sysfs.HostRoot(tree.root)
    assert pcie_health.link_signals(host, ADDRESS) == []
    tree.set_link(ADDRESS, width=8)
    (width,) = pcie_health.link_signals(host, ADDRESS)
    assert (width.name, width.reason) == (pcie_health.LINK_WIDTH,
                                          'PCIe link x8 of x16')
    tree.set_link(ADDRESS, width=16, speed='8.0 GT/s PCIe')
    (speed,) = pcie_health.link_signals(host, ADDRESS)
    assert (speed.name, speed.reason) == (pcie_health.LINK_SPEED,
                                          'PCIe link at 8 of 16 GT/s')


@pytest.mark.parametrize('text, value', [
    ('16.0 GT/s PCIe', 16.0), ('2.5 GT/s', 2.5), ('Unknown', None),
    ('', None), (None, None)])
def test_link_speed(text, value):
    assert pcie_health.link_speed(text) == value


def test_a_virtual_function_without_a_link_gives_no_signal(tree):
    monitor = pcie_health.Monitor(sysfs.HostRoot(tree.root))
    tree.write(tree.dev(VF, 'current_link_width'), '0')
    assert monitor.signals(VF) == []


def test_a_device_that_is_gone(tree):
    monitor = pcie_health.Monitor(sysfs.HostRoot(tree.root))
    tree.set_aer(ADDRESS, fatal=1)
    monitor.signals(ADDRESS)
    tree.remove_pci(VF)
    tree.remove_pci(ADDRESS)
    (signal,) = monitor.signals(ADDRESS)
    assert signal.name == pcie_health.GONE
    assert monitor.signals('not an address') == []
