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

"""Xilinx/AMD Alveo cards under XRT.

A card has two physical functions on one bus:slot: the management
function (``.0``, driver ``xclmgmt``) stays on the host and is the
control path; the user function (``.1``, driver ``xocl`` on the host,
``vfio-pci`` in use) is what an instance gets, so it is the one attach
handle. A card whose two functions share an IOMMU group cannot give the
user function alone and is not reported.

Traits: ``CUSTOM_FPGA_XILINX``, ``CUSTOM_FPGA_XILINX_<CARD>`` and
``CUSTOM_FPGA_REGION_XILINX_<interface uuid>`` from the management
function's ``interface_uuids`` (the shell's partition interface), else
its ``logic_uuids``. ``program`` loads an xclbin into the user
partition with ``xbutil program --device <user> --user <file>``.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.fpga import common
from cyborg.accelerator.drivers.fpga import xilinx_opts as xilinx_conf
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

GROUP = xilinx_conf.group.name
NAME = 'xilinx_fpga_driver'
XILINX = 0x10ee
CLASS_ACCELERATOR = 0x1200
# management function id -> (card, user function id)
CARDS = {0x5000: ('U200', 0x5001), 0x5004: ('U250', 0x5005),
         0x500c: ('U280', 0x500d), 0x5008: ('U280', 0x5009),
         0x5020: ('U50', 0x5021), 0x505c: ('U55C', 0x505d)}
XCLBIN_MAGIC = b'xclbin2\x00'


class XilinxFPGADriver(pci_base.PCIDriver):

    name = NAME
    options_module = xilinx_conf
    # The user function cannot be read while xbutil programs it: one
    # call at a time.
    serialized = True

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        options = self._options
        self._rc = self._resource_class()
        self._user_drivers = frozenset(options.user_drivers)
        self._timeout = options.xbutil_timeout
        self._addresses = self._option_addresses()
        self._check_addresses(self._addresses, self._is_mgmt,
                              'the management function of an Alveo card')

    @staticmethod
    def _is_mgmt(device: pci.PCIDevice) -> bool:
        return device.vendor_id == XILINX and device.device_id in CARDS

    # Discovery -------------------------------------------------------------

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        found = pci.list_devices(self._host, vendor=XILINX,
                                 classes=(CLASS_ACCELERATOR,))
        by_address = {d.address: d for d in found}
        devices = []
        for mgmt in found:
            if not self._is_mgmt(mgmt) or (
                    self._addresses and mgmt.address not in self._addresses):
                continue
            user = self._user_of(mgmt, by_address)
            if user is not None and self._offerable(mgmt, user):
                devices.append(self._device(mgmt, user))
        return devices

    def _user_of(self, mgmt: pci.PCIDevice,
                 by_address: dict[pci.PCIAddress, pci.PCIDevice]
                 ) -> pci.PCIDevice | None:
        """The user function of the card: same bus:slot, the user id."""
        user_id = CARDS[mgmt.device_id][1]
        for address, device in sorted(by_address.items()):
            if (address.domain, address.bus, address.slot) == (
                    mgmt.address.domain, mgmt.address.bus,
                    mgmt.address.slot) and device.device_id == user_id:
                return device
        if self._once.first(('no-user', mgmt.address)):
            LOG.warning('xilinx_fpga_driver: card %s has no user function '
                        'on its slot; it is not reported', mgmt.address)
        return None

    def _offerable(self, mgmt: pci.PCIDevice, user: pci.PCIDevice) -> bool:
        if user.driver is not None and user.driver not in self._user_drivers:
            if self._once.first(('user-driver', user.address, user.driver)):
                LOG.warning('xilinx_fpga_driver: user function %s is bound '
                            'to %s, not to one of [xilinx_fpga_driver] '
                            'user_drivers; it is not reported', user.address,
                            user.driver)
            return False
        if (mgmt.iommu_group is not None
                and mgmt.iommu_group == user.iommu_group):
            if self._once.first(('group', mgmt.address)):
                LOG.warning('xilinx_fpga_driver: user function %s shares '
                            'its iommu_group with the management function '
                            '%s; it is not reported', user.address,
                            mgmt.address)
            return False
        return True

    def _shell_id(self, mgmt: pci.PCIAddress) -> str | None:
        for name in ('interface_uuids', 'logic_uuids'):
            for line in sysfs.read_lines(
                    self._host, pci.device_path(mgmt, name)) or []:
                found = common.normalize_id(line)
                if found:
                    return found
        return None

    def _device(self, mgmt: pci.PCIDevice,
                user: pci.PCIDevice) -> device_tree.Device:
        card = CARDS[mgmt.device_id][0]
        traits = common.vendor_traits('XILINX', card)
        shell = self._shell_id(mgmt.address)
        attributes = {}
        if shell:
            traits.append(common.region_trait('XILINX', shell))
            attributes['region_id'] = shell
        deployable = device_tree.Deployable(
            name=passthrough.deployable_name(user.address),
            num_accelerators=1, resource_class=self._rc, traits=traits,
            attach_handles=[passthrough.pci_handle(user.address)],
            attributes=attributes, driver_name='xilinx',
            preparation=device_tree.Preparation.PROGRAM)
        reasons = self._reasons(mgmt)
        device = passthrough.make_device(mgmt, 'FPGA', 'Xilinx Alveo ' + card,
                                         deployable, healthy=not reasons)
        board = sysfs.read_text(self._host, pci.device_path(
            mgmt.address, 'board_name'))
        device.vendor_board_info = {'user_function': str(user.address),
                                    'board_name': board or ''}
        return device

    # Health ----------------------------------------------------------------

    def _reasons(self, mgmt: pci.PCIDevice) -> list[str]:
        reasons = []
        if mgmt.driver != 'xclmgmt':
            reasons.append('management function on %s, not xclmgmt'
                           % (mgmt.driver or 'no driver'))
        try:
            ready = sysfs.read_int(self._host, pci.device_path(
                mgmt.address, 'ready'), 16)
        except errors.HostError as exc:
            reasons.append(str(exc))
        else:
            if ready == 0:
                reasons.append('the shell is not ready')
        if reasons and self._once.first(('unhealthy', mgmt.address,
                                         tuple(reasons))):
            LOG.warning('xilinx_fpga_driver: device %s is unhealthy: %s',
                        mgmt.address, '; '.join(reasons))
        return reasons

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        states = {}
        for device in devices:
            try:
                mgmt = pci.read_device(self._host, device.address)
                reasons = self._reasons(mgmt)
            except errors.DeviceNotFound:
                reasons = ['gone']
            board = device.vendor_board_info
            user = (board.get('user_function')
                    if isinstance(board, dict) else None)
            if user and not pci.exists(self._host, user):
                reasons.append('user function %s is gone' % user)
            states[device.address] = (
                device_tree.Health.UNHEALTHY if reasons
                else device_tree.Health.HEALTHY)
        return states

    # Programming -----------------------------------------------------------

    def program(self, controlpath: device_tree.ControlPathID,
                image_path: str) -> None:
        """Load an xclbin into the card's user partition.

        ``controlpath`` is the management function; ``xbutil`` works on
        the user function, which must be on ``xocl`` (on the host, not
        given to an instance). Failures raise
        :class:`~cyborg.accelerator.drivers.errors.ProgramFailed` with the
        tool's message.
        """
        address = common.controlpath_address(controlpath, NAME)
        user = self._user_for_program(address)
        if not common.read_head(image_path, 8).startswith(XCLBIN_MAGIC):
            raise driver_errors.ProgramFailed(
                device=str(address), reason='not an xclbin (bad magic)')
        argv = ['xbutil', 'program', '--device', str(user.address),
                '--user', image_path]
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
        LOG.info('xilinx_fpga_driver: loaded %s into %s', image_path,
                 user.address)

    def _user_for_program(self, address: pci.PCIAddress) -> pci.PCIDevice:
        try:
            mgmt = pci.read_device(self._host, address)
        except errors.DeviceNotFound:
            raise driver_errors.ProgramFailed(device=str(address),
                                              reason='no such device')
        if not self._is_mgmt(mgmt):
            raise driver_errors.ProgramFailed(
                device=str(address), reason='not the management function '
                'of an Alveo card')
        found = pci.list_devices(self._host, vendor=XILINX,
                                 classes=(CLASS_ACCELERATOR,))
        user = self._user_of(mgmt, {d.address: d for d in found})
        if user is None:
            raise driver_errors.ProgramFailed(device=str(address),
                                              reason='no user function')
        if user.driver != 'xocl':
            raise driver_errors.ProgramFailed(
                device=str(address), reason='user function %s is on %s; '
                'xbutil loads xclbins through xocl' % (
                    user.address, user.driver or 'no driver'))
        return user
