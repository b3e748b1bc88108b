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

"""Intel QuickAssist (QAT): one deployable per physical function.

Each QAT physical function (class ``0x0b40``, vendor ``0x8086``) with
virtual functions is one device whose deployable is the PF (a resource
provider with no inventory) with one child, ``<PF>_vfs``, of
``[intel_qat_driver] resource_class``, as Nova puts a PF's VFs on the
PF's provider. The child's attach handles are the VFs an instance can
take:
unbound ones (gen4 VFs have no host driver; libvirt binds them to
vfio-pci) and those on vfio-pci or QAT's VFIO variant driver. A VF on a
host driver (``c6xxvf``...) is in use by the host and left out.

Traits: ``CUSTOM_QAT_<GENERATION>`` (``CUSTOM_QAT_4XXX``,
``CUSTOM_QAT_C62X``...) and one per service the PF runs, from gen4's
``qat/cfg_services`` (``sym;asym`` gives ``CUSTOM_QAT_SYM`` and
``CUSTOM_QAT_ASYM``). Health: ``qat/state`` (``up``), and the state
``adf_ctl status`` prints when the out-of-tree tool is installed; a PF
without its driver is unhealthy.

A VF is attachable as discovered (preparation ``none``): libvirt binds
it to vfio-pci. Discovery only reads: VFs are created by the operator
(``sriov_numvfs``), services set with ``qat/cfg_services``.
"""

from __future__ import annotations

import dataclasses
import re

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.qat import opts as qat_conf
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names

LOG = logging.getLogger(__name__)

GROUP = qat_conf.group.name
INTEL = 0x8086
CLASS_COPROCESSOR = 0x0b40


@dataclasses.dataclass(frozen=True)
class Generation:
    name: str  # as the trait spells it
    pf_id: int
    vf_id: int
    model: str  # as Intel spells it


GENERATIONS = {g.pf_id: g for g in (
    Generation('DH895XCC', 0x0435, 0x0443, 'DH895xCC'),
    Generation('C62X', 0x37c8, 0x37c9, 'C62x'),
    Generation('C3XXX', 0x19e2, 0x19e3, 'C3xxx'),
    Generation('4XXX', 0x4940, 0x4941, '4xxx'),
    Generation('401XX', 0x4942, 0x4943, '401xx'),
    Generation('402XX', 0x4944, 0x4945, '402xx'),
    Generation('420XX', 0x4946, 0x4947, '420xx'),
)}

# qat_dev0 - type: c6xx,  inst_id: 0,  node_id: 0,  bsf: 0000:3b:00.0,
#   #accel: 5 #engines: 10 state: up
_ADF_LINE = re.compile(r'\bbsf:\s*(?P<bsf>\S+?),.*\bstate:\s*(?P<state>\w+)')


def parse_adf_ctl_status(text: str) -> dict[pci.PCIAddress, str]:
    """``{address: state}`` of ``adf_ctl status`` (with or without the
    domain in ``bsf``); lines it cannot read are skipped."""
    states = {}
    for line in text.splitlines():
        match = _ADF_LINE.search(line)
        if match is None or not pci.is_valid_address(match.group('bsf')):
            continue
        states[pci.parse_address(match.group('bsf'))] = match.group('state')
    return states


def service_traits(cfg_services: str | None) -> list[str]:
    """``sym;asym`` -> ``CUSTOM_QAT_SYM``, ``CUSTOM_QAT_ASYM``."""
    if not cfg_services:
        return []
    return sorted({resource_names.custom_name('QAT_' + service)
                   for service in re.split(r'[;,\s]+', cfg_services)
                   if service})


class IntelQATDriver(pci_base.PCIDriver):

    name = 'intel_qat_driver'
    options_module = qat_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        options = self._options
        self._use_adf_ctl = options.use_adf_ctl
        self._timeout = options.adf_ctl_timeout
        self._vf_drivers = frozenset(options.vf_drivers)
        self._rc = self._resource_class()
        self._ids = self._hex_ids(known=GENERATIONS,
                                  what='a QAT physical function id')
        self._addresses = self._option_addresses()

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        states = self._adf_ctl_states()
        devices = []
        for pf in self._physical_functions():
            device = self._device(pf, states.get(pf.address))
            if device is not None:
                devices.append(device)
        return devices

    def _physical_functions(self) -> list[pci.PCIDevice]:
        found = pci.list_devices(self._host, vendor=INTEL,
                                 classes=(CLASS_COPROCESSOR,))
        return [d for d in found if d.device_id in self._ids
                and not d.is_vf
                and (not self._addresses or d.address in self._addresses)]

    def _adf_ctl_states(self) -> dict[pci.PCIAddress, str]:
        if not self._use_adf_ctl:
            return {}
        try:
            result = self._runner.run(['adf_ctl', 'status'],
                                      timeout=self._timeout).check()
        except errors.ToolNotAvailable:
            return {}
        except errors.ToolError as exc:
            if self._once.first('adf_ctl'):
                LOG.warning('adf_ctl status failed; QuickAssist health comes '
                            'from sysfs only: %s', exc)
            return {}
        return parse_adf_ctl_status(result.stdout)

    def _device(self, pf: pci.PCIDevice,
                adf_state: str | None) -> device_tree.Device | None:
        generation = GENERATIONS[pf.device_id]
        vfs = passthrough.read_vfs(self._host, pf.address)
        usable = [vf for vf in vfs if self._attachable(vf)]
        if not usable:
            if self._once.first(('no-vfs', pf.address)):
                LOG.info('QuickAssist device %s has no virtual function an '
                         'instance can use (%d VFs); it is not reported',
                         pf.address, len(vfs))
            return None
        qat_dir = pci.device_path(pf.address, 'qat')
        traits = ['CUSTOM_QAT_' + generation.name] + service_traits(
            sysfs.read_text(self._host, qat_dir + '/cfg_services'))
        deployable = passthrough.pf_with_vfs(
            pf, self._rc, ['CUSTOM_QAT_' + generation.name], traits,
            [passthrough.pci_handle(vf.address) for vf in usable],
            'intel', device_tree.Preparation.NONE)
        healthy = self._healthy(pf, sysfs.read_text(
            self._host, qat_dir + '/state'), adf_state)
        return passthrough.make_device(pf, 'QAT', 'QAT ' + generation.model,
                                       deployable, healthy)

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, dict[str, int | float]]:
        """Per PF: VFs enabled, VFs on one of ``vf_drivers`` (vfio-pci:
        given to instances) and VFs on a host driver (``c6xxvf``)."""
        return passthrough.vf_utilization(self._host, devices,
                                          self._vf_drivers)

    def _attachable(self, vf: pci.PCIDevice) -> bool:
        if vf.driver is None or vf.driver in self._vf_drivers:
            return True
        if self._once.first(('host-vf', vf.address)):
            LOG.info('QuickAssist virtual function %s is bound to the host '
                     'driver %s; it is not offered to instances', vf.address,
                     vf.driver)
        return False

    def _healthy(self, pf: pci.PCIDevice, state: str | None,
                 adf_state: str | None) -> bool:
        problems = []
        if pf.driver is None:
            problems.append('no driver bound')
        if state is not None and state != 'up':
            problems.append('qat/state is %s' % state)
        if adf_state is not None and adf_state != 'up':
            problems.append('adf_ctl reports %s' % adf_state)
        if problems and self._once.first(('unhealthy', pf.address)):
            LOG.warning('QuickAssist device %s is unhealthy: %s', pf.address,
                        '; '.join(problems))
        return not problems
