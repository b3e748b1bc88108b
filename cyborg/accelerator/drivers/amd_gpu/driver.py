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

"""amd_gpu_driver: AMD GPUs for passthrough and MxGPU virtual functions.

Every AMD GPU (vendor ``0x1002``, class ``0x0300``, ``0x0302`` or
``0x0380``, never a virtual function) under ``[agent] host_root`` is one
device:

* without virtual functions: one ``PGPU`` deployable whose PCI handle is
  the GPU, reported while it is unbound or bound to one of ``[amd_gpu]
  passthrough_drivers`` and no other function of its IOMMU group is held
  by the host;
* with virtual functions (MxGPU: AMD's GIM host driver created them):
  the GPU's deployable (``PGPU``, no inventory) with one child ``VGPU``
  deployable whose PCI handles are the VFs that are unbound or bound to
  one of ``[amd_gpu] vf_drivers``. There is no mdev.

Nothing needs preparing: libvirt attaches the GPU or the VF.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.amd_gpu import opts as amd_conf
from cyborg.accelerator.drivers.passthrough import deployable_name
from cyborg.accelerator.drivers.passthrough import trait
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import resource_names
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)

AMD = 0x1002
# VGA, 3D and "Display controller" (Instinct accelerators).
GPU_CLASSES = passthrough.GPU_CLASSES + (0x0380,)
OWNER_TRAIT = resource_names.OWNER_TRAIT
VENDOR_TRAIT = 'CUSTOM_GPU_AMD'
MODE_PASSTHROUGH = 'passthrough'
MODE_MXGPU = 'mxgpu'
MIB = 1024 * 1024
# Names of the boards the hardware notes list (pci.ids spelling).
MODELS = {
    0x6929: 'FirePro S7150', 0x6860: 'Radeon Instinct MI25',
    0x7362: 'Radeon Pro V520', 0x738c: 'Instinct MI100',
    0x740f: 'Instinct MI210',
}


class AmdGpuDriver(pci_base.PCIDriver):

    name = 'amd_gpu_driver'
    options_module = amd_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)

    def _gpus(self) -> list[pci.PCIDevice]:
        return [d for d in pci.list_devices(self._host, vendor=AMD,
                                            classes=GPU_CLASSES)
                if not d.is_vf]

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        devices = []
        for gpu in self._gpus():
            vfs = sriov.vfs(self._host, gpu.address)
            if vfs:
                deployables = self._mxgpu(gpu, vfs)
                mode = MODE_MXGPU
            elif self._passthrough_ok(gpu):
                deployables = [self._pgpu(gpu)]
                mode = MODE_PASSTHROUGH
            else:
                continue
            devices.append(self._device(gpu, deployables, mode))
        return devices

    def _passthrough_ok(self, gpu: pci.PCIDevice) -> bool:
        drivers = self._conf.amd_gpu.passthrough_drivers
        if gpu.driver is not None and gpu.driver not in drivers:
            if self._once.first('bound-%s-%s' % (gpu.address, gpu.driver)):
                LOG.warning('amd_gpu_driver: device %s is bound to %s, not '
                            'to one of [amd_gpu] passthrough_drivers; it is '
                            'not reported', gpu.address, gpu.driver)
            return False
        return passthrough.group_is_assignable(
            self._host, gpu, drivers, self.name, self._once.first)

    def _traits(self, gpu: pci.PCIDevice, *extra: str) -> list[str]:
        product = '%04X' % gpu.device_id
        return [OWNER_TRAIT, VENDOR_TRAIT, trait('AMD', product),
                *(trait('AMD', product, e) for e in extra)]

    def _pgpu(self, gpu: pci.PCIDevice) -> device_tree.Deployable:
        return passthrough.pgpu_deployable(gpu, self._traits(gpu),
                                           self.name)

    def _mxgpu(self, gpu: pci.PCIDevice,
               vfs: list[pci.PCIAddress]) -> list[device_tree.Deployable]:
        """The GPU (its physical function: no inventory, it is not
        offered whole while GIM runs its VFs) with one child VGPU
        deployable of the usable VFs, as Nova puts a PF's VFs on the
        PF's provider; no child when no VF is usable (Placement takes no
        inventory of 0). A VF is attachable as discovered."""
        allowed = self._conf.amd_gpu.vf_drivers
        handles = [device_tree.AttachHandle(device_tree.AttachType.PCI,
                                            vf.attach_info())
                   for vf in vfs
                   if pci.driver(self._host, vf) in [None, *allowed]]
        children = [device_tree.Deployable(
            name=deployable_name(gpu.address, 'vf'),
            num_accelerators=len(handles), resource_class='VGPU',
            traits=self._traits(gpu, 'MXGPU'), attach_handles=handles,
            driver_name=self.name,
            preparation=device_tree.Preparation.NONE)]
        return [device_tree.Deployable(
            name=deployable_name(gpu.address), num_accelerators=0,
            resource_class='PGPU', traits=self._traits(gpu),
            driver_name=self.name,
            preparation=device_tree.Preparation.NONE,
            children=children if handles else [])]

    def _device(self, gpu: pci.PCIDevice,
                deployables: list[device_tree.Deployable],
                mode: str) -> device_tree.Device:
        return passthrough.gpu_device(
            gpu, MODELS.get(gpu.device_id, '0x%04x' % gpu.device_id),
            deployables, self.name, mode,
            vendor_board_info={'host_driver': gpu.driver or ''})

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        return {device.address: self._health(device) for device in devices}

    def _health(self, device: device_tree.Device) -> device_tree.Health:
        """Unhealthy when the GPU is gone, an MxGPU GPU lost its host
        driver (its VFs with it) or a passthrough GPU was taken by the
        host."""
        address = pci.parse_address(device.address)
        if not pci.exists(self._host, address):
            return device_tree.Health.UNHEALTHY
        driver = pci.driver(self._host, address)
        mode = (device.std_board_info or {}).get('mode')
        allowed = self._conf.amd_gpu.passthrough_drivers
        if (mode == MODE_MXGPU and driver is None) or (
                mode == MODE_PASSTHROUGH and driver not in [None, *allowed]):
            return device_tree.Health.UNHEALTHY
        return device_tree.Health.HEALTHY

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, utilization_mod.Metrics]:
        """What amdgpu exposes in sysfs while it holds the GPU
        (``gpu_busy_percent``, ``mem_info_vram_used``/``_total`` in
        bytes), and the VFs in use of an MxGPU GPU; a file that is
        absent or unreadable gives no metric."""
        found = {}
        for device in devices:
            metrics = self._amdgpu_metrics(device.address)
            if (device.std_board_info or {}).get('mode') == MODE_MXGPU:
                metrics.update(utilization_mod.vf_usage(
                    [pci.driver(self._host, vf) for vf in
                     sriov.vfs(self._host, device.address)],
                    frozenset(self._conf.amd_gpu.vf_drivers)))
            if metrics:
                found[device.address] = metrics
        return found

    def _amdgpu_metrics(self, address: str) -> utilization_mod.Metrics:
        def read(name: str) -> int | None:
            try:
                return sysfs.read_int(self._host,
                                      pci.device_path(address, name))
            except host_errors.HostError:
                return None  # EBUSY while the GPU sleeps, or garbage

        metrics: utilization_mod.Metrics = {}
        busy = read('gpu_busy_percent')
        if busy is not None:
            metrics[utilization_mod.GPU_PERCENT.name] = float(busy)
        for metric, name in ((utilization_mod.MEMORY_USED_MIB,
                              'mem_info_vram_used'),
                             (utilization_mod.MEMORY_TOTAL_MIB,
                              'mem_info_vram_total')):
            value = read(name)
            if value is not None:
                metrics[metric.name] = value // MIB
        return utilization_mod.clean(metrics)
