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

"""Intel FPGA cards under the kernel's DFL driver (``dfl-pci``).

A card is a physical function (PF) whose base FPGA region
(``<PF>/fpga_region/region<N>``) holds the FPGA management engine
``dfl-fme.<n>`` and the ports ``dfl-port.<m>``; a port released to a
virtual function (VF) sits in the VF's own region. Each function an
instance can take is one deployable of ``[intel_fpga_driver]
resource_class`` (``FPGA``): every VF that carries a port, and the PF
while ports remain on it. Its attach handle is that function.

Traits: ``CUSTOM_FPGA_<VENDOR>``, ``CUSTOM_FPGA_<VENDOR>_<PRODUCT>``,
``CUSTOM_FPGA_REGION_<VENDOR>_<PR interface id>`` (the ``compat_id`` of
the PR region the FME creates) and, for a programmed port,
``CUSTOM_FPGA_FUNCTION_ID_<VENDOR>_<afu_id>``; ids are the 32 hex digits
sysfs prints, upper-cased. The control path is the PF: ``program`` runs
``fpgaconf`` on it and re-reads ``afu_id`` afterwards.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import struct
import time

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.fpga import common
from cyborg.accelerator.drivers.fpga import intel_opts as intel_conf
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

GROUP = intel_conf.group.name
NAME = 'intel_fpga_driver'
INTEL = 0x8086
SILICOM = 0x1c2c
CLASS_ACCELERATOR = 0x1200
VENDORS = {INTEL: 'INTEL', SILICOM: 'SILICOM'}

# (vendor, device) -> product; the generic OFS id by subsystem device.
PRODUCTS = {
    (INTEL, 0x09c4): 'PAC_ARRIA10', (INTEL, 0x0b2b): 'PAC_D5005',
    (INTEL, 0x0b30): 'PAC_N3000', (INTEL, 0xbcbd): 'MCP',
    (INTEL, 0xbcc0): 'MCP', (INTEL, 0xbcce): 'OFS',
    (SILICOM, 0x1000): 'N5010', (SILICOM, 0x1001): 'N5011',
}
OFS_PRODUCTS = {0x1770: 'N6000', 0x1771: 'N6001', 0x17d4: 'C6100',
                0x138d: 'D5005'}

FME_ERRORS = ('fme_errors', 'pcie0_errors', 'pcie1_errors',
              'nonfatal_errors', 'catfatal_errors')
GBS_MAGIC = b'XeonFPGA\xb7GBSv001'
BUSY_TRIES = 3
PASSTHROUGH_DRIVER = 'vfio-pci'
BUSY_WAIT = 0.1
_REGION = re.compile(r'^region\d+$')


@dataclasses.dataclass
class Port:
    """A port of a card: the function it is attached through."""

    function: pci.PCIAddress
    name: str
    afu_id: str | None  # None: unreadable or no such file
    problem: str | None = None  # why afu_id could not be read


@dataclasses.dataclass
class Card:
    pf: pci.PCIDevice
    fme: str | None  # host path of dfl-fme.<n>
    interface_id: str | None
    ports: list[Port]


@dataclasses.dataclass(frozen=True)
class GbsInfo:
    interface_id: str | None
    afu_ids: tuple[str, ...]


def product(device: pci.PCIDevice) -> str | None:
    name = PRODUCTS.get((device.vendor_id, device.device_id))
    if name == 'OFS' and device.subsystem_device_id in OFS_PRODUCTS:
        return OFS_PRODUCTS[device.subsystem_device_id]
    return name


def read_gbs(path: str) -> GbsInfo:
    """The ids in a GBS file's metadata; a typed error for another file.

    Layout: 16-byte magic, u32 little-endian JSON length, JSON.
    """
    head = common.read_head(path, 1 << 20)
    if not head.startswith(GBS_MAGIC) or len(head) < 20:
        raise driver_errors.ProgramFailed(device=path,
                                          reason='not a GBS image (bad magic)')
    (length,) = struct.unpack('<I', head[16:20])
    try:
        meta = json.loads(head[20:20 + length].decode('utf-8'))
        image = meta['afu-image']
    except (ValueError, KeyError, TypeError):
        raise driver_errors.ProgramFailed(
            device=path, reason='the GBS metadata is not readable')
    clusters = image.get('accelerator-clusters') or []
    afu_ids = tuple(i for i in (common.normalize_id(
        c.get('accelerator-type-uuid')) for c in clusters if
        isinstance(c, dict)) if i)
    return GbsInfo(common.normalize_id(image.get('interface-uuid')),
                   afu_ids)


def parse_fpgainfo_fme(text: str) -> dict[pci.PCIAddress, str | None]:
    """``{address: PR interface id}`` of ``fpgainfo fme``."""
    found: dict[pci.PCIAddress, str | None] = {}
    current = None
    for line in text.splitlines():
        key, sep, value = line.partition(': ')
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == 'pcie s:b:d.f' and pci.is_valid_address(value.lower()):
            current = pci.parse_address(value.lower())
            found[current] = None
        elif key == 'pr interface id' and current is not None:
            found[current] = common.normalize_id(value)
    return found


class IntelFPGADriver(pci_base.PCIDriver):

    name = NAME
    options_module = intel_conf
    # The card's sysfs (afu_id, the FME) is not readable while fpgaconf
    # programs it, and the warn-once state is shared: one call at a time.
    serialized = True

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        options = self._options
        self._rc = self._resource_class()
        self._timeout = options.fpgaconf_timeout
        self._segment = options.fpgaconf_segment
        self._use_fpgainfo = options.use_fpgainfo
        self._fpgainfo_timeout = options.fpgainfo_timeout
        self._addresses = self._option_addresses()
        self._check_segments(self._check_addresses(
            self._addresses, self._is_card,
            'an Intel FPGA card\'s physical function'))
        # Ids last read per function, for functions on vfio-pci (given to
        # an instance or ready to be), whose regions the host cannot see.
        self._known_functions: dict[pci.PCIAddress, str | None] = {}
        self._known_regions: dict[pci.PCIAddress, str | None] = {}

    def _check_segments(self, addresses: list[pci.PCIAddress]) -> None:
        """Without ``--segment``, fpgaconf reaches segment 0000 only."""
        for address in addresses:
            if address.domain and not self._segment:
                raise self.config_error(
                    'fpgaconf_segment', 'false, but %s is in '
                    'segment %04x: fpgaconf could not tell it from the '
                    'card at %02x:%02x.%x of segment 0000' % (
                        address, address.domain, address.bus,
                        address.slot, address.function))

    # Discovery -------------------------------------------------------------

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        listed = self._fpgainfo()
        return [self._device(card, listed) for card in self._cards()]

    def _is_card(self, device: pci.PCIDevice) -> bool:
        return (not device.is_vf
                and (device.class_code >> 8) == CLASS_ACCELERATOR
                and ((device.vendor_id, device.device_id) in PRODUCTS
                     or self._base_region(device.address) is not None))

    def _cards(self) -> list[Card]:
        cards = []
        for vendor in sorted(VENDORS):
            for device in pci.list_devices(self._host, vendor=vendor,
                                           classes=(CLASS_ACCELERATOR,)):
                if self._addresses and device.address not in self._addresses:
                    continue
                if self._is_card(device):
                    cards.append(self._read_card(device))
        return cards

    def _base_region(self, address: pci.PCIAddress) -> str | None:
        """The region of a function that holds its FME or ports."""
        regions = pci.device_path(address, 'fpga_region')
        for name in sysfs.list_dir(self._host, regions):
            path = '%s/%s' % (regions, name)
            if _REGION.match(name) and any(
                    e.startswith(('dfl-fme.', 'dfl-port.'))
                    for e in sysfs.list_dir(self._host, path)):
                return path
        return None

    def _read_card(self, pf: pci.PCIDevice) -> Card:
        """The card's FME and ports. A function on vfio-pci shows no
        region: its port is taken as it was last read."""
        if pf.driver == PASSTHROUGH_DRIVER:
            return Card(pf, None, self._known_regions.get(pf.address),
                        [self._hidden_port(pf.address)])
        region = self._base_region(pf.address)
        entries = sysfs.list_dir(self._host, region) if region else []
        fmes = ['%s/%s' % (region, e) for e in entries
                if e.startswith('dfl-fme.')]
        fme = fmes[0] if fmes else None
        ports = [self._port(pf.address, '%s/%s' % (region, e))
                 for e in entries if e.startswith('dfl-port.')]
        for vf in passthrough.read_vfs(self._host, pf.address):
            ports += self._vf_ports(vf)
        interface_id = self._interface_id(fme)
        if fme is not None:
            self._known_regions[pf.address] = interface_id
        return Card(pf, fme, interface_id, ports)

    def _vf_ports(self, vf: pci.PCIDevice) -> list[Port]:
        """Each VF carries one port, seen while the VF is on dfl-pci;
        an unbound VF or one on vfio-pci is offered with its last known
        function, a VF on another driver is the host's."""
        region = self._base_region(vf.address)
        if region is None:
            return ([self._hidden_port(vf.address)]
                    if vf.driver in (None, PASSTHROUGH_DRIVER) else [])
        return [self._port(vf.address, '%s/%s' % (region, e))
                for e in sysfs.list_dir(self._host, region)
                if e.startswith('dfl-port.')]

    def _hidden_port(self, function: pci.PCIAddress) -> Port:
        return Port(function, PASSTHROUGH_DRIVER,
                    self._known_functions.get(function))

    def _interface_id(self, fme: str | None) -> str | None:
        """The PR interface id: ``compat_id`` of the FME's PR region
        (DFL), or ``pr/interface_id`` (older layouts)."""
        if fme is None:
            return None
        for name in sysfs.list_dir(self._host, fme):
            if not name.startswith('dfl-fme-region.'):
                continue
            regions = '%s/%s/fpga_region' % (fme, name)
            for region in sysfs.list_dir(self._host, regions):
                found = common.normalize_id(sysfs.read_text(
                    self._host, '%s/%s/compat_id' % (regions, region)))
                if found:
                    return found
        return common.normalize_id(sysfs.read_text(
            self._host, fme + '/pr/interface_id'))

    def _port(self, function: pci.PCIAddress, path: str) -> Port:
        """``afu_id`` fails with EBUSY while the port is disabled (during
        partial reconfiguration): retried, never taken as "no AFU"."""
        name = os.path.basename(path)
        for attempt in range(BUSY_TRIES):
            try:
                text = sysfs.read_text(self._host, path + '/afu_id')
            except errors.SysfsReadError as exc:
                if exc.errno != errno.EBUSY:
                    return Port(function, name, None, problem=str(exc))
                if attempt + 1 < BUSY_TRIES:
                    time.sleep(BUSY_WAIT)
                continue
            afu_id = common.normalize_id(text)
            self._known_functions[function] = afu_id
            return Port(function, name, afu_id)
        return Port(function, name, None,
                    problem='%s of %s is busy' % (name, function))

    def _device(self, card: Card,
                listed: dict[pci.PCIAddress, str | None] | None
                ) -> device_tree.Device:
        vendor = VENDORS[card.pf.vendor_id]
        name = product(card.pf)
        traits = common.vendor_traits(vendor, name)
        if card.interface_id:
            traits.append(common.region_trait(vendor, card.interface_id))
        deployables = [self._deployable(function, ports, traits, card)
                       for function, ports in self._by_function(card)]
        reasons = self._reasons(card, listed)
        self._log_health(card.pf.address, reasons)
        device = passthrough.make_device(
            card.pf, 'FPGA', '%s FPGA %s' % (vendor.title(), name or
                                             '%04x' % card.pf.device_id),
            deployables[0], healthy=not reasons)
        device.deployables = deployables
        device.vendor_board_info = self._board(card)
        return device

    @staticmethod
    def _by_function(card: Card) -> list[tuple[pci.PCIAddress, list[Port]]]:
        """Ports grouped by the function they are attached through; a
        card without readable ports is offered as its PF."""
        grouped: dict[pci.PCIAddress, list[Port]] = {}
        for port in card.ports:
            grouped.setdefault(port.function, []).append(port)
        return sorted(grouped.items()) or [(card.pf.address, [])]

    def _deployable(self, function: pci.PCIAddress, ports: list[Port],
                    traits: list[str], card: Card) -> device_tree.Deployable:
        vendor = VENDORS[card.pf.vendor_id]
        functions = sorted({p.afu_id for p in ports
                            if p.afu_id and not common.is_blank(p.afu_id)})
        attributes = {}
        if card.interface_id:
            attributes['region_id'] = card.interface_id
        if functions:
            attributes['function_id'] = ','.join(functions)
        return device_tree.Deployable(
            name=passthrough.deployable_name(function), num_accelerators=1,
            resource_class=self._rc,
            traits=traits + [common.function_trait(vendor, f)
                             for f in functions],
            attach_handles=[passthrough.pci_handle(function)],
            attributes=attributes, driver_name='intel',
            # Programmed at bind (or through the API) when asked: the
            # conductor's programming path, not the agent's prepare.
            preparation=device_tree.Preparation.PROGRAM)

    def _board(self, card: Card) -> dict[str, str]:
        info = {'ports': ','.join(sorted('%s %s' % (p.function, p.name)
                                         for p in card.ports))}
        if card.fme:
            for name in ('bitstream_id', 'ports_num'):
                text = sysfs.read_text(self._host, '%s/%s' % (card.fme, name))
                if text is not None:
                    info[name] = text
        return info

    # Health ----------------------------------------------------------------

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        listed = self._fpgainfo()
        found = {str(c.pf.address): c for c in self._cards()}
        states = {}
        for device in devices:
            card = found.get(device.address)
            reasons = (['the device is gone'] if card is None
                       else self._reasons(card, listed))
            self._log_health(pci.parse_address(device.address), reasons)
            states[device.address] = (
                device_tree.Health.UNHEALTHY if reasons
                else device_tree.Health.HEALTHY)
        return states

    def _reasons(self, card: Card,
                 listed: dict[pci.PCIAddress, str | None] | None
                 ) -> list[str]:
        reasons = []
        if card.pf.driver is None:
            reasons.append('no driver bound')
        elif card.fme is None and card.pf.driver != PASSTHROUGH_DRIVER:
            reasons.append('no FME under %s' % card.pf.driver)
        else:
            reasons += self._fme_errors(card.fme)
        reasons += [p.problem for p in card.ports if p.problem]
        if (listed is not None and card.fme is not None
                and card.pf.driver != PASSTHROUGH_DRIVER):
            reasons += self._fpgainfo_reasons(card, listed)
        return reasons

    def _fme_errors(self, fme: str | None) -> list[str]:
        reasons = []
        for name in FME_ERRORS:
            try:
                value = sysfs.read_int(self._host,
                                       '%s/errors/%s' % (fme, name), 16)
            except errors.HostError as exc:
                reasons.append(str(exc))
                continue
            if value:
                reasons.append('%s is 0x%x' % (name, value))
        return reasons

    @staticmethod
    def _fpgainfo_reasons(card: Card,
                          listed: dict[pci.PCIAddress, str | None]
                          ) -> list[str]:
        if card.pf.address not in listed:
            return ['fpgainfo does not list it']
        reported = listed[card.pf.address]
        if reported and card.interface_id and reported != card.interface_id:
            return ['fpgainfo reports PR interface %s, sysfs %s'
                    % (reported, card.interface_id)]
        return []

    def _fpgainfo(self) -> dict[pci.PCIAddress, str | None] | None:
        """The cards ``fpgainfo fme`` lists; ``None`` without the tool."""
        if not self._use_fpgainfo:
            return None
        try:
            result = self._runner.run(
                ['fpgainfo', 'fme'], timeout=self._fpgainfo_timeout).check()
        except errors.ToolNotAvailable:
            return None
        except errors.ToolError as exc:
            if self._once.first('fpgainfo'):
                LOG.warning('intel_fpga_driver: fpgainfo cannot be used '
                            '(%s); health comes from sysfs only', exc)
            return None
        return parse_fpgainfo_fme(result.stdout)

    def _log_health(self, address: pci.PCIAddress,
                    reasons: list[str]) -> None:
        if reasons and self._once.first(('unhealthy', address,
                                         tuple(reasons))):
            LOG.warning('intel_fpga_driver: device %s is unhealthy: %s',
                        address, '; '.join(reasons))

    # Programming -----------------------------------------------------------

    def program(self, controlpath: device_tree.ControlPathID,
                image_path: str) -> str:
        """Program the GBS image through the card's PF with ``fpgaconf``;
        return the function (AFU) id its port then reports.

        Raises :class:`~cyborg.accelerator.drivers.errors.ProgramFailed`
        when the card is not here, the image does not fit its PR
        interface, the tool is missing, fails or hangs, or the port does
        not show the image's function afterwards.
        """
        address = common.controlpath_address(controlpath, NAME)
        card = self._card_at(address)
        gbs = read_gbs(image_path)
        if (gbs.interface_id and card.interface_id
                and gbs.interface_id != card.interface_id):
            raise driver_errors.ProgramFailed(
                device=str(address), reason='the image is built for PR '
                'interface %s, the card has %s' % (gbs.interface_id,
                                                   card.interface_id))
        self._run_fpgaconf(address, image_path)
        afu_id = self._function_after(address, gbs)
        LOG.info('intel_fpga_driver: programmed %s on %s; function id %s',
                 image_path, address, afu_id)
        return afu_id

    def _card_at(self, address: pci.PCIAddress) -> Card:
        try:
            device = pci.read_device(self._host, address)
        except errors.DeviceNotFound:
            raise driver_errors.ProgramFailed(device=str(address),
                                              reason='no such device')
        if not self._is_card(device):
            raise driver_errors.ProgramFailed(
                device=str(address), reason='not an Intel FPGA card\'s '
                'physical function')
        card = self._read_card(device)
        if card.fme is None:
            raise driver_errors.ProgramFailed(
                device=str(address), reason='no FME (driver %s)'
                % (device.driver or 'none'))
        return card

    def fpgaconf_argv(self, address: pci.PCIAddress,
                      image_path: str) -> list[str]:
        argv = ['fpgaconf']
        if self._segment:
            argv += ['--segment', '0x%04x' % address.domain]
        elif address.domain:
            raise driver_errors.ProgramFailed(
                device=str(address), reason='[%s] fpgaconf_segment is '
                'false: fpgaconf cannot address segment %04x'
                % (GROUP, address.domain))
        return argv + ['--bus', '0x%02x' % address.bus,
                       '--device', '0x%02x' % address.slot,
                       '--function', '0x%x' % address.function, image_path]

    def _run_fpgaconf(self, address: pci.PCIAddress,
                      image_path: str) -> None:
        argv = self.fpgaconf_argv(address, image_path)
        try:
            result = self._runner.run(argv, timeout=self._timeout)
        except errors.ToolError as exc:
            raise driver_errors.ProgramFailed(device=str(address),
                                              reason=common.tool_message(exc))
        if not result.ok:
            failed = errors.ToolFailed(argv, result.returncode,
                                       result.stderr)
            raise driver_errors.ProgramFailed(
                device=str(address),
                reason=common.tool_message(failed, result.stdout))

    def _function_after(self, address: pci.PCIAddress, gbs: GbsInfo) -> str:
        try:
            ports = self._read_card(pci.read_device(self._host,
                                                    address)).ports
        except errors.HostError as exc:
            raise driver_errors.ProgramFailed(
                device=str(address), reason='fpgaconf succeeded but the '
                'card cannot be read: %s' % exc)
        ids = [p.afu_id for p in ports
               if p.afu_id and not common.is_blank(p.afu_id)]
        expected = [i for i in ids if i in gbs.afu_ids]
        if expected:
            return expected[0]
        if not gbs.afu_ids and ids:
            return ids[0]
        raise driver_errors.ProgramFailed(
            device=str(address), reason='fpgaconf succeeded but no port '
            'reports the image\'s function (%s); afu_id is %s' % (
                ', '.join(gbs.afu_ids) or 'none in the metadata',
                ', '.join(p.afu_id or 'unreadable' for p in ports)
                or 'missing'))
