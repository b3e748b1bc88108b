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

"""NVMe SSDs passed through whole: one device per controller.

NVMe controllers (class ``0x010802``) of ``[inspur_nvme_ssd_driver]
vendor_ids`` (Inspur ``1bd4`` by default: the vendor id also covers
Inspur's FPGAs, so the class is checked too). A controller is **never**
reported while one of its namespaces, or a partition of one, is mounted
(``/proc/mounts``), used as swap (``/proc/swaps``) or held by another
block device (``holders/``: LVM, MD, dm-crypt): that is how the boot
disk stays on the host. Without ``/proc/mounts`` no controller is
reported. A controller on vfio-pci, or unbound, shows no namespaces and
is reported.

Each controller is one device with one deployable of one
``resource_class`` unit, traits ``CUSTOM_SSD_<VENDOR>`` and
``CUSTOM_SSD_PRODUCT_ID_<ID>``, and one ``PCI`` attach handle. Health:
the controller's ``state`` is ``live`` (when the ``nvme`` driver holds it).
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.ssd import opts as ssd_conf
from cyborg.accelerator.drivers.utils import block
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

GROUP = ssd_conf.group.name
CLASS_NVME = block.CLASS_NVME


class InspurNVMeSSDDriver(pci_base.PCIDriver):

    name = 'inspur_nvme_ssd_driver'
    options_module = ssd_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        self._rc = self._resource_class()
        self._vendors = sorted(self._hex_ids('vendor_ids'))
        if not self._vendors:
            raise self.config_error('vendor_ids',
                                    'at least one vendor is needed')
        self._addresses = self._option_addresses()

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        in_use = block.block_devices_in_use(self._host)
        if in_use is None:
            if self._once.first('no-mounts'):
                LOG.warning('/proc/mounts cannot be read under the host '
                            'root; no NVMe controller is reported')
            return []
        return [self._device(ctrl) for ctrl in self._controllers()
                if self._free(ctrl, in_use)]

    def _controllers(self) -> list[pci.PCIDevice]:
        found = []
        for vendor in self._vendors:
            found += [d for d in pci.list_devices(
                self._host, vendor=vendor, classes=(CLASS_NVME >> 8,))
                if d.class_code == CLASS_NVME and (
                    not self._addresses or d.address in self._addresses)]
        return sorted(found, key=lambda d: d.address)

    def _free(self, ctrl: pci.PCIDevice, in_use: set[str]) -> bool:
        if sriov.num_vfs(self._host, ctrl.address):
            return False  # its virtual functions are reported instead
        used = block.used_block_devices(self._host, ctrl.address, in_use)
        if used and self._once.first(('in-use', ctrl.address)):
            LOG.info('NVMe controller %s is in use on the host (%s); it is '
                     'not reported', ctrl.address, ', '.join(used))
        return not used

    def _device(self, ctrl: pci.PCIDevice) -> device_tree.Device:
        vendor = passthrough.vendor_name(ctrl.vendor_id)
        deployable = device_tree.Deployable(
            name=passthrough.deployable_name(ctrl.address),
            num_accelerators=1, resource_class=self._rc,
            traits=['CUSTOM_SSD_' + vendor,
                    'CUSTOM_SSD_PRODUCT_ID_%04X' % ctrl.device_id],
            attach_handles=[passthrough.pci_handle(ctrl.address)],
            driver_name=vendor.lower(),
            # Passed through whole: attachable as discovered.
            preparation=device_tree.Preparation.NONE)
        return passthrough.make_device(
            ctrl, 'SSD', 'NVMe %04x:%04x' % (ctrl.vendor_id, ctrl.device_id),
            deployable, self._healthy(ctrl))

    def _healthy(self, ctrl: pci.PCIDevice) -> bool:
        for name in sysfs.list_dir(self._host,
                                   pci.device_path(ctrl.address, 'nvme')):
            state = sysfs.read_text(self._host, pci.device_path(
                ctrl.address, 'nvme', name, 'state'))
            if state not in (None, 'live'):
                if self._once.first(('unhealthy', ctrl.address)):
                    LOG.warning('NVMe controller %s is unhealthy: %s is %s',
                                ctrl.address, name, state)
                return False
        return True
