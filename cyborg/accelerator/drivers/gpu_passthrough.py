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

"""What the GPU drivers share: trait names and the passthrough checks."""

from __future__ import annotations

import re
from collections.abc import Callable

from oslo_log import log as logging

from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names

LOG = logging.getLogger(__name__)

PCI_BRIDGE = 0x0604
GPU_CLASSES = (0x0300, 0x0302)


def trait(*parts: str) -> str:
    """``CUSTOM_<PARTS>`` upper-cased, other characters as ``_``."""
    return resource_names.custom_name('_'.join(parts))


def deployable_name(address: pci.PCIAddress, suffix: str = '') -> str:
    """``0000_3b_00_0``, with ``_<suffix>`` when given."""
    name = str(address).replace(':', '_').replace('.', '_')
    return name + ('_' + re.sub(r'\s+', '_', suffix) if suffix else '')


def held_group_members(host: sysfs.HostRoot, device: pci.PCIDevice,
                       drivers: list[str]) -> str:
    """The other endpoints of the device's IOMMU group (a GPU's HDMI
    audio function...) bound to a driver outside ``drivers``: libvirt
    cannot assign a group part of which the host holds. Bridges do not
    count."""
    if device.iommu_group is None:
        return ''
    held = []
    for member in pci.iommu_group_devices(host, device.iommu_group):
        if member == device.address:
            continue
        code = pci.class_code(host, member)
        bound = pci.driver(host, member)
        is_bridge = code is not None and code >> 8 == PCI_BRIDGE
        if not is_bridge and bound is not None and bound not in drivers:
            held.append('%s (%s)' % (member, bound))
    return ', '.join(held)


def group_is_assignable(host: sysfs.HostRoot, gpu: pci.PCIDevice,
                        drivers: list[str], driver_name: str,
                        first: Callable[[str], bool]) -> bool:
    """Whether no other endpoint of the GPU's IOMMU group is held by the
    host (:func:`held_group_members`); if one is, says so in a warning,
    once per GPU and holder (``first(key)``: whether ``key`` is new)."""
    held = held_group_members(host, gpu, drivers)
    if not held:
        return True
    if first('group-%s-%s' % (gpu.address, held)):
        LOG.warning('%s: device %s shares its iommu_group with %s, which '
                    'the host holds; it is not reported', driver_name,
                    gpu.address, held)
    return False


def pgpu_deployable(gpu: pci.PCIDevice, traits: list[str],
                    driver_name: str,
                    preparation: device_tree.Preparation = (
                        device_tree.Preparation.NONE)
                    ) -> device_tree.Deployable:
    """A whole GPU offered for passthrough: one ``PGPU``, the GPU's own
    function as its attach handle; attachable as discovered (libvirt
    binds it to vfio-pci) unless ``preparation`` says otherwise."""
    return device_tree.Deployable(
        name=deployable_name(gpu.address), num_accelerators=1,
        resource_class='PGPU', traits=traits,
        attach_handles=[device_tree.AttachHandle(
            device_tree.AttachType.PCI, gpu.address.attach_info())],
        driver_name=driver_name, preparation=preparation)
