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

"""Building the device trees of PCI functions: one module for every driver.

Whole functions Nova attaches as they are (attach handle type ``PCI``),
SR-IOV physical functions with their VF pools, and GPUs passed through
whole are built the same way here, and every deployable is named by
:func:`deployable_name`. The checks of a driver's options are in
:mod:`.pci_base`.
"""

from __future__ import annotations

from collections.abc import Callable
import re

from oslo_log import log as logging

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names
from cyborg.domain import utilization

LOG = logging.getLogger(__name__)

VENDOR_NAMES = {0x8086: 'INTEL', 0x15b3: 'MELLANOX', 0x1bd4: 'INSPUR',
                0x19e5: 'HUAWEI', 0x10de: 'NVIDIA', 0x10ee: 'XILINX',
                0x1002: 'AMD'}
PCI_BRIDGE = 0x0604
GPU_CLASSES = (0x0300, 0x0302)


def vendor_name(vendor: int) -> str:
    """``INTEL`` for 0x8086; the hex id for vendors without a name."""
    return VENDOR_NAMES.get(vendor, '%04X' % vendor)


def hex_id(value: int) -> str:
    return '0x%04x' % value


def deployable_name(address: pci.PCIAddress | str, suffix: str = '') -> str:
    """``0000_3b_00_0``, with ``_<suffix>`` when given (blanks as
    ``_``): unique per device, stable across discoveries."""
    name = str(address).replace(':', '_').replace('.', '_')
    return name + ('_' + re.sub(r'\s+', '_', suffix) if suffix else '')


def pci_handle(address: pci.PCIAddress,
               **extra: str) -> device_tree.AttachHandle:
    info = dict(device_tree.pci_address_info(str(address)), **extra)
    return device_tree.AttachHandle(
        attach_type=device_tree.AttachType.PCI, attach_info=info)


def pf_with_vfs(pf: pci.PCIDevice, resource_class: str,
                pf_traits: list[str], vf_traits: list[str],
                handles: list[device_tree.AttachHandle], driver_name: str,
                preparation: device_tree.Preparation, pool: str = 'vfs'
                ) -> device_tree.Deployable:
    """An SR-IOV physical function and its VF pool: the PF's deployable
    (``0000_3b_00_0``, a resource provider with no inventory of its own,
    carrying ``pf_traits``) with one child (``0000_3b_00_0_<pool>``)
    holding the VFs (``handles``) as its inventory and ``vf_traits``.

    Nova puts the VFs of a PF on the PF's provider; the child keeps the
    PF's provider for the card, so that a PF passed through whole or a
    second pool of its VFs would be a sibling, not a change of the
    tree.
    """
    return device_tree.Deployable(
        name=deployable_name(pf.address), num_accelerators=0,
        resource_class=resource_class,
        traits=list(pf_traits), driver_name=driver_name,
        # The PF deployable has no attach handle: it is never attached, so
        # there is nothing to prepare.
        preparation=device_tree.Preparation.NONE,
        children=[device_tree.Deployable(
            name=deployable_name(pf.address, pool),
            num_accelerators=len(handles),
            resource_class=resource_class, traits=list(vf_traits),
            attach_handles=handles, driver_name=driver_name,
            preparation=preparation)])


def board_info(device: pci.PCIDevice) -> dict[str, str | int | None]:
    """What the device's PCI config space says: ids as hex strings, the
    NUMA node as an integer (None when the kernel does not know it), as
    the GPU drivers report it."""
    info: dict[str, str | int | None] = {
        'vendor_id': hex_id(device.vendor_id),
        'device_id': hex_id(device.device_id),
        'class': '0x%06x' % device.class_code,
        'numa_node': device.numa_node}
    if device.subsystem_vendor_id is not None:
        info['subsystem_vendor_id'] = hex_id(device.subsystem_vendor_id)
    if device.subsystem_device_id is not None:
        info['subsystem_device_id'] = hex_id(device.subsystem_device_id)
    return info


def make_device(device: pci.PCIDevice, device_type: str, model: str,
                deployable: device_tree.Deployable,
                healthy: bool = True) -> device_tree.Device:
    """One device with one deployable, controlled through its own
    function (``device.address``)."""
    info = device_tree.pci_address_info(str(device.address))
    return device_tree.Device(
        type=device_type, vendor=hex_id(device.vendor_id), model=model,
        address=str(device.address),
        controlpath_ids=[device_tree.ControlPathID('PCI', info)],
        deployables=[deployable], std_board_info=board_info(device),
        health=(device_tree.Health.HEALTHY if healthy
                else device_tree.Health.UNHEALTHY))


def read_vfs(host: sysfs.HostRoot,
             pf: pci.PCIAddress) -> list[pci.PCIDevice]:
    """The PF's VFs in VF index order; a VF removed meanwhile is left
    out."""
    found = []
    for address in sriov.vfs(host, pf):
        try:
            found.append(pci.read_device(host, address))
        except errors.DeviceNotFound:
            # VFs come and go with sriov_numvfs: one removed between the
            # listing and the read is not an error.
            continue
    return found


#: The drivers that hold a VF for an instance (libvirt binds a VF to
#: vfio-pci when it attaches it, and gives it back at detach).
VFIO_DRIVERS = frozenset(['vfio-pci'])


def vf_utilization(host: sysfs.HostRoot, devices: list[device_tree.Device],
                   passthrough_drivers: frozenset[str] = VFIO_DRIVERS
                   ) -> dict[str, utilization.Metrics]:
    """VFs enabled, in use by instances (bound to one of
    ``passthrough_drivers``) and in use by the host (bound to another
    driver), per physical function; a PF whose VFs cannot be read now
    is left out."""
    found = {}
    for device in devices:
        try:
            address = pci.parse_address(device.address)
            if not pci.exists(host, address):
                continue  # gone since discovery: nothing to count
            drivers = [vf.driver for vf in read_vfs(host, address)]
        except errors.HostError:
            continue
        found[device.address] = utilization.vf_usage(drivers,
                                                     passthrough_drivers)
    return found


# GPUs ---------------------------------------------------------------------


def trait(*parts: str) -> str:
    """``CUSTOM_<PARTS>`` upper-cased, other characters as ``_``."""
    return resource_names.custom_name('_'.join(parts))


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
        # vfio lets a group's bridges and unbound endpoints stay as they are;
        # only an endpoint bound to a host driver makes the group unassignable.
        is_bridge = code is not None and code >> 8 == PCI_BRIDGE
        if not is_bridge and bound is not None and bound not in drivers:
            held.append('%s (%s)' % (member, bound))
    return ', '.join(held)


def group_is_assignable(host: sysfs.HostRoot, gpu: pci.PCIDevice,
                        drivers: list[str], driver_name: str,
                        first: Callable[[str], bool]) -> bool:
    """Whether the GPU is in an IOMMU group of which no other endpoint
    is held by the host (:func:`held_group_members`); if not, says so in
    a warning, once per GPU and reason (``first(key)``: whether ``key``
    is new).

    A device in no IOMMU group cannot be assigned to a guest at all:
    vfio-pci needs the IOMMU (a real H200 in a virtual machine with no
    virtual IOMMU showed no ``iommu_group`` link).
    """
    if gpu.iommu_group is None:
        if first('no-group-%s' % gpu.address):
            LOG.warning('%s: device %s has no iommu_group, so it cannot '
                        'be passed through (turn the iommu on: its firmware '
                        'setting, and intel_iommu=on or amd_iommu=on on the '
                        'kernel command line); it is not reported',
                        driver_name, gpu.address)
        return False
    held = held_group_members(host, gpu, drivers)
    if not held:
        return True
    # Keyed by the holders too: every discovery would repeat the warning, but a
    # new holder is worth one.
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


def gpu_device(gpu: pci.PCIDevice, model: str,
               deployables: list[device_tree.Deployable], driver_name: str,
               mode: str, extra_board_info: dict | None = None,
               vendor_board_info: dict | None = None) -> device_tree.Device:
    """A GPU controlled through its own function, with the board
    information the GPU drivers report (ids, class, NUMA node, mode)."""
    board_info = {'vendor_id': hex_id(gpu.vendor_id),
                  'device_id': hex_id(gpu.device_id),
                  'class': '0x%06x' % gpu.class_code,
                  'numa_node': gpu.numa_node, 'mode': mode}
    board_info.update(extra_board_info or {})
    return device_tree.Device(
        type='GPU', vendor=hex_id(gpu.vendor_id), model=model,
        address=str(gpu.address),
        controlpath_ids=[device_tree.ControlPathID(
            'PCI', gpu.address.attach_info())],
        deployables=deployables, std_board_info=board_info,
        vendor_board_info=vendor_board_info or {}, driver=driver_name)
