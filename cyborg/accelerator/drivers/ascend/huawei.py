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

"""Huawei Ascend NPUs (vendor ``19e5``, class "Processing
accelerators"), passed through whole.

Each NPU function is one device (type ``AICHIP``) with one deployable of
``[huawei_ascend_driver] resource_class`` (``CUSTOM_NPU``), the function
as its ``PCI`` attach handle, and the traits ``CUSTOM_NPU_ASCEND`` and
``CUSTOM_NPU_ASCEND_<MODEL>`` (``310``, ``310P``, ``910``, ``910B``,
``910_93``).

Health: an NPU that is gone is unhealthy; so is one ``npu-smi`` reports
in ``Alarm`` or ``Critical`` health, when the tool is installed (it sees
the NPUs on Huawei's host driver, not those on vfio-pci). ``npu-smi``
numbers NPUs in its own order, so its NPU ids are mapped to PCI
addresses by their ``PCIe Bus Info``.
"""

from __future__ import annotations

import math

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.ascend import opts as ascend_conf
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)

GROUP = ascend_conf.group.name
HUAWEI = 0x19e5
CLASS_ACCELERATOR = 0x1200
MODELS = {0xd100: '310', 0xd500: '310P', 0xd801: '910', 0xd802: '910B',
          0xd803: '910_93'}
UNHEALTHY = ('alarm', 'critical')


def parse_key_values(text: str) -> list[tuple[str, str]]:
    """``Key : value`` lines of ``npu-smi info`` in order."""
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition(': ')
        if sep and key.strip():
            pairs.append((key.strip().lower(), value.strip()))
    return pairs


def npu_ids(text: str) -> list[int]:
    """The NPU ids ``npu-smi info -l`` lists."""
    return [int(v) for k, v in parse_key_values(text)
            if k == 'npu id' and v.isdigit()]


def bus_info(text: str) -> pci.PCIAddress | None:
    for key, value in parse_key_values(text):
        if key == 'pcie bus info' and pci.is_valid_address(value.lower()):
            return pci.parse_address(value.lower())
    return None


def _number(value: str | None) -> float | None:
    """A non-negative finite number; None for ``NA`` and the like."""
    try:
        number = float(value or '')
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


#: Device memory keys of ``npu-smi info -t usages``, (capacity, usage
#: rate), in order of preference: a board that reports HBM (910-class)
#: has its device memory there (its ``Memory`` is the board's DDR).
MEMORY_KEYS = (('hbm capacity(mb)', 'hbm usage rate(%)'),
               ('memory capacity(mb)', 'memory usage rate(%)'))


def usage_metrics(text: str) -> utilization_mod.Metrics:
    """``gpu_percent`` (``Aicore Usage Rate(%)``), ``memory_total_mib``
    and ``memory_used_mib`` (capacity times usage rate) of ``npu-smi info
    -t usages`` output; a value that is ``NA`` or not a number is left
    out."""
    values: dict[str, str] = {}
    for key, value in parse_key_values(text):
        values.setdefault(key, value)
    metrics: utilization_mod.Metrics = {}
    busy = _number(values.get('aicore usage rate(%)'))
    if busy is not None and busy <= 100:
        metrics[utilization_mod.GPU_PERCENT.name] = busy
    for capacity_key, rate_key in MEMORY_KEYS:
        if capacity_key not in values:
            continue
        capacity = _number(values[capacity_key])
        if capacity is not None:
            metrics[utilization_mod.MEMORY_TOTAL_MIB.name] = round(capacity)
            rate = _number(values.get(rate_key))
            if rate is not None and rate <= 100:
                metrics[utilization_mod.MEMORY_USED_MIB.name] = round(
                    capacity * rate / 100)
        break
    return metrics


def health_value(text: str) -> str | None:
    for key, value in parse_key_values(text):
        if 'health' in key:
            return value
    return None


class HuaweiAscendDriver(pci_base.PCIDriver):

    name = 'huawei_ascend_driver'
    options_module = ascend_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        options = self._options
        self._rc = self._resource_class()
        self._ids = self._hex_ids(known=MODELS, what='an Ascend NPU id')
        self._addresses = self._option_addresses()
        self._use_npu_smi = options.use_npu_smi
        self._timeout = options.npu_smi_timeout
        #: ``{NPU id: address}`` as the last discovery's npu-smi mapped them.
        self._npu_map: dict[int, pci.PCIAddress] = {}

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        states = self._npu_smi_health()
        return [self._device(npu, states.get(npu.address))
                for npu in self._npus()]

    def _npus(self) -> list[pci.PCIDevice]:
        found = pci.list_devices(self._host, vendor=HUAWEI,
                                 classes=(CLASS_ACCELERATOR,))
        return [d for d in found if d.device_id in self._ids
                and (not self._addresses or d.address in self._addresses)]

    def _device(self, npu: pci.PCIDevice,
                state: str | None) -> device_tree.Device:
        model = MODELS[npu.device_id]
        deployable = device_tree.Deployable(
            name=passthrough.deployable_name(npu.address),
            num_accelerators=1, resource_class=self._rc,
            traits=['CUSTOM_NPU_ASCEND', 'CUSTOM_NPU_ASCEND_' + model],
            attach_handles=[passthrough.pci_handle(npu.address)],
            driver_name='huawei',
            # Passed through whole: attachable as discovered.
            preparation=device_tree.Preparation.NONE)
        healthy = state is None or state.lower() not in UNHEALTHY
        if not healthy and self._once.first(('unhealthy', npu.address,
                                             state)):
            LOG.warning('huawei_ascend_driver: device %s is unhealthy: '
                        'npu-smi reports %s', npu.address, state)
        device = passthrough.make_device(
            npu, 'AICHIP', 'Ascend ' + model.replace('_', ' '), deployable,
            healthy)
        if state is not None:
            device.vendor_board_info = {'npu_smi_health': state}
        return device

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        current = {str(d.address): d.health for d in self.discover()}
        return {d.address: current.get(d.address,
                                       device_tree.Health.UNHEALTHY)
                for d in devices}

    # npu-smi -----------------------------------------------------------------

    def _npu_smi_health(self) -> dict[pci.PCIAddress, str]:
        """``{address: health}`` of the NPUs ``npu-smi`` sees; keeps
        their ``{NPU id: address}`` map for :meth:`utilization`."""
        self._npu_map = {}
        if not self._use_npu_smi:
            return {}
        try:
            for npu in npu_ids(self._npu_smi('info', '-l')):
                address = bus_info(self._npu_smi(
                    'info', '-t', 'board', '-i', str(npu)))
                if address is not None:
                    self._npu_map[npu] = address
            states = {}
            for npu, address in self._npu_map.items():
                value = health_value(self._npu_smi(
                    'info', '-t', 'health', '-i', str(npu)))
                if value is not None:
                    states[address] = value
            return states
        except errors.ToolNotAvailable:
            return {}
        except errors.ToolError as exc:
            if self._once.first('npu-smi'):
                LOG.warning('huawei_ascend_driver: npu-smi cannot be used '
                            '(%s); health comes from sysfs only', exc)
            return {}

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, utilization_mod.Metrics]:
        """AI core busy percentage and device memory from ``npu-smi info
        -t usages -i <id>`` for the NPUs the last discovery mapped (by
        ``PCIe Bus Info``) that are still there; an NPU whose reading
        fails or says ``NA`` has no metric (or not that one)."""
        wanted = {d.address for d in devices}
        found = {}
        for npu, address in sorted(self._npu_map.items()):
            key = str(address)
            if key not in wanted or not pci.exists(self._host, address):
                continue
            try:
                text = self._npu_smi('info', '-t', 'usages', '-i', str(npu))
            except errors.ToolError as exc:
                LOG.debug('huawei_ascend_driver: no usages of NPU %d: %s',
                          npu, exc)
                continue
            metrics = usage_metrics(text)
            if metrics:
                found[key] = metrics
        return found

    def _npu_smi(self, *args: str) -> str:
        return self._runner.run(['npu-smi', *args],
                                timeout=self._timeout).check().stdout
