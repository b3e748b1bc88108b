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

"""nvidia_gpu_driver: NVIDIA GPUs for passthrough and their vGPUs.

Every NVIDIA GPU (vendor ``0x10de``, class ``0x0300`` or ``0x0302``,
never a virtual function) under ``[agent] host_root`` is one device:

* with no enabled vGPU type: one ``PGPU`` deployable whose PCI handle is
  the GPU, reported while the GPU is unbound or bound to one of
  ``[nvidia_gpu] passthrough_drivers`` (attachable as it is), or bound to
  the host's ``nvidia`` driver with ``[nvidia_gpu] rebind_nvidia_gpus``:
  then its preparation moves it to ``vfio-pci`` at bind when no host
  process uses it, and its release gives it back (:mod:`.rebind`);
* with an enabled type, one deployable for the GPU (``PGPU``, no
  inventory: the GPU is not offered whole) with one child ``VGPU``
  deployable per enabled type (its own resource provider under the
  GPU's, as Nova gives each pGPU's vGPUs their own provider), in the
  mode the host runs the GPU in (probed, never guessed from the device
  id): mdev types on the GPU (MDEV handles, the mdev created at
  preparation), mdev types on its virtual functions (one MDEV handle per
  VF), or vGPU 17+ type files on its virtual functions (one PCI handle
  per VF; preparation writes the type to ``current_vgpu_type``).
"""

from __future__ import annotations

import os
import uuid as uuid_mod

from oslo_config import cfg
from oslo_log import log as logging

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci_base
from cyborg.accelerator.drivers.nvidia_gpu import config as vgpu_config
from cyborg.accelerator.drivers.nvidia_gpu import health as gpu_health
from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.nvidia_gpu import mig_vgpu
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf
from cyborg.accelerator.drivers.nvidia_gpu import procfs
from cyborg.accelerator.drivers.nvidia_gpu import rebind
from cyborg.accelerator.drivers.passthrough import deployable_name
from cyborg.accelerator.drivers.passthrough import trait
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import mdev
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sriov
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import partitions as partition_rules
from cyborg.domain import remediation
from cyborg.domain import resource_names

LOG = logging.getLogger(__name__)

NVIDIA = 0x10de
GPU_CLASSES = passthrough.GPU_CLASSES
OWNER_TRAIT = resource_names.OWNER_TRAIT
VENDOR_TRAIT = 'CUSTOM_GPU_NVIDIA'

MODE_PASSTHROUGH = 'passthrough'
MODE_MDEV = 'mdev'
MODE_MDEV_VF = 'mdev-vf'
MODE_VGPU_VF = 'sriov-vgpu'
VGPU_MODES = (MODE_MDEV, MODE_MDEV_VF, MODE_VGPU_VF)
# What the agent does to a handle of each mode at bind: create its mdev,
# or write the type to the VF's current_vgpu_type (vGPU 17+).
_PREPARATIONS = {
    MODE_MDEV: device_tree.Preparation.MDEV,
    MODE_MDEV_VF: device_tree.Preparation.MDEV,
    MODE_VGPU_VF: device_tree.Preparation.VGPU_TYPE,
}


#: The modes of GPUs ``homogeneous`` partition mode partitions: MIG-backed
#: vGPUs are made on their VFs.
_MIG_MODES = (MODE_VGPU_VF, MODE_MDEV_VF)


def probe_mode(host: sysfs.HostRoot, gpu: pci.PCIAddress) -> str:
    """How the host runs the GPU, probed in the order that tells the
    three vGPU frameworks apart: vGPU 17+ files on a VF, mdev types on
    a VF, mdev types on the GPU."""
    vfs = sriov.vfs(host, gpu)
    if any(mdev.has_vendor_vgpu(host, vf) for vf in vfs):
        return MODE_VGPU_VF
    if any(mdev.supported_type_ids(host, vf) for vf in vfs):
        return MODE_MDEV_VF
    if mdev.supported_type_ids(host, gpu):
        return MODE_MDEV
    return MODE_PASSTHROUGH


class NvidiaGpuDriver(pci_base.PCIDriver):

    name = 'nvidia_gpu_driver'
    options_module = nvidia_conf

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        super().__init__(conf, runner, host)
        self._types = vgpu_config.load(conf)
        self._vgpu17_ids: dict[str, int] = {}
        self._vgpu17_names: dict[int, str] = {}
        self._unhealthy: dict[str, str] = {}
        self._xids = gpu_health.XidReader()
        self._known_info: dict[pci.PCIAddress, dict[str, str]] = {}
        self._rebinder = rebind.Rebinder(
            self._host, os.path.join(conf.state_path, 'nvidia_gpu',
                                     'rebound'),
            conf.nvidia_gpu.rebind_timeout)
        self._plan(strict=True)
        self._mig_vgpus: mig_vgpu.MigVgpus | None = None
        self._mig_type_ids: dict[str, int] = {}
        self._serving: dict[pci.PCIAddress, str] = {}
        # What each partitioned GPU reported in the last discovery.
        self._partition_docs: dict[pci.PCIAddress, dict] = {}
        # The profiles administrators pinned GPUs to, by deployable name
        # (kept across restarts: a pin outlives the agent).
        self._pins = mig_vgpu.Journal(os.path.join(
            conf.state_path, 'nvidia_gpu', 'mig-pins'))
        # The partitions the start could not recreate (a host reboot), by
        # key (the handle's uuid), with why.
        self._unrestored: dict[str, str] = {}
        # Asked before an empty GPU serves another profile (the agent's
        # sets it; alone, the driver switches without asking).
        self._switch_guard: partition_rules.SwitchGuard = _NoGuard()
        # Profiles an administrator set without pinning them, by GPU.
        self._requested: dict[pci.PCIAddress, str] = {}
        if conf.nvidia_gpu.partition_mode == 'homogeneous':
            self._start_partitions()

    def _start_partitions(self) -> None:
        """homogeneous mode, before the first report: roll back the
        partitions a killed agent left half created or half destroyed,
        destroy the GPU instances no partition holds, and recreate the
        partitions the device lost (a host reboot).
        """
        self._mig_vgpus = mig_vgpu.MigVgpus(
            mig.MigTool(self._runner, self._smi_timeout), self._host,
            os.path.join(self._conf.state_path, 'nvidia_gpu', 'mig'))
        partitions = self._mig_vgpus
        try:
            for key in partitions.roll_back_unfinished():
                LOG.warning('nvidia_gpu_driver: rolled back the unfinished '
                            'MIG partition %s', key)
            gpus = sorted(partitions.tool.mig_gpus().values())
            for gi in partitions.orphans(gpus):
                # Logged before: the operator sees what is destroyed.
                LOG.warning('nvidia_gpu_driver: destroying GPU instance %d '
                            '(%s) of GPU %d: no partition holds it', gi.id,
                            gi.name, gi.gpu)
                partitions.tool.destroy_gpu_instance(gi.gpu, gi.id)
            for key in partitions.restore(self._unrestored):
                LOG.info('nvidia_gpu_driver: restored MIG partition %s',
                         key)
            for key, reason in sorted(self._unrestored.items()):
                # Reported by the agent's restore as a handle it could not
                # restore (see restore_attach_handle).
                LOG.warning('nvidia_gpu_driver: cannot restore MIG '
                            'partition %s: %s', key, reason)
        except (mig.MigCommandError, mig_vgpu.PartitionError) as exc:
            raise errors.DriverConfigError(
                'cannot restore the MIG partitions: %s' % exc)

    # Configuration against the host -----------------------------------

    def _gpus(self) -> list[pci.PCIDevice]:
        """The NVIDIA GPUs of the host (physical functions only: NVIDIA
        VFs reuse their GPU's device id)."""
        return [d for d in pci.list_devices(self._host, vendor=NVIDIA,
                                            classes=GPU_CLASSES)
                if not d.is_vf]

    def _plan(self, strict: bool = False
              ) -> dict[pci.PCIAddress, vgpu_config.VgpuTypeConfig]:
        """The vGPU type of each GPU that has one.

        Raises ``NvidiaGpuConfigError`` for a listed address that is no
        NVIDIA GPU or whose GPU does not offer the type; at discovery
        (``strict`` false) a listed GPU that is gone is only skipped.
        """
        gpus = {gpu.address: gpu for gpu in self._gpus()}
        plan = {}
        for vgpu_type in self._types:
            for address in vgpu_type.addresses:
                if address not in gpus:
                    self._check_listed(address, vgpu_type, strict)
                    continue
                if not self._offers(address, vgpu_type):
                    raise vgpu_config.NvidiaGpuConfigError(
                        reason='GPU %s does not offer vGPU type %s'
                        % (address, vgpu_type.name))
                plan[address] = vgpu_type
        default = next((t for t in self._types if t.is_default), None)
        if default is not None:
            for address in sorted(gpus):
                if address not in plan and self._offers(address, default):
                    plan[address] = default
        return plan

    def _check_listed(self, address: pci.PCIAddress,
                      vgpu_type: vgpu_config.VgpuTypeConfig,
                      strict: bool) -> None:
        if pci.exists(self._host, address) or strict:
            raise vgpu_config.NvidiaGpuConfigError(
                reason='%s (in [vgpu_%s] device_addresses) is not an NVIDIA '
                'GPU of this host' % (address, vgpu_type.name))
        if self._once.first('gone-%s' % address):
            LOG.warning('nvidia_gpu_driver: configured device %s of vGPU '
                        'type %s is gone; it is not reported', address,
                        vgpu_type.name)

    def _offers(self, gpu: pci.PCIAddress,
                vgpu_type: vgpu_config.VgpuTypeConfig) -> bool:
        mode = probe_mode(self._host, gpu)
        if mode == MODE_MDEV:
            return vgpu_type.name in mdev.supported_type_ids(self._host, gpu)
        if mode == MODE_MDEV_VF:
            return any(vgpu_type.name in mdev.supported_type_ids(self._host,
                                                                 vf)
                       for vf in sriov.vfs(self._host, gpu))
        if mode == MODE_VGPU_VF:
            return self._vgpu17_id(gpu, vgpu_type.name) is not None
        return False

    def _vgpu17_id(self, gpu: pci.PCIAddress, type_name: str) -> int | None:
        """The numeric id of a vGPU 17+ type, named by id or name; names
        are learnt from the VFs' creatable lists and remembered."""
        for vf in sriov.vfs(self._host, gpu):
            for vgpu_type in mdev.creatable_vgpu_types(self._host, vf):
                self._vgpu17_names[vgpu_type.type_id] = vgpu_type.short_name
                self._vgpu17_ids[vgpu_type.short_name] = vgpu_type.type_id
                self._vgpu17_ids[vgpu_type.name] = vgpu_type.type_id
        if type_name.isdigit():
            type_id = int(type_name)
            in_use = any(mdev.current_vgpu_type(self._host, vf) == type_id
                         for vf in sriov.vfs(self._host, gpu))
            known = type_id in self._vgpu17_names
            return type_id if known or in_use else None
        return self._vgpu17_ids.get(type_name)

    # Discovery ----------------------------------------------------------

    def discover(self) -> list[device_tree.Device]:
        self._once.next_round()
        plan = self._plan()
        partitioned = self._partitioned() if self._mig_vgpus else {}
        devices = []
        names: dict[pci.PCIAddress, str] | None = None
        for gpu in self._gpus():
            vgpu_type = plan.get(gpu.address)
            if gpu.address in partitioned:
                deployables: list[device_tree.Deployable] | None = (
                    partitioned[gpu.address])
            else:
                deployables = self._deployables(gpu, vgpu_type)
            if deployables is None:
                continue
            model = self._proc_info(gpu.address).get('Model')
            if not model:
                # nvidia-smi only when the nvidia driver gives no model, and at
                # most once per discovery: it is a subprocess, slow beside a
                # /proc read.
                if names is None:
                    names = gpu_health.gpu_names(self._runner,
                                                 self._smi_timeout)
                model = names.get(gpu.address) or '0x%04x' % gpu.device_id
            device = self._device(
                gpu, model, deployables,
                vgpu_type is not None or gpu.address in partitioned)
            if gpu.address in partitioned:
                device.partitions = self._partition_docs.get(gpu.address)
            devices.append(device)
        return devices

    @property
    def _smi_timeout(self) -> float:
        return self._conf.nvidia_gpu.nvidia_smi_timeout

    def _deployables(self, gpu: pci.PCIDevice,
                     vgpu_type: vgpu_config.VgpuTypeConfig | None
                     ) -> list[device_tree.Deployable] | None:
        """The GPU's deployables; None when the GPU is not reported."""
        if vgpu_type is None:
            if not self._passthrough_ok(gpu):
                return None
            return [self._pgpu(gpu)]
        child = self._vgpu(gpu, vgpu_type)
        # The GPU is a provider with no inventory of its own (it is not
        # offered whole while it runs vGPUs); each enabled type is a
        # child provider under it, as Nova gives each pGPU's vGPUs
        # their own provider. Placement takes no inventory of 0: a type
        # with no capacity left (another type in use) has no provider.
        return [device_tree.Deployable(
            name=deployable_name(gpu.address), num_accelerators=0,
            resource_class='PGPU', traits=self._product_traits(gpu),
            driver_name=self.name,
            attributes={'vgpu_mode': child.attributes['vgpu_mode']},
            preparation=device_tree.Preparation.NONE,
            children=[child] if child.num_accelerators > 0 else [])]

    def _passthrough_ok(self, gpu: pci.PCIDevice) -> bool:
        drivers = self._conf.nvidia_gpu.passthrough_drivers
        if (gpu.driver is not None and gpu.driver not in drivers
                and not self._rebinds(gpu.driver)):
            # Warned once per GPU and driver: discovery runs every period.
            if not self._once.first('bound-%s-%s' % (gpu.address, gpu.driver)):
                return False
            if gpu.driver == rebind.HOST_DRIVER:
                LOG.warning('nvidia_gpu_driver: device %s is bound to '
                            'nvidia and has no vGPU type, and [nvidia_gpu] '
                            'rebind_nvidia_gpus is false; it is not '
                            'reported', gpu.address)
            else:
                LOG.warning('nvidia_gpu_driver: device %s is bound to %s, '
                            'not to one of [nvidia_gpu] passthrough_drivers, '
                            'and has no vGPU type; it is not reported',
                            gpu.address, gpu.driver)
            return False
        return passthrough.group_is_assignable(
            self._host, gpu, drivers, self.name, self._once.first)

    def _rebinds(self, driver: str | None) -> bool:
        """Whether a GPU on ``driver`` is moved to vfio-pci at bind."""
        conf = self._conf.nvidia_gpu
        return (driver == rebind.HOST_DRIVER and conf.rebind_nvidia_gpus
                and driver not in conf.passthrough_drivers)

    def _product_traits(self, gpu: pci.PCIDevice) -> list[str]:
        return [OWNER_TRAIT, VENDOR_TRAIT,
                trait('NVIDIA', '%04X' % gpu.device_id)]

    def _pgpu(self, gpu: pci.PCIDevice) -> device_tree.Deployable:
        # A GPU the agent moved to vfio-pci keeps its preparation while
        # a guest has it, so that its release gives it back.
        moves = (self._rebinds(gpu.driver)
                 or self._rebinder.moved(gpu.address))
        return passthrough.pgpu_deployable(
            gpu, self._product_traits(gpu), self.name,
            preparation=(device_tree.Preparation.VFIO if moves
                         else device_tree.Preparation.NONE))

    def _vgpu(self, gpu: pci.PCIDevice,
              vgpu_type: vgpu_config.VgpuTypeConfig) -> device_tree.Deployable:
        mode = probe_mode(self._host, gpu.address)
        if mode == MODE_MDEV:
            handles, count, label = self._mdev_handles(gpu.address,
                                                       vgpu_type.name)
        elif mode == MODE_MDEV_VF:
            handles, count, label = self._mdev_vf_handles(gpu.address,
                                                          vgpu_type.name)
        else:
            handles, count, label = self._vgpu17_handles(gpu.address,
                                                         vgpu_type.name)
        if vgpu_type.max_instances is not None:
            count = min(count, vgpu_type.max_instances)
        if mode == MODE_MDEV:
            # Handles of one parent are alike; VF handles are not (any
            # VF may be the free one), so all of those stay.
            handles = handles[:count]
        traits = self._product_traits(gpu) + [
            trait('NVIDIA', '%04X' % gpu.device_id, label),
            trait('VGPU', self._type_key(mode, vgpu_type.name))]
        return device_tree.Deployable(
            name=deployable_name(gpu.address, vgpu_type.name),
            num_accelerators=count, resource_class=vgpu_type.resource_class,
            traits=traits, attach_handles=handles, driver_name=self.name,
            attributes={'vgpu_type': vgpu_type.name, 'vgpu_mode': mode},
            preparation=_PREPARATIONS[mode])

    def _type_key(self, mode: str, type_name: str) -> str:
        """The type's id for its trait: ``nvidia-222``, or
        ``nvidia-1414`` for a vGPU 17+ type id."""
        if mode != MODE_VGPU_VF:
            return type_name
        type_id = self._vgpu17_ids.get(type_name)
        return 'nvidia-%d' % (type_id if type_id is not None
                              else int(type_name))

    def _mdev_handles(self, gpu: pci.PCIAddress, type_id: str
                      ) -> tuple[list[device_tree.AttachHandle], int, str]:
        """One MDEV handle per instance the GPU can run (capacity =
        available + existing)."""
        mdev_type = mdev.get_type(self._host, gpu, type_id)
        capacity = mdev_type.capacity if mdev_type is not None else 0
        handles = [_mdev_handle(gpu, type_id, index)
                   for index in range(capacity)]
        return handles, capacity, _mdev_label(mdev_type, type_id)

    def _mdev_vf_handles(self, gpu: pci.PCIAddress, type_id: str
                         ) -> tuple[list[device_tree.AttachHandle], int, str]:
        """One MDEV handle per VF offering the type (one vGPU each); at
        most ``max_instance`` of the type's description can run."""
        handles, limit, found = [], None, None
        for index, vf in sriov.vf_map(self._host, gpu).items():
            mdev_type = mdev.get_type(self._host, vf, type_id)
            if mdev_type is None or mdev_type.capacity < 1:
                continue
            found = found or mdev_type
            handles.append(_mdev_handle(vf, type_id, index))
            value = mdev_type.description_fields().get('max_instance', '')
            if value.isdigit():
                limit = int(value)
        count = len(handles) if limit is None else min(limit, len(handles))
        return handles, count, _mdev_label(found, type_id)

    def _vgpu17_handles(self, gpu: pci.PCIAddress, type_name: str
                        ) -> tuple[list[device_tree.AttachHandle], int, str]:
        """One PCI handle per VF that runs the type or can take it now."""
        type_id = self._vgpu17_id(gpu, type_name)
        handles = []
        for vf in sriov.vfs(self._host, gpu):
            current = mdev.current_vgpu_type(self._host, vf)
            creatable = {t.type_id for t in mdev.creatable_vgpu_types(
                self._host, vf)}
            if current == type_id or (current == 0 and type_id in creatable):
                handles.append(device_tree.AttachHandle(
                    device_tree.AttachType.PCI,
                    dict(vf.attach_info(), vgpu_type=str(type_id))))
        label = (self._vgpu17_names.get(type_id, type_name)
                 if type_id is not None else type_name)
        return handles, len(handles), label

    def _proc_info(self, gpu: pci.PCIAddress) -> dict[str, str]:
        """What the nvidia driver says of the GPU; while the agent has
        moved it to vfio-pci (the nvidia driver no longer knows it), what
        it said before, so that the device does not change while a guest
        has it."""
        info = procfs.information(self._host, gpu)
        if info:
            self._known_info[gpu] = info
        elif self._rebinder.moved(gpu):
            info = self._known_info.get(gpu, {})
        return info

    def _device(self, gpu: pci.PCIDevice, model: str,
                deployables: list[device_tree.Deployable],
                vgpus: bool) -> device_tree.Device:
        mode = (probe_mode(self._host, gpu.address) if vgpus
                else MODE_PASSTHROUGH)
        gpu_uuid = self._proc_info(gpu.address).get('GPU UUID')
        return passthrough.gpu_device(
            gpu, model, deployables, self.name, mode, extra_board_info={
                'subsystem_vendor_id': _hex(gpu.subsystem_vendor_id),
                'subsystem_device_id': _hex(gpu.subsystem_device_id)},
            vendor_board_info={'gpu_uuid': gpu_uuid} if gpu_uuid else {})

    # MIG partitions (homogeneous mode) -----------------------------------

    def _partition_states(self) -> dict:
        """``{address: (gpu, MIG index, {profile name: GiProfile}, GPU
        instances)}`` of the GPUs in MIG mode whose VFs carry vGPU types
        (vGPU 17+ type files, or mdev types); raises
        :class:`~mig.MigCommandError`."""
        assert self._mig_vgpus is not None
        tool = self._mig_vgpus.tool
        indexes = tool.mig_gpus()
        states = {}
        for gpu in self._gpus():
            index = indexes.get(gpu.address)
            if index is None or probe_mode(
                    self._host, gpu.address) not in _MIG_MODES:
                continue
            # Free counts and instances of one moment: an instance created
            # between the two reads would count twice in the capacity
            # (held + still creatable), and Placement could grant it twice.
            with self._mig_vgpus.quiescent():
                states[gpu.address] = (
                    gpu, index, {p.name: p for p in tool.profiles(index)},
                    tool.gpu_instances(index))
        return states

    def _partitioned(self) -> dict[pci.PCIAddress,
                                   list[device_tree.Deployable]]:
        """The deployables of the GPUs in MIG mode with vGPU 17+ VFs:
        each serves one profile, the one of the instances it holds, or,
        when empty, the one it is pinned to or the policy gives it."""
        try:
            states = self._partition_states()
        except mig.MigCommandError as exc:
            # Once per kind of failure; the GPUs are not offered meanwhile.
            if self._once.first('mig-%s' % type(exc).__name__):
                LOG.warning('nvidia_gpu_driver: nvidia-smi mig cannot be '
                            'used (%s); MIG GPUs are not reported', exc)
            return {}
        pins = self._pinned()
        self._serving = self._choose_profiles(states, pins)
        found = {}
        self._partition_docs = {}
        for address, (gpu, index, profiles, instances) in states.items():
            name = self._serving.get(address)
            child = (self._mig_child(gpu, index, profiles[name], instances)
                     if name else None)
            offered = child.num_accelerators if child else 0
            self._partition_docs[address] = partition_rules.state(
                partition_rules.HOMOGENEOUS, name,
                name is not None and pins.get(address) == name,
                len(instances), max(0, offered - len(instances)))
            found[address] = [device_tree.Deployable(
                name=deployable_name(gpu.address), num_accelerators=0,
                resource_class='PGPU', traits=self._product_traits(gpu),
                driver_name=self.name,
                attributes={'vgpu_mode': probe_mode(self._host,
                                                    gpu.address)},
                preparation=device_tree.Preparation.NONE,
                children=[child] if child and child.num_accelerators else [])]
        return found

    def _pinned(self) -> dict[pci.PCIAddress, str]:
        """The profile each pinned GPU is pinned to."""
        found = {}
        for entry in self._pins.entries().values():
            try:
                found[pci.parse_address(entry['address'])] = entry['profile']
            except (KeyError, TypeError, host_errors.InvalidPCIAddress):
                continue
        return found

    def _offered(self, gpu: pci.PCIDevice, profiles: dict) -> list[str]:
        """The profiles of ``mig_profiles`` the GPU can serve: it lists
        them and its VFs have their vGPU type."""
        return [n for n in self._conf.nvidia_gpu.mig_profiles
                if n in profiles
                and self._mig_type(gpu.address, n) is not None]

    def _choose_profiles(self, states: dict,
                         pins: dict[pci.PCIAddress, str] | None = None
                         ) -> dict[pci.PCIAddress, str]:
        """The profile each GPU serves. A GPU holding instances (or
        partitions being created or destroyed) serves theirs (never
        switched); an empty one the profile it is pinned to (``pins``,
        when it can serve it), else the first profile of
        ``mig_profiles`` of which the host has fewer than
        ``mig_min_free`` still creatable, else the one it served."""
        conf = self._conf.nvidia_gpu
        pins = pins or {}
        assert self._mig_vgpus is not None
        # A partition under way holds its GPU before its instance exists.
        pending = self._mig_vgpus.pending()
        free: dict[str, int] = dict.fromkeys(conf.mig_profiles, 0)
        serving: dict[pci.PCIAddress, str] = {}
        empty = []
        for address, (gpu, index, profiles, instances) in sorted(
                states.items()):
            offered = self._offered(gpu, profiles)
            names = {gi.name for gi in instances} | {
                p.name for p in profiles.values()
                if p.id in pending.get(index, ())}
            if not names and pins.get(address) in offered:
                # Pinned: counted before the policy serves the others.
                name = self._guarded(address, pins[address], offered)
                if name is not None:
                    serving[address] = name
                    free[name] += profiles[name].free
            elif not names:
                empty.append((address, offered, profiles))
            elif len(names) == 1 and names <= set(offered):
                (name,) = names
                serving[address] = name
                free[name] += profiles[name].free
        for address, offered, profiles in empty:
            name = next((n for n in offered
                         if free[n] < conf.mig_min_free), None)
            if name is None:
                before = self._requested.get(address)
                if before not in offered:
                    before = self._serving.get(address)
                name = before if before in offered else (
                    offered[0] if offered else None)
            if name is not None:
                chosen = self._guarded(address, name, offered)
                if chosen == name:
                    # Served, or overruled by the policy.
                    self._requested.pop(address, None)
                name = chosen
            if name is not None:
                serving[address] = name
                free[name] += profiles[name].free
        return serving

    def _guarded(self, address: pci.PCIAddress, name: str,
                 offered: list[str]) -> str | None:
        """The profile an empty GPU serves when ``name`` is wanted:
        ``name`` if it served it in the last discovery or the switch
        guard allows it; else the one the conductor says it serves (a
        claim in Placement may wait for its bind), else the one it
        served, else none."""
        before = self._serving.get(address)
        if name == before:
            return name
        answer = self._switch_guard.may_serve(
            str(address), deployable_name(address, name))
        if answer.allowed:
            return name
        kept = next((p for p in offered
                     if deployable_name(address, p) in answer.serving),
                    before if before in offered else None)
        if self._once.first(('kept', address, name)):
            LOG.info('nvidia_gpu_driver: GPU %s keeps serving %s, not %s: '
                     'what it serves is allocated or cannot be checked',
                     address, kept or 'nothing', name)
        return kept

    def use_switch_guard(self, guard: partition_rules.SwitchGuard) -> None:
        self._switch_guard = guard

    def set_partitions(self, address: str, profile: str | None,
                       pinned: bool) -> None:
        """Serve ``profile`` on the empty MIG GPU at ``address`` (pinned:
        the policy never switches it; not pinned: until the policy
        does), or, with None, leave the choice to the policy. Refused
        while the GPU holds GPU instances. Shown from the next
        discovery."""
        if self._mig_vgpus is None:
            raise errors.PartitionRefused(
                reason='[nvidia_gpu] partition_mode is not homogeneous on '
                'this host')
        try:
            gpu_address = pci.parse_address(address)
            states = self._partition_states()
        except host_errors.InvalidPCIAddress as exc:
            raise errors.PartitionRefused(reason=str(exc))
        except mig.MigCommandError as exc:
            raise errors.PartitionRefused(
                reason='nvidia-smi mig cannot be used: %s' % exc)
        if gpu_address not in states:
            raise errors.PartitionRefused(
                reason='GPU %s is not in MIG mode with vGPU VFs'
                % gpu_address)
        gpu, _index, profiles, instances = states[gpu_address]
        if instances:
            raise errors.PartitionRefused(
                reason='GPU %s holds %d partition(s): its profile can '
                'change once they are released' % (gpu_address,
                                                   len(instances)))
        offered = self._offered(gpu, profiles)
        if profile is not None and profile not in offered:
            raise errors.PartitionProfileUnknown(
                reason='GPU %s cannot serve profile %s; it serves %s '
                '([nvidia_gpu] mig_profiles that it lists)' % (
                    gpu_address, profile, ', '.join(offered) or 'none'))
        key = deployable_name(gpu_address)
        if profile is not None and pinned:
            self._pins.write(key, {'address': str(gpu_address),
                                   'profile': profile})
        else:
            self._pins.remove(key)
        if profile is not None and not pinned:
            # Served from the next discovery, once the switch guard allows
            # it, until the policy switches the GPU.
            self._requested[gpu_address] = profile
        else:
            self._requested.pop(gpu_address, None)
        LOG.info('nvidia_gpu_driver: GPU %s serves profile %s, pinned: %s',
                 gpu_address, profile or 'of the policy',
                 profile is not None and pinned)

    def _mig_type(self, gpu: pci.PCIAddress, profile: str
                  ) -> int | str | None:
        """The MIG-backed vGPU type of ``profile`` that the GPU's VFs
        list: a vGPU 17+ type id (remembered: a VF running it lists
        none), or an mdev type id (``nvidia-474``)."""
        if probe_mode(self._host, gpu) == MODE_MDEV_VF:
            return self._mig_mdev_type(gpu, profile)
        for vf in sriov.vfs(self._host, gpu):
            for vgpu_type in mdev.creatable_vgpu_types(self._host, vf):
                name = mig_vgpu.mig_profile_name(vgpu_type.short_name)
                if name is not None:
                    self._mig_type_ids[name] = vgpu_type.type_id
        return self._mig_type_ids.get(profile)

    def _mig_mdev_type(self, gpu: pci.PCIAddress, profile: str
                       ) -> str | None:
        """The mdev type of ``profile`` the GPU's VFs list (each VF lists
        every type, free or not: the first that lists any tells)."""
        for vf in sriov.vfs(self._host, gpu):
            found = None
            for mdev_type in mdev.supported_types(self._host, vf):
                name = mig_vgpu.mig_profile_name(
                    _mdev_label(mdev_type, mdev_type.type_id))
                if name == profile:
                    found = mdev_type.type_id
            if mdev.supported_type_ids(self._host, vf):
                return found
        return None

    def _mig_child(self, gpu: pci.PCIDevice, index: int,
                   profile: mig.GiProfile,
                   instances: list[mig.GpuInstance]
                   ) -> device_tree.Deployable:
        type_id = self._mig_type(gpu.address, profile.name)
        assert type_id is not None
        mode = probe_mode(self._host, gpu.address)
        mig_info = {'mig_profile': profile.name, 'mig_gpu': str(index)}
        if mode == MODE_MDEV_VF:
            # Every VF listing the type: its available_instances is 0 until
            # the bind creates the GPU instance the vGPU runs in.
            handles = [device_tree.AttachHandle(
                device_tree.AttachType.MDEV,
                dict(_mdev_handle(vf, str(type_id), n).attach_info,
                     **mig_info))
                for n, vf in sriov.vf_map(self._host, gpu.address).items()
                if str(type_id) in mdev.supported_type_ids(self._host, vf)]
        else:
            handles = []
            for vf in sriov.vfs(self._host, gpu.address):
                current = mdev.current_vgpu_type(self._host, vf)
                creatable = {t.type_id for t in mdev.creatable_vgpu_types(
                    self._host, vf)}
                if current == type_id or (current == 0
                                          and type_id in creatable):
                    handles.append(device_tree.AttachHandle(
                        device_tree.AttachType.PCI,
                        dict(vf.attach_info(), vgpu_type=str(type_id),
                             **mig_info)))
        # Held + still creatable: everything Placement grants can be made.
        capacity = mig.homogeneous_capacity(profile, instances) or 0
        return device_tree.Deployable(
            name=deployable_name(gpu.address, profile.name),
            num_accelerators=min(capacity, len(handles)),
            resource_class=mig_resource_class(profile.name),
            traits=self._product_traits(gpu) + [trait('MIG', profile.name)],
            attach_handles=handles, driver_name=self.name,
            attributes={'vgpu_type': str(type_id), 'vgpu_mode': mode,
                        'mig_profile': profile.name},
            preparation=_PREPARATIONS[mode])

    # Health -------------------------------------------------------------

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        problems = self._tool_problems(devices)
        result = {}
        for device in devices:
            reasons = self._sysfs_problems(device) + problems.get(
                device.address, [])
            result[device.address] = self._judge(device.address, reasons)
        return result

    def health_signals(self, devices: list[device_tree.Device]
                       ) -> dict[str, list[remediation.Signal]]:
        """As :meth:`health` (its reasons are the ``unhealthy`` signal)
        except for Xids: each new Xid line of the kernel log is its own
        signal (``xid.48``...), given once, which the remediation catalog
        judges; plus the PCIe signals of sysfs."""
        problems = self._tool_problems(devices, xids=False)
        xids = self._new_xids(devices)
        result = {}
        for device in devices:
            reasons = self._sysfs_problems(device) + problems.get(
                device.address, [])
            self._judge(device.address, reasons)
            signals = ([remediation.Signal(remediation.UNHEALTHY,
                                           '; '.join(reasons))]
                       if reasons else [])
            signals += self._pcie.signals(device.address)
            signals += xids.get(
                gpu_health.slot_of(pci.parse_address(device.address)), [])
            result[device.address] = signals
        return result

    def _new_xids(self, devices: list[device_tree.Device]
                  ) -> dict[tuple[int, int, int], list[remediation.Signal]]:
        if not (self._conf.nvidia_gpu.xid_health
                and any(self._held_by_nvidia(d) for d in devices)):
            return {}
        return self._xids.read(self._runner, self._smi_timeout) or {}

    def reset_device(self, device: device_tree.Device) -> None:
        """``nvidia-smi --gpu-reset`` of a GPU the nvidia driver holds
        (nvidia-smi cannot see one on vfio-pci)."""
        if not self._held_by_nvidia(device):
            raise NotImplementedError(
                'nvidia-smi resets only GPUs the nvidia driver holds')
        gpu_health.gpu_reset(self._runner, device.address,
                             self._conf.nvidia_gpu.gpu_reset_timeout)

    def _sysfs_problems(self, device: device_tree.Device) -> list[str]:
        address = pci.parse_address(device.address)
        if not pci.exists(self._host, address):
            return ['the GPU is gone']
        driver = pci.driver(self._host, address)
        mode = (device.std_board_info or {}).get('mode')
        # The vGPU types (mdev or vGPU 17+ files) exist only while the host's
        # nvidia driver holds the GPU.
        if mode in VGPU_MODES and driver != 'nvidia':
            return ['its vGPUs need the nvidia driver; it is bound to %s'
                    % driver]
        allowed = self._conf.nvidia_gpu.passthrough_drivers
        if (mode == MODE_PASSTHROUGH and driver not in [None, *allowed]
                and not self._rebinds(driver)):
            return ['bound to %s, not to a passthrough driver' % driver]
        return []

    def _tool_problems(self, devices: list[device_tree.Device],
                       xids: bool = True) -> dict[str, list[str]]:
        """Problems nvidia-smi and the kernel log report, by address.

        Both only know GPUs the nvidia driver holds: with none of those
        (a passthrough host), no tool runs.
        """
        found: dict[str, list[str]] = {}
        if not any(self._held_by_nvidia(d) for d in devices):
            return found
        try:
            smi = gpu_health.smi_problems(self._runner, self._smi_timeout)
        except gpu_health.ToolUnusable as exc:
            # Once per kind of failure: a host without nvidia-smi would log it
            # at every discovery.
            if self._once.first('smi-%s' % type(exc.__cause__).__name__):
                LOG.warning('nvidia_gpu_driver: nvidia-smi cannot be used '
                            '(%s); health comes from sysfs only', exc)
            smi = {}
        for address, reasons in smi.items():
            found.setdefault(str(address), []).extend(reasons)
        if xids and self._conf.nvidia_gpu.xid_health:
            fatal = gpu_health.fatal_xids(self._runner, self._smi_timeout)
            for device in devices:
                slot = gpu_health.slot_of(pci.parse_address(device.address))
                if slot in fatal:
                    found.setdefault(device.address, []).append(
                        'Xid %s' % ', '.join(str(x) for x in fatal[slot]))
        return found

    def _held_by_nvidia(self, device: device_tree.Device) -> bool:
        try:
            return pci.driver(self._host, device.address) == 'nvidia'
        except host_errors.HostError:
            # Gone meanwhile: _sysfs_problems reports that.
            return False

    def _judge(self, address: str, reasons: list[str]) -> device_tree.Health:
        """The health, logged when it changes."""
        if reasons:
            text = '; '.join(reasons)
            # Logged on a change only: health is checked at every discovery.
            if self._unhealthy.get(address) != text:
                LOG.warning('nvidia_gpu_driver: device %s is unhealthy: %s',
                            address, text)
            self._unhealthy[address] = text
            return device_tree.Health.UNHEALTHY
        if self._unhealthy.pop(address, None) is not None:
            LOG.info('nvidia_gpu_driver: device %s is healthy again',
                     address)
        return device_tree.Health.HEALTHY

    # Utilization --------------------------------------------------------

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, dict[str, int | float]]:
        """GPU busy percentage and memory from nvidia-smi, for the GPUs
        the nvidia driver holds (a passthrough GPU on vfio-pci has no
        reading on the host); nothing when nvidia-smi cannot tell."""
        held = [d for d in devices if self._held_by_nvidia(d)]
        if not held:
            return {}
        rows = gpu_health.gpu_utilization(self._runner, self._smi_timeout)
        found = {}
        for device in held:
            metrics = rows.get(pci.parse_address(device.address))
            if metrics:
                found[device.address] = metrics
        return found

    # Preparation ------------------------------------------------------------

    def prepare_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        if preparation == device_tree.Preparation.MDEV:
            self._create_mdev(handle, handle_uuid)
        elif preparation == device_tree.Preparation.VGPU_TYPE:
            self._set_vgpu_type(handle, handle_uuid)
        elif preparation == device_tree.Preparation.VFIO:
            self._to_vfio(handle)

    def restore_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation
                              ) -> None:
        """As at bind, except for a MIG partition the start could not
        recreate from its journal: that failure, with its reason."""
        reason = self._unrestored.get(handle_uuid)
        if reason is not None:
            raise errors.PrepareFailed('cannot restore MIG partition %s: %s'
                                       % (handle_uuid, reason))
        self.prepare_attach_handle(handle, handle_uuid, preparation)

    def is_prepared(self, handle: device_tree.AttachHandle,
                    handle_uuid: str,
                    preparation: device_tree.Preparation) -> bool | None:
        """The handle's mdev exists; its VF runs its vGPU type (a MIG
        partition's too: the start restored its GPU instance from the
        journal); the whole GPU is on vfio-pci or needs no move."""
        try:
            if preparation == device_tree.Preparation.MDEV:
                return mdev.mdev_exists(self._host, handle_uuid)
            if preparation == device_tree.Preparation.VGPU_TYPE:
                return (mdev.current_vgpu_type(
                    self._host, _handle_address(handle))
                    == _vgpu_type_id(handle))
            if preparation == device_tree.Preparation.VFIO:
                return not self._rebinds(
                    self._driver_of(_handle_address(handle)))
        except (host_errors.HostError, ValueError) as exc:
            raise errors.PrepareFailed('cannot read the preparation of '
                                       'attach handle %s: %s'
                                       % (handle_uuid, exc))
        return None

    def release_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        if preparation == device_tree.Preparation.MDEV:
            if 'mig_profile' in handle.attach_info:
                self._destroy_partition(handle_uuid)
            else:
                self._remove_mdev(handle_uuid)
        elif preparation == device_tree.Preparation.VGPU_TYPE:
            self._reset_vgpu_type(handle, handle_uuid)
        elif preparation == device_tree.Preparation.VFIO:
            self._give_back(handle)

    def _to_vfio(self, handle: device_tree.AttachHandle) -> None:
        """A whole GPU: from nvidia to vfio-pci if the host's nvidia
        driver holds it and may give it up."""
        gpu = _handle_address(handle)
        if not self._rebinds(self._driver_of(gpu)):
            return  # attachable as it is
        try:
            self._rebinder.to_vfio(gpu)
        except (host_errors.HostError, rebind.RebindError) as exc:
            raise errors.PrepareFailed(str(exc))

    def _give_back(self, handle: device_tree.AttachHandle) -> None:
        gpu = _handle_address(handle)
        try:
            self._rebinder.give_back(gpu)
        except (host_errors.HostError, rebind.RebindError) as exc:
            raise errors.PrepareFailed(str(exc))

    def _driver_of(self, gpu: pci.PCIAddress) -> str | None:
        try:
            return pci.driver(self._host, gpu)
        except host_errors.HostError as exc:
            raise errors.PrepareFailed(
                'cannot read the driver of %s: %s' % (gpu, exc))

    def _create_mdev(self, handle: device_tree.AttachHandle,
                     handle_uuid: str) -> None:
        if 'mig_profile' in handle.attach_info:
            self._create_partition(handle, handle_uuid)
            return
        parent = _handle_address(handle)
        type_id = handle.attach_info.get('asked_type', '')
        try:
            if mdev.mdev_exists(self._host, handle_uuid):
                self._check_existing(parent, type_id, handle_uuid)
                return
            mdev.create_mdev(self._host, parent, type_id, handle_uuid)
        except (host_errors.HostError, ValueError) as exc:
            raise errors.PrepareFailed(
                'cannot create mdev %s of type %s on %s: %s'
                % (handle_uuid, type_id, parent, exc))
        LOG.info('nvidia_gpu_driver: created mdev %s of type %s on %s',
                 handle_uuid, type_id, parent)

    def _check_existing(self, parent: pci.PCIAddress, type_id: str,
                        handle_uuid: str) -> None:
        """An mdev with the handle's uuid exists: fine if it is the one
        asked for (a repeated preparation)."""
        wanted = str(uuid_mod.UUID(handle_uuid))
        for existing in mdev.list_mdevs(self._host, parent):
            if existing.uuid == wanted and existing.type_id == type_id:
                return
        raise errors.PrepareFailed('mdev %s exists, but not as type %s on %s'
                                   % (handle_uuid, type_id, parent))

    def _remove_mdev(self, handle_uuid: str) -> None:
        try:
            removed = mdev.remove_mdev_if_exists(self._host, handle_uuid)
        except (host_errors.HostError, ValueError) as exc:
            raise errors.PrepareFailed('cannot remove mdev %s: %s'
                                       % (handle_uuid, exc))
        if removed:
            LOG.info('nvidia_gpu_driver: removed mdev %s', handle_uuid)

    def _set_vgpu_type(self, handle: device_tree.AttachHandle,
                       handle_uuid: str) -> None:
        if 'mig_profile' in handle.attach_info:
            self._create_partition(handle, handle_uuid)
            return
        vf = _handle_address(handle)
        type_id = _vgpu_type_id(handle)
        try:
            current = mdev.current_vgpu_type(self._host, vf)
            if current == type_id:
                return
            if current:
                raise errors.PrepareFailed('VF %s runs vGPU type %d, not %d'
                                           % (vf, current, type_id))
            mdev.set_vgpu_type(self._host, vf, type_id)
        except (host_errors.HostError, ValueError) as exc:
            raise errors.PrepareFailed('cannot set vGPU type %d on %s: %s'
                                       % (type_id, vf, exc))
        LOG.info('nvidia_gpu_driver: set vGPU type %s on %s', type_id, vf)

    def _reset_vgpu_type(self, handle: device_tree.AttachHandle,
                         handle_uuid: str) -> None:
        if 'mig_profile' in handle.attach_info:
            self._destroy_partition(handle_uuid)
            return
        vf = _handle_address(handle)
        type_id = _vgpu_type_id(handle)
        try:
            current = mdev.current_vgpu_type(self._host, vf)
            if not current:
                return
            if current != type_id:
                raise errors.PrepareFailed(
                    'VF %s runs vGPU type %d, not %d; left '
                    'as it is' % (vf, current, type_id))
            mdev.set_vgpu_type(self._host, vf, 0)
        except (host_errors.HostError, ValueError) as exc:
            raise errors.PrepareFailed('cannot reset the vGPU type of %s: %s'
                                       % (vf, exc))
        LOG.info('nvidia_gpu_driver: reset the vGPU type of %s', vf)


    def _partitions(self) -> mig_vgpu.MigVgpus:
        if self._mig_vgpus is None:
            raise errors.PrepareFailed('the handle is a MIG partition and '
                                       '[nvidia_gpu] partition_mode is not '
                                       'homogeneous')
        return self._mig_vgpus

    def _create_partition(self, handle: device_tree.AttachHandle,
                          handle_uuid: str) -> None:
        """A GPU instance of the handle's profile, then its vGPU on the
        handle's VF: the VF's type (a PCI handle), or an mdev of the
        handle's uuid (an MDEV handle); journaled, a failure leaves
        nothing."""
        info = handle.attach_info
        vf = _handle_address(handle)
        if handle.attach_type == device_tree.AttachType.MDEV:
            type_id: int | str = info.get('asked_type', '')
            kind = mig_vgpu.MDEV
        else:
            type_id, kind = _vgpu_type_id(handle), mig_vgpu.VGPU_TYPE
        try:
            gi = self._partitions().create(
                handle_uuid, int(info.get('mig_gpu', '')),
                info['mig_profile'], vf, type_id, kind)
        except (mig.MigCommandError, mig_vgpu.PartitionError,
                ValueError) as exc:
            raise errors.PrepareFailed(str(exc))
        LOG.info('nvidia_gpu_driver: created MIG partition %s (%s, GPU '
                 'instance %d) on %s', handle_uuid, info['mig_profile'],
                 gi.id, vf)

    def _destroy_partition(self, handle_uuid: str) -> None:
        try:
            self._partitions().destroy(handle_uuid)
        except (mig.MigCommandError, mig_vgpu.PartitionError,
                ValueError) as exc:
            raise errors.PrepareFailed(str(exc))
        LOG.info('nvidia_gpu_driver: destroyed MIG partition %s',
                 handle_uuid)


class _NoGuard:
    """Every switch allowed (a driver no agent gave a guard)."""

    def may_serve(self, address: str, deployable: str
                  ) -> partition_rules.SwitchAnswer:
        return partition_rules.ALLOWED


def mig_resource_class(profile: str) -> str:
    """``1g.18gb`` -> ``CUSTOM_MIG_1G_18GB``."""
    return trait('MIG', profile)


def _hex(value: int | None) -> str | None:
    return None if value is None else '0x%04x' % value


def _mdev_handle(parent: pci.PCIAddress, type_id: str,
                 index: int) -> device_tree.AttachHandle:
    return device_tree.AttachHandle(
        device_tree.AttachType.MDEV,
        dict(parent.attach_info(), asked_type=type_id,
             vgpu_mark='%s_%d' % (type_id, index)))


def _mdev_label(mdev_type: mdev.MdevType | None, type_id: str) -> str:
    """``GRID T4-1B`` -> ``T4-1B``; the type id without a name."""
    if mdev_type is not None and mdev_type.name:
        return mdev.short_vgpu_name(mdev_type.name)
    return type_id


def _handle_address(handle: device_tree.AttachHandle) -> pci.PCIAddress:
    try:
        return pci.handle_address(handle.attach_info)
    except host_errors.InvalidPCIAddress as exc:
        raise errors.PrepareFailed('attach handle %r has no PCI address: %s'
                                   % (handle.attach_info, exc))


def _vgpu_type_id(handle: device_tree.AttachHandle) -> int:
    value = handle.attach_info.get('vgpu_type', '')
    if not value.isdigit():
        raise errors.PrepareFailed('attach handle %r has no vGPU type id'
                                   % (handle.attach_info,))
    return int(value)
