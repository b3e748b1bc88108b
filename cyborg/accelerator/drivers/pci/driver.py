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

"""Generic PCI passthrough: the functions ``[pci_driver] device_spec``
matches (see :mod:`.device_spec`), each one device with one deployable
of one unit and one ``PCI`` attach handle.

Bridges are never matched, nor is an NVMe controller whose disks the host
uses (the boot disk; see :mod:`..utils.block`). A function matched by
several specs takes the first. As in Nova, specs that match a physical
function and one of its virtual functions are refused (at start, and at
each discovery), and a virtual function whose physical function has no
driver is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.pci import device_spec
from cyborg.accelerator.drivers.pci import opts as pci_conf
from cyborg.accelerator.drivers.utils import block
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

GROUP = pci_conf.group.name
BRIDGE_CLASS = 0x06
# Device type by PCI class (class << 8 | subclass), then by class.
TYPES = {0x0108: 'SSD', 0x0b40: 'QAT', 0x0300: 'GPU', 0x0302: 'GPU',
         0x0380: 'GPU', 0x1200: 'AICHIP'}
TYPES_BY_CLASS = {0x02: 'NIC', 0x03: 'GPU'}
DEFAULT_TYPE = 'AICHIP'


def device_type(spec: device_spec.DeviceSpec, device: pci.PCIDevice) -> str:
    if spec.device_type:
        return spec.device_type
    code = device.class_code >> 8
    return TYPES.get(code, TYPES_BY_CLASS.get(code >> 8, DEFAULT_TYPE))


class PCIDriver(pci_base.PCIDriver):

    name = 'pci_driver'
    options_module = pci_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        self._specs = device_spec.parse_device_specs(
            self._options.device_spec)
        self._matches()  # specs that conflict on this host stop the start

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        in_use = block.block_devices_in_use(self._host)
        return [self._device(device, spec)
                for device, spec in self._matches()
                if self._usable(device) and self._free(device, in_use)]

    def _matches(self) -> list[tuple[pci.PCIDevice,
                                     device_spec.DeviceSpec]]:
        """Every matched function with the first spec it matches."""
        if not self._specs:
            return []
        found = []
        for device in pci.list_devices(self._host):
            if device.class_code >> 16 == BRIDGE_CLASS:
                continue
            spec = next((s for s in self._specs
                         if self._spec_matches(s, device)), None)
            if spec is not None:
                found.append((device, spec))
        self._check_pf_and_vfs(found)
        return found

    def _spec_matches(self, spec: device_spec.DeviceSpec,
                      device: pci.PCIDevice) -> bool:
        if not spec.matches_ids(device):
            return False
        if spec.address is None:
            return True
        exact = spec.address.exact()
        if exact is not None and sriov.is_pf(self._host, exact):
            # Nova: a physical function's address stands for its VFs.
            return device.physfn == exact
        return spec.address.matches(device.address)

    @staticmethod
    def _check_pf_and_vfs(found: Sequence[tuple[pci.PCIDevice, object]]
                          ) -> None:
        matched = {device.address for device, _ in found}
        for device, _spec in found:
            if device.physfn is not None and device.physfn in matched:
                raise pci_base.config_error(
                    GROUP, 'device_spec', 'the physical function %s and '
                    'its virtual function %s are both matched; match '
                    'either' % (device.physfn, device.address))

    def _usable(self, device: pci.PCIDevice) -> bool:
        if device.physfn is None or pci.driver(self._host,
                                               device.physfn) is not None:
            return True
        if self._once.first(('orphan', device.address)):
            LOG.warning('Passthrough device %s is a virtual function of %s, '
                        'which has no driver; it is not reported',
                        device.address, device.physfn)
        return False

    def _free(self, device: pci.PCIDevice, in_use: set[str] | None) -> bool:
        if device.class_code != block.CLASS_NVME:
            return True
        used = (['?'] if in_use is None else
                block.used_block_devices(self._host, device.address, in_use))
        if used and self._once.first(('in-use', device.address)):
            LOG.warning('Passthrough device %s holds disks the host uses '
                        '(%s); it '
                        'is not reported', device.address,
                        ', '.join(used))
        return not used

    def _device(self, device: pci.PCIDevice,
                spec: device_spec.DeviceSpec) -> device_tree.Device:
        vendor = passthrough.vendor_name(device.vendor_id)
        traits = list(spec.traits) + [
            'CUSTOM_PCI_' + vendor,
            'CUSTOM_PCI_PRODUCT_ID_%04X' % device.device_id]
        deployable = device_tree.Deployable(
            name=passthrough.deployable_name(device.address),
            num_accelerators=1,
            resource_class=spec.resource_class_of(device), traits=traits,
            attach_handles=[passthrough.pci_handle(device.address)],
            driver_name=vendor.lower(),
            # Passed through whole: attachable as discovered.
            preparation=device_tree.Preparation.NONE)
        return passthrough.make_device(
            device, device_type(spec, device),
            'PCI %04x:%04x' % (device.vendor_id, device.device_id),
            deployable)
