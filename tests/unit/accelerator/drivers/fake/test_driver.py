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

"""The fake driver's preparation: a file per prepared handle."""

import os

import pytest

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.fake import driver as fake
from cyborg.domain import device_tree

MDEV = device_tree.Preparation.MDEV
NONE = device_tree.Preparation.NONE


def _mdev_handle(conf):
    conf.set_override('handle_type', 'MDEV', group='fake_driver')
    device = fake.FakeDriver(conf).discover()[0]
    return device.deployables[0].attach_handles[0]


def test_prepare_creates_and_release_removes_the_mdev(conf, tmp_path):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    driver = fake.FakeDriver(conf)
    handle = _mdev_handle(conf)
    driver.prepare_attach_handle(handle, 'h-1', MDEV)
    assert os.listdir(tmp_path) == ['h-1']
    assert 'fake-mdev-1' in (tmp_path / 'h-1').read_text()
    driver.release_attach_handle(handle, 'h-1', MDEV)
    driver.release_attach_handle(handle, 'h-1', MDEV)  # idempotent
    assert os.listdir(tmp_path) == []


def test_pci_handles_need_nothing(conf, tmp_path):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    driver = fake.FakeDriver(conf)
    driver.prepare_attach_handle(device_tree.AttachHandle('PCI', {}), 'h-2',
                                 NONE)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('kind', ['vf', 'vgpu_type', 'program'])
def test_declared_preparation_prepares_pci_handles(conf, tmp_path, kind):
    """A deployable declaring a preparation has its PCI handles
    prepared and released like MDEV ones."""
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    conf.set_override('preparation', kind, group='fake_driver')
    driver = fake.FakeDriver(conf)
    deployable = driver.discover()[0].deployables[0]
    assert deployable.preparation == kind
    handle = deployable.attach_handles[0]
    driver.prepare_attach_handle(handle, 'h-3', deployable.preparation)
    assert os.listdir(tmp_path) == ['h-3']
    driver.release_attach_handle(handle, 'h-3', deployable.preparation)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('kind', ['vf', 'vgpu_type', 'program', 'mdev'])
def test_declared_preparation_fails_as_configured(conf, tmp_path, kind):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    conf.set_override('handle_type', 'PCI', group='fake_driver')
    conf.set_override('preparation', kind, group='fake_driver')
    conf.set_override('prepare_failures', ['*'], group='fake_driver')
    driver = fake.FakeDriver(conf)
    handle = driver.discover()[0].deployables[0].attach_handles[0]
    with pytest.raises(errors.PrepareFailed):
        driver.prepare_attach_handle(handle, 'h-4',
                                     device_tree.Preparation(kind))
    assert os.listdir(tmp_path) == []


def test_declared_none_leaves_mdev_handles_alone(conf, tmp_path):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    conf.set_override('preparation', 'none', group='fake_driver')
    handle = _mdev_handle(conf)
    fake.FakeDriver(conf).prepare_attach_handle(handle, 'h-5', NONE)
    assert os.listdir(tmp_path) == []


def test_prepare_failures_by_device_address(conf, tmp_path):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    conf.set_override('num_devices', 2, group='fake_driver')
    conf.set_override('handle_type', 'MDEV', group='fake_driver')
    conf.set_override('prepare_failures', ['0000:11:00.0'],
                      group='fake_driver')
    driver = fake.FakeDriver(conf)
    first, second = driver.discover()
    assert second.address == '0000:11:00.0'
    good = first.deployables[0].attach_handles[0]
    bad = second.deployables[0].attach_handles[1]
    with pytest.raises(errors.PrepareFailed, match='0000:11:00.0'):
        driver.prepare_attach_handle(bad, 'h-bad', MDEV)
    driver.prepare_attach_handle(good, 'h-good', MDEV)
    assert os.listdir(tmp_path) == ['h-good']
    driver.release_attach_handle(bad, 'h-bad', MDEV)  # nothing to remove
    assert os.listdir(tmp_path) == ['h-good']


def test_prepare_failures_everywhere_spare_unprepared_handles(conf,
                                                              tmp_path):
    conf.set_override('mdev_dir', str(tmp_path), group='fake_driver')
    conf.set_override('prepare_failures', ['*'], group='fake_driver')
    driver = fake.FakeDriver(conf)
    with pytest.raises(errors.PrepareFailed):
        driver.prepare_attach_handle(_mdev_handle(conf), 'h-3', MDEV)
    # PCI handles need no preparation: nothing can fail.
    driver.prepare_attach_handle(device_tree.AttachHandle(
        'PCI', device_tree.pci_address_info('0000:10:00.1')), 'h-4', NONE)
    assert os.listdir(tmp_path) == []


def test_discover_delay_is_slept_before_each_discovery(conf, monkeypatch):
    slept = []
    monkeypatch.setattr(fake.time, 'sleep', slept.append)
    conf.set_override('discover_delay', 1.5, group='fake_driver')
    assert len(fake.FakeDriver(conf).discover()) == 1
    assert slept == [1.5]
