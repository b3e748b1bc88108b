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

"""The fake driver: simulated devices, shaped by configuration.

Each simulated device has one deployable with ``accelerators`` attach
handles: PCI virtual functions on the device's bus, mdevs of the
configured type, or ``TEST_PCI`` handles that Nova ignores. The
deployable declares ``[fake_driver] preparation`` (or the device's
``preparation``; unset: the default of its handles). Preparing a handle
of a deployable that needs preparation "creates" it (an mdev for MDEV
handles): a file named by the handle's uuid in ``[fake_driver]
mdev_dir``, which releasing removes. ``[fake_driver] prepare_failures``
makes preparing the handles of some devices (or of all) fail, without
creating anything. Programming a device writes ``programmed-ADDRESS`` in
``mdev_dir``, holding the image's path; ``[fake_driver]
program_failures`` makes it fail. ``[fake_driver] children_per_device``
nests the handles in child deployables of the device's deployable.
A device of ``devices_file`` may give health ``signals`` at every
discovery and say whether a ``reset`` of it works.
"""

import json
import os
import time
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import passthrough
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import taints

LOG = logging.getLogger(__name__)


def _address(index: int) -> str:
    return '0000:%02x:00.0' % (0x10 + index)


def _device_address(info: dict[str, str]) -> str:
    """The PCI address of the device a handle belongs to (an MDEV
    handle's info is its device's, a PCI handle's is the function's)."""
    return '%s:%s:%s.%s' % (info.get('domain'), info.get('bus'),
                            info.get('device'), info.get('function'))


class FakeDriver(base.AcceleratorDriver):

    name = 'fake_driver'

    def __init__(self, conf: cfg.ConfigOpts, runner: Any = None,
                 host: Any = None):
        # It reads no host and runs no command: ``runner`` and ``host``
        # are accepted as every driver accepts them, and ignored.
        self._conf = conf

    def _specs(self) -> list[dict[str, Any]]:
        options = self._conf.fake_driver
        path = options.devices_file
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return [{'address': _address(i)} for i in range(options.num_devices)]

    def discover(self) -> list[device_tree.Device]:
        time.sleep(self._conf.fake_driver.discover_delay)
        return [self._device(spec) for spec in self._specs()]

    def health_signals(self, devices: list[device_tree.Device]
                       ) -> dict[str, list[remediation.Signal]]:
        """The driver's verdict, and the ``signals`` of each device of
        ``devices_file``."""
        found = super().health_signals(devices)
        specs = {spec['address']: spec for spec in self._specs()}
        for device in devices:
            found[device.address] += [
                remediation.Signal(name, 'fake signal %s' % name)
                for name in specs.get(device.address, {}).get('signals', [])]
        return found

    def reset_device(self, device: device_tree.Device) -> None:
        """Works unless the device's ``reset`` is ``fail``."""
        spec = {s['address']: s for s in self._specs()}.get(device.address,
                                                            {})
        if spec.get('reset', 'ok') == 'fail':
            raise errors.ResetFailed(device=device.address,
                                     reason='the fake device says no')

    def _device(self, spec: dict[str, Any]) -> device_tree.Device:
        options = self._conf.fake_driver
        address = spec['address']
        handle_type = spec.get('handle_type', options.handle_type)
        count = int(spec.get('accelerators', options.accelerators_per_device))
        health = spec.get('health', device_tree.Health.UNHEALTHY
                          if address in options.unhealthy_devices
                          else device_tree.Health.HEALTHY)
        pf = device_tree.pci_address_info(address)
        children = int(spec.get('children', options.children_per_device))

        def make(suffix: str, first: int,
                 number: int) -> device_tree.Deployable:
            return device_tree.Deployable(
                name=passthrough.deployable_name(address, suffix),
                num_accelerators=number,
                resource_class=spec.get('resource_class',
                                        options.resource_class),
                traits=list(spec.get('traits', options.traits)),
                attach_handles=[self._handle(handle_type, pf, i)
                                for i in range(first, first + number)],
                driver_name='fake',
                preparation=spec.get('preparation', options.preparation))
        if children:
            top = make('', 1, 0)
            top.children = [
                make('c%d' % child, 1 + child * count, count)
                for child in range(children)]
        else:
            top = make('', 1, count)
        return device_tree.Device(
            type=spec.get('type', options.device_type),
            vendor=spec.get('vendor', options.vendor),
            model=spec.get('model', options.model),
            address=address,
            controlpath_ids=[device_tree.ControlPathID('PCI', pf)],
            deployables=[top],
            std_board_info={'device_id': '0xabcd', 'class': 'Fake class'},
            vendor_board_info='fake_vendor_info',
            health=health,
            driver=self.name,
            taints=[taints.Taint.from_wire(taint)
                    for taint in spec.get('taints', ())])

    def _handle(self, handle_type: str, pf: dict[str, str],
                index: int) -> device_tree.AttachHandle:
        if handle_type == device_tree.AttachType.MDEV:
            info = dict(pf, asked_type=self._conf.fake_driver.mdev_type,
                        vgpu_mark='%s_%d' % (self._conf.fake_driver.mdev_type,
                                             index))
        else:
            info = dict(pf, device='%02x' % (index // 8),
                        function=str(index % 8))
        return device_tree.AttachHandle(
            attach_type=device_tree.AttachType(handle_type), attach_info=info)

    def _mdev_path(self, handle_uuid: str) -> str | None:
        directory = self._conf.fake_driver.mdev_dir
        return os.path.join(directory, handle_uuid) if directory else None

    def prepare_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        if not device_tree.needs_preparation(preparation):
            return
        time.sleep(self._conf.fake_driver.prepare_delay)
        failures = self._conf.fake_driver.prepare_failures
        address = _device_address(handle.attach_info)
        if '*' in failures or address in failures:
            LOG.warning('Simulated failure to prepare %s of device %s',
                        handle_uuid, address)
            raise errors.PrepareFailed(
                'simulated failure to prepare attach handle %s of device %s'
                % (handle_uuid, address))
        path = self._mdev_path(handle_uuid)
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                json.dump(handle.attach_info, f)
        LOG.info('Prepared fake handle %s (preparation %s)', handle_uuid,
                 preparation)

    def program(self, controlpath: device_tree.ControlPathID,
                image_path: str) -> None:
        """Write the image's path to ``[fake_driver] mdev_dir``; the
        function it runs is not known (None)."""
        address = _device_address(controlpath.cpid_info)
        failures = self._conf.fake_driver.program_failures
        if '*' in failures or address in failures:
            LOG.warning('Simulated failure to program device %s', address)
            raise errors.ProgramFailed(
                device=address, reason='simulated failure to program it '
                'with %s' % image_path)
        path = self._mdev_path('programmed-' + address)
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(image_path)
        LOG.info('Programmed fake device %s with %s', address, image_path)

    def release_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        if not device_tree.needs_preparation(preparation):
            return
        path = self._mdev_path(handle_uuid)
        if path is not None and os.path.exists(path):
            os.remove(path)
        LOG.info('Released fake handle %s', handle_uuid)
