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

"""Driver binding through sysfs (pci_binding), the fixture tree's
emulation of the kernel's answers, and the holders of device files
(proc)."""

from __future__ import annotations

import os

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import pci_binding
from cyborg.accelerator.drivers.utils import proc
from cyborg.accelerator.drivers.utils import sysfs
from tests.fixtures.hosts import hosts

GPU = pci.parse_address(hosts.PGPU)


@pytest.fixture
def tree(tmp_path):
    return hosts.nvidia_gpu_host(str(tmp_path / 'host'))


@pytest.fixture
def host(tree):
    return sysfs.HostRoot(tree.root)


def test_driver_override_is_none_until_set(tree, host):
    assert pci_binding.driver_override(host, GPU) is None  # "(null)"
    pci_binding.set_driver_override(host, GPU, 'vfio-pci')
    assert pci_binding.driver_override(host, GPU) == 'vfio-pci'
    assert tree.override(hosts.PGPU) == 'vfio-pci'
    pci_binding.set_driver_override(host, GPU, None)
    assert tree.read(tree.dev(hosts.PGPU, 'driver_override')) == '\n'
    assert pci_binding.driver_override(host, GPU) is None
    assert tree.override(hosts.PGPU) is None


def test_the_override_sequence_moves_the_function(tree, host):
    assert pci_binding.driver_loaded(host, 'vfio-pci')
    assert not pci_binding.driver_loaded(host, 'nouveau')
    pci_binding.set_driver_override(host, GPU, 'vfio-pci')
    pci_binding.unbind(host, GPU)
    tree.settle()
    pci_binding.wait_for_driver(host, GPU, None, 0.1)
    pci_binding.unbind(host, GPU)  # unbound: nothing written
    pci_binding.bind(host, GPU, 'vfio-pci')
    tree.settle()
    pci_binding.wait_for_driver(host, GPU, 'vfio-pci', 0.1)
    assert os.path.exists(tree.abs('dev/vfio/%d'
                                   % tree.iommu_group(hosts.PGPU)))
    assert tree.refused == []


def test_wait_for_driver_names_where_the_function_is(host):
    with pytest.raises(errors.HostError,
                       match='0000:3b:00.0 is bound to nvidia after 0.1s, '
                             'not bound to vfio-pci'):
        pci_binding.wait_for_driver(host, GPU, 'vfio-pci', 0.1)


def test_the_kernel_refuses_what_it_would_refuse(tree):
    # vfio-pci matches no id: it takes only a function overridden to it.
    tree.unbind(hosts.PGPU)
    assert not tree.kernel_bind('vfio-pci', hosts.PGPU)
    # Overridden to vfio-pci, nvidia no longer matches.
    tree.write(tree.dev(hosts.PGPU, 'driver_override'), 'vfio-pci')
    assert not tree.kernel_bind('nvidia', hosts.PGPU)
    assert tree.kernel_bind('vfio-pci', hosts.PGPU)
    assert not tree.kernel_bind('vfio-pci', hosts.PGPU)  # bound already
    assert not tree.kernel_unbind('nvidia', hosts.PGPU)  # not its driver
    assert [r.split(':')[0] for r in tree.refused] == [
        'ENODEV', 'ENODEV', 'EBUSY', 'ENODEV']


def test_drivers_probe_follows_the_override_then_the_ids(tree):
    tree.write(tree.dev(hosts.PGPU, 'driver_override'), 'vfio-pci')
    tree.write('sys/bus/pci/drivers/nvidia/unbind', hosts.PGPU)
    tree.settle()
    tree.write('sys/bus/pci/drivers_probe', hosts.PGPU)
    tree.settle()
    assert tree.read('sys/bus/pci/drivers_probe') == ''
    assert os.path.basename(os.readlink(tree.abs(tree.dev(
        hosts.PGPU, 'driver')))) == 'vfio-pci'
    tree.write(tree.dev(hosts.PGPU, 'driver_override'), '\n')
    tree.write('sys/bus/pci/drivers/vfio-pci/unbind', hosts.PGPU)
    tree.settle()
    assert not os.path.exists(tree.abs('dev/vfio/%d'
                                       % tree.iommu_group(hosts.PGPU)))
    tree.write('sys/bus/pci/drivers_probe', hosts.PGPU)
    tree.settle()
    assert os.path.basename(os.readlink(tree.abs(tree.dev(
        hosts.PGPU, 'driver')))) == 'nvidia'
    assert tree.refused == []


def test_holders_of_device_files(tree, host):
    tree.add_holder(4242, 'python3', '/dev/nvidiactl', '/dev/nvidia0')
    tree.add_holder(17, 'nvidia-persistenced', '/dev/nvidia1',
                    '/dev/nvidia0')
    tree.add_holder(99, 'bash', '/dev/pts/0')
    tree.write('proc/self/comm', 'agent')  # not a pid: skipped
    found = proc.holders(host, ['/dev/nvidia0'])
    assert found == [proc.Holder(17, 'nvidia-persistenced', '/dev/nvidia0'),
                     proc.Holder(4242, 'python3', '/dev/nvidia0')]
    assert str(found[1]) == '/dev/nvidia0 is open in process 4242 (python3)'
    assert proc.holders(host, ['/dev/nvidia7']) == []
    tree.remove_holder(17)
    assert [h.pid for h in proc.holders(host, ['/dev/nvidia0',
                                               '/dev/nvidia1'])] == [4242]


def test_a_process_without_fds_is_no_holder(tree, host):
    tree.write('proc/300/comm', 'kworker')  # ended: no fd directory
    assert proc.holders(host, ['/dev/nvidia0']) == []


def test_unreadable_open_files_are_an_error(tree, host, monkeypatch):
    tree.add_holder(500, 'qemu-kvm', '/dev/vfio/10')
    real = os.listdir

    def listdir(path):
        if path.endswith('/500/fd'):
            raise PermissionError(13, 'Permission denied')
        return real(path)
    monkeypatch.setattr(os, 'listdir', listdir)
    with pytest.raises(proc.ProcUnreadable,
                       match='cannot read the open files of process 500: '
                             'Permission denied'):
        proc.holders(host, ['/dev/vfio/10'])
