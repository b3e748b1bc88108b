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

"""SR-IOV network cards: one deployable per physical function.

Intel 82599 (``ixgbe``), X710/XL710/XXV710 (``i40e``), E810 (``ice``) and
NVIDIA (Mellanox) ConnectX-4 to -7 and BlueField-2 (``mlx5_core``)
physical functions with virtual functions enabled. Each PF is one
device whose deployable is the PF (a resource provider with no inventory)
with one child, ``<PF>_vfs``, of ``[intel_nic_driver] resource_class``,
as Nova puts a PF's VFs on the PF's provider; the child's attach handles
are the VFs (libvirt detaches a VF from its host driver, ``iavf`` or
``mlx5_core``, when it attaches it). The physical network of a PF comes
from ``physical_device_mappings`` (by interface name or PCI address):
the trait ``CUSTOM_PHYSNET_<NAME>`` and ``physical_network`` in each
handle's attach information.

A PF without a driver is not reported (its VFs cannot be managed); a PF
whose link is down, or that has no network interface, is unhealthy.
Discovery only reads: VFs are created by the operator.

The VFs' preparation is ``vf``: at bind the agent checks that the VF is
still a VF of its PF and on one of ``vf_drivers`` (or unbound), and puts
it in its physical network's VLAN (``vf_vlans``) and trusted mode
(``vf_trust``) with ``ip link set dev <PF> vf <N>``; at unbind it takes
the VLAN and trust away again. Both are safe to repeat; the unbind of a
VF that is gone has nothing to undo.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.nic import opts as nic_conf
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names

LOG = logging.getLogger(__name__)

GROUP = nic_conf.group.name
CLASS_ETHERNET = 0x0200
INTEL = 0x8086
MELLANOX = 0x15b3
LINK_DOWN = ('down', 'lowerlayerdown', 'notpresent')
IP_TIMEOUT = 10.0
_IFNAME = re.compile(r'^[^/\s:]{1,15}$')


@dataclasses.dataclass(frozen=True)
class Model:
    vendor: int
    pf_id: int
    name: str  # as the trait spells it
    model: str  # as the vendor does


MODELS = {(m.vendor, m.pf_id): m for m in (
    Model(INTEL, 0x10fb, '82599', '82599'),
    Model(INTEL, 0x1572, 'X710', 'X710'),
    Model(INTEL, 0x1583, 'XL710', 'XL710'),
    Model(INTEL, 0x1584, 'XL710', 'XL710'),
    Model(INTEL, 0x158b, 'XXV710', 'XXV710'),
    Model(INTEL, 0x1591, 'E810_C', 'E810-C'),
    Model(INTEL, 0x1592, 'E810_C', 'E810-C'),
    Model(INTEL, 0x1593, 'E810_C', 'E810-C'),
    Model(INTEL, 0x1599, 'E810_XXV', 'E810-XXV'),
    Model(INTEL, 0x159b, 'E810_XXV', 'E810-XXV'),
    Model(MELLANOX, 0x1013, 'CONNECTX_4', 'ConnectX-4'),
    Model(MELLANOX, 0x1015, 'CONNECTX_4_LX', 'ConnectX-4 Lx'),
    Model(MELLANOX, 0x1017, 'CONNECTX_5', 'ConnectX-5'),
    Model(MELLANOX, 0x1019, 'CONNECTX_5_EX', 'ConnectX-5 Ex'),
    Model(MELLANOX, 0x101b, 'CONNECTX_6', 'ConnectX-6'),
    Model(MELLANOX, 0x101d, 'CONNECTX_6_DX', 'ConnectX-6 Dx'),
    Model(MELLANOX, 0x101f, 'CONNECTX_6_LX', 'ConnectX-6 Lx'),
    Model(MELLANOX, 0x1021, 'CONNECTX_7', 'ConnectX-7'),
    Model(MELLANOX, 0xa2d6, 'BLUEFIELD_2', 'BlueField-2'),
)}


@dataclasses.dataclass(frozen=True)
class Mappings:
    """``physical_device_mappings``: physnet by address and by netdev."""

    by_address: dict[pci.PCIAddress, str]
    by_ifname: dict[str, str]


def parse_mappings(values: list[str]) -> Mappings:
    """Parse ``physnet:ifname`` and ``physnet:address`` entries."""
    by_address: dict[pci.PCIAddress, str] = {}
    by_ifname: dict[str, str] = {}
    for entry in values:
        physnet, sep, target = entry.strip().partition(':')
        physnet, target = physnet.strip(), target.strip()
        if not sep or not physnet or not target:
            raise _mapping_error(entry, 'expected <physnet>:<interface> or '
                                 '<physnet>:<PCI address>')
        table: dict[Any, str]
        key: Any
        if ':' in target and pci.is_valid_address(target):
            table, key = by_address, pci.parse_address(target)
        elif _IFNAME.match(target):
            table, key = by_ifname, target
        else:
            raise _mapping_error(entry, '%r is neither an interface name '
                                 'nor a PCI address' % target)
        if table.get(key, physnet) != physnet:
            raise _mapping_error(entry, '%s is already in physical network '
                                 '%s' % (target, table[key]))
        table[key] = physnet
    return Mappings(by_address, by_ifname)


def _mapping_error(entry: str,
                   reason: str) -> driver_errors.DriverConfigError:
    return pci_base.config_error(GROUP, 'physical_device_mappings',
                                 '%r: %s' % (entry, reason))


def parse_vlans(values: list[str], mappings: Mappings) -> dict[str, int]:
    """``vf_vlans``: ``{physnet: vlan id}``; every physnet must be one
    that ``physical_device_mappings`` maps."""
    known = set(mappings.by_address.values()) | set(
        mappings.by_ifname.values())
    vlans: dict[str, int] = {}
    for entry in values:
        physnet, sep, vlan = (part.strip() for part in
                              entry.strip().rpartition(':'))
        if not sep or not physnet or not vlan.isdigit() or not (
                1 <= int(vlan) <= 4094):
            raise pci_base.config_error(
                GROUP, 'vf_vlans', '%r: expected <physnet>:<vlan id> with '
                'a VLAN id from 1 to 4094' % entry)
        if physnet not in known:
            raise pci_base.config_error(
                GROUP, 'vf_vlans', '%r: %s is no physical network of '
                'physical_device_mappings' % (entry, physnet))
        if vlans.get(physnet, int(vlan)) != int(vlan):
            raise pci_base.config_error(
                GROUP, 'vf_vlans', '%r: physical network %s already has '
                'VLAN %d' % (entry, physnet, vlans[physnet]))
        vlans[physnet] = int(vlan)
    return vlans


def physnet_trait(physnet: str) -> str:
    return resource_names.custom_name('PHYSNET_' + physnet)


def _parse_device_id(text: str) -> tuple[int, int]:
    vendor, sep, device = text.strip().partition(':')
    if not sep:
        raise pci_base.config_error(GROUP, 'device_ids', '%r: expected '
                                    '<vendor>:<device>' % text)
    key = (pci_base.parse_hex_id(vendor, GROUP, 'device_ids'),
           pci_base.parse_hex_id(device, GROUP, 'device_ids'))
    if key not in MODELS:
        raise pci_base.config_error(
            GROUP, 'device_ids', '%r is not an SR-IOV physical function '
            'this driver knows' % text)
    return key


class IntelNICDriver(pci_base.PCIDriver):

    name = 'intel_nic_driver'
    options_module = nic_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        options = self._options
        self._rc = self._resource_class()
        self._mappings = parse_mappings(options.physical_device_mappings)
        self._vlans = parse_vlans(options.vf_vlans, self._mappings)
        self._trust = options.vf_trust
        self._vf_drivers = frozenset(options.vf_drivers)
        self._models = frozenset(_parse_device_id(v)
                                 for v in options.device_ids) or frozenset(
                                     MODELS)
        self._mapped_only = options.mapped_only

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        devices, used = [], set[object]()
        for pf in self._physical_functions():
            ifnames = sriov.netdevs(self._host, pf.address)
            physnet = self._physnet(pf, ifnames, used)
            if physnet is None and self._mapped_only:
                continue
            device = self._device(pf, ifnames, physnet or None)
            if device is not None:
                devices.append(device)
        self._warn_unused(used)
        return devices

    def _physical_functions(self) -> list[pci.PCIDevice]:
        found = []
        for vendor in sorted({vendor for vendor, _ in self._models}):
            found += pci.list_devices(self._host, vendor=vendor,
                                      classes=(CLASS_ETHERNET,))
        return sorted((d for d in found if not d.is_vf and (
            d.vendor_id, d.device_id) in self._models),
            key=lambda d: d.address)

    def _physnet(self, pf: pci.PCIDevice, ifnames: list[str],
                 used: set[object]) -> str | None:
        """The PF's physical network; ``''`` when the mappings disagree
        (the PF is then reported without one)."""
        found = {}
        if pf.address in self._mappings.by_address:
            used.add(pf.address)
            found[str(pf.address)] = self._mappings.by_address[pf.address]
        for ifname in ifnames:
            if ifname in self._mappings.by_ifname:
                used.add(ifname)
                found[ifname] = self._mappings.by_ifname[ifname]
        if len(set(found.values())) > 1:
            if self._once.first(('conflict', pf.address)):
                LOG.warning('physical_device_mappings puts network card %s in '
                            'several physical networks (%s); it is reported '
                            'without one', pf.address,
                            ', '.join('%s:%s' % (v, k)
                                      for k, v in sorted(found.items())))
            return ''
        return next(iter(found.values()), None)

    def _warn_unused(self, used: set[object]) -> None:
        targets = [str(a) for a in self._mappings.by_address if a not in used]
        targets += [i for i in self._mappings.by_ifname if i not in used]
        for target in sorted(targets):
            if self._once.first(('unused', target)):
                LOG.warning('physical_device_mappings names %s, which is '
                            'no network card of this host with virtual '
                            'functions', target)

    def _device(self, pf: pci.PCIDevice, ifnames: list[str],
                physnet: str | None) -> device_tree.Device | None:
        vfs = sriov.vfs(self._host, pf.address)
        if pf.driver is None:
            if self._once.first(('no-driver', pf.address)):
                LOG.warning('Network card %s has no driver; its %d virtual '
                            'functions are not reported', pf.address, len(vfs))
            return None
        if not vfs:
            if self._once.first(('no-vfs', pf.address)):
                LOG.info('Network card %s has no virtual functions; it is not '
                         'reported', pf.address)
            return None
        model = MODELS[(pf.vendor_id, pf.device_id)]
        return passthrough.make_device(
            pf, 'NIC', model.model,
            self._deployable(pf, model, vfs, physnet),
            self._healthy(pf, ifnames))

    def _deployable(self, pf: pci.PCIDevice, model: Model,
                    vfs: list[pci.PCIAddress],
                    physnet: str | None) -> device_tree.Deployable:
        vendor = passthrough.vendor_name(pf.vendor_id)
        pf_traits = ['HW_NIC_SRIOV', 'CUSTOM_NIC_' + vendor,
                     'CUSTOM_NIC_%s_%s' % (vendor, model.name),
                     'CUSTOM_NIC_PRODUCT_ID_%04X' % pf.device_id]
        traits = list(pf_traits)
        extra = {}
        if physnet is not None:
            traits.append(physnet_trait(physnet))
            extra['physical_network'] = physnet
        return passthrough.pf_with_vfs(
            pf, self._rc, pf_traits, traits,
            [passthrough.pci_handle(vf, **extra) for vf in vfs],
            vendor.lower(), device_tree.Preparation.VF)

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, dict[str, int | float]]:
        """Per PF: VFs enabled, VFs on vfio-pci (given to instances) and
        VFs on a host driver (``iavf``, ``mlx5_core``: netdevs of the
        host)."""
        return passthrough.vf_utilization(self._host, devices)

    def _healthy(self, pf: pci.PCIDevice, ifnames: list[str]) -> bool:
        states = [sysfs.read_text(self._host, pci.device_path(
            pf.address, 'net', ifname, 'operstate')) for ifname in ifnames]
        if not ifnames:
            problem = 'it has no network interface'
        elif all(state in LINK_DOWN for state in states):
            problem = 'the link of %s is down' % ', '.join(ifnames)
        else:
            return True
        if self._once.first(('unhealthy', pf.address)):
            LOG.warning('Network card %s is unhealthy: %s', pf.address,
                        problem)
        return False

    # Preparation (``vf``) ---------------------------------------------

    def prepare_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        """Check that the VF can go to an instance and configure it
        (``vf_vlans``, ``vf_trust``); safe to repeat."""
        vf = _vf_address(handle)
        pf = self._check_vf(vf)
        settings = self._settings(handle, 'bind')
        if settings:
            self._ip_set(pf, vf, settings)
            LOG.info('Network card %s: virtual function %s prepared (%s)',
                     pf, vf, ' '.join(settings))

    def release_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        """Undo what :meth:`prepare_attach_handle` configured; a VF that
        is gone has nothing left to undo."""
        vf = _vf_address(handle)
        settings = self._settings(handle, 'unbind')
        if not settings:
            return
        try:
            pf = sriov.physfn(self._host, vf) if pci.exists(
                self._host, vf) else None
        except errors.HostError as exc:
            raise driver_errors.PrepareFailed(
                reason='cannot read virtual function %s: '
                '%s' % (vf, exc))
        if pf is None:
            LOG.info('Network card virtual function %s is gone; nothing to '
                     'release', vf)
            return
        self._ip_set(pf, vf, settings)
        LOG.info('Network card %s: virtual function %s released (%s)', pf,
                 vf, ' '.join(settings))

    def _check_vf(self, vf: pci.PCIAddress) -> pci.PCIAddress:
        """The VF's PF, once the VF is known to be attachable."""
        try:
            if not pci.exists(self._host, vf):
                raise driver_errors.PrepareFailed(
                    reason='virtual function %s is gone'
                    % vf)
            pf = sriov.physfn(self._host, vf)
            if pf is None:
                raise driver_errors.PrepareFailed(
                    reason='%s is no longer a virtual '
                    'function' % vf)
            driver = pci.driver(self._host, vf)
        except errors.HostError as exc:
            raise driver_errors.PrepareFailed(
                reason='cannot read virtual function %s: '
                '%s' % (vf, exc))
        if driver is not None and driver not in self._vf_drivers:
            raise driver_errors.PrepareFailed(
                reason='virtual function %s is bound to %s, not to one of '
                '[%s] vf_drivers' % (vf, driver, GROUP))
        return pf

    def _settings(self, handle: device_tree.AttachHandle,
                  step: str) -> list[str]:
        """The ``ip link set ... vf N`` arguments of ``step``."""
        vlan = self._vlans.get(handle.attach_info.get('physical_network',
                                                      ''))
        settings = []
        if vlan is not None:
            settings += ['vlan', str(vlan if step == 'bind' else 0)]
        if self._trust:
            settings += ['trust', 'on' if step == 'bind' else 'off']
        return settings

    def _ip_set(self, pf: pci.PCIAddress, vf: pci.PCIAddress,
                settings: list[str]) -> None:
        try:
            ifnames = sriov.netdevs(self._host, pf)
            index = sriov.vf_index(self._host, vf)
        except errors.HostError as exc:
            raise driver_errors.PrepareFailed(
                reason='cannot read network card %s: %s'
                % (pf, exc))
        if not ifnames or index is None:
            raise driver_errors.PrepareFailed(
                reason='network card %s has no network interface or no '
                'virtfn link to %s; cannot set %s' % (
                    pf, vf, ' '.join(settings)))
        argv = ['ip', 'link', 'set', 'dev', ifnames[0], 'vf', str(index),
                *settings]
        try:
            self._runner.run(argv, timeout=IP_TIMEOUT).check()
        except errors.ToolError as exc:
            raise driver_errors.PrepareFailed(
                reason='cannot configure virtual function '
                '%s of %s: %s' % (vf, pf, exc))


def _vf_address(handle: device_tree.AttachHandle) -> pci.PCIAddress:
    try:
        return pci.handle_address(handle.attach_info)
    except errors.InvalidPCIAddress as exc:
        raise driver_errors.PrepareFailed(
            reason='attach handle %r has no PCI address: '
            '%s' % (handle.attach_info, exc))
