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

"""Inspur FPGA cards (vendor ``1bd4``, class "Processing accelerators"),
passed through whole.

One device per card, one deployable of ``[inspur_fpga_driver]
resource_class`` (``FPGA``) with the card as its ``PCI`` attach handle
and the traits ``CUSTOM_FPGA_INSPUR`` and
``CUSTOM_FPGA_PRODUCT_ID_<device id>``. Inspur NVMe drives share the
vendor id and are told apart by their class. The cards cannot be
programmed through Cyborg: ``program`` raises a typed error.
"""

from __future__ import annotations

from oslo_config import cfg

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.fpga import common
from cyborg.accelerator.drivers.fpga import inspur_opts as inspur_conf
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree

GROUP = inspur_conf.group.name
INSPUR = 0x1bd4
CLASS_ACCELERATOR = 0x1200


class InspurFPGADriver(pci_base.PCIDriver):

    name = 'inspur_fpga_driver'
    options_module = inspur_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        self._rc = self._resource_class()
        self._ids = self._hex_ids()
        self._addresses = self._option_addresses()

    def discover(self) -> list[device_tree.Device]:
        return [self._device(d) for d in self._cards()]

    def _cards(self) -> list[pci.PCIDevice]:
        found = pci.list_devices(self._host, vendor=INSPUR,
                                 classes=(CLASS_ACCELERATOR,))
        return [d for d in found if not d.is_vf
                and (not self._ids or d.device_id in self._ids)
                and (not self._addresses or d.address in self._addresses)]

    def _device(self, card: pci.PCIDevice) -> device_tree.Device:
        deployable = device_tree.Deployable(
            name=passthrough.deployable_name(card.address),
            num_accelerators=1, resource_class=self._rc,
            traits=['CUSTOM_FPGA_INSPUR',
                    'CUSTOM_FPGA_PRODUCT_ID_%04X' % card.device_id],
            attach_handles=[passthrough.pci_handle(card.address)],
            driver_name='inspur')
        return passthrough.make_device(
            card, 'FPGA', 'Inspur FPGA %04x' % card.device_id, deployable)

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        present = {str(d.address) for d in self._cards()}
        return {d.address: (device_tree.Health.HEALTHY
                            if d.address in present
                            else device_tree.Health.UNHEALTHY)
                for d in devices}

    def program(self, controlpath: device_tree.ControlPathID,
                image_path: str) -> None:
        address = common.controlpath_address(controlpath, self.name)
        raise driver_errors.ProgramFailed(
            device=str(address), reason='Inspur FPGA cards cannot be '
            'programmed through Cyborg; use the vendor\'s tools')
