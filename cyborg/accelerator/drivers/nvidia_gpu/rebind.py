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

"""Passing a GPU the host's ``nvidia`` driver holds to an instance.

At bind (:meth:`Rebinder.to_vfio`) the GPU moves from ``nvidia`` to
``vfio-pci``, but only when no host process has its ``/dev/nvidia<N>``
open (``N``: the ``Device Minor`` the nvidia driver gives it) and the
driver grants its unbind lock: a GPU in use on the host fails the bind
with the processes that hold it. At release (:meth:`Rebinder.give_back`)
it goes back to ``nvidia`` once no process (the guest's QEMU) holds its
VFIO group.

Which GPUs the agent moved is kept in files under
``<state_path>/nvidia_gpu/rebound`` (one per GPU, holding the driver it
came from), so that an agent restarted while a GPU is with a guest still
reports it as one to prepare and gives it back at release; a GPU found on
``vfio-pci`` without such a file was put there by the operator and stays.
"""

from __future__ import annotations

import os

from oslo_log import log as logging

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import procfs
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import pci_binding
from cyborg.accelerator.drivers.utils import proc
from cyborg.accelerator.drivers.utils import sysfs

LOG = logging.getLogger(__name__)

HOST_DRIVER = 'nvidia'
VFIO_DRIVER = 'vfio-pci'


class RebindError(errors.DriverError):
    """A GPU cannot be moved between nvidia and vfio-pci."""

    msg_fmt = '%(reason)s'


class Rebinder:
    """Moves GPUs between ``nvidia`` and ``vfio-pci``, remembering which
    it moved in ``state_dir``; waits ``timeout`` seconds for each driver
    change."""

    def __init__(self, host: sysfs.HostRoot, state_dir: str,
                 timeout: float) -> None:
        self._host = host
        self._dir = state_dir
        self._timeout = timeout

    def moved(self, gpu: pci.PCIAddress) -> bool:
        """Whether the agent moved the GPU to vfio-pci (and has not
        given it back)."""
        return self._origin(gpu) is not None

    def to_vfio(self, gpu: pci.PCIAddress) -> None:
        """Move the GPU from nvidia to vfio-pci; a GPU on any other
        driver, or none, is left as it is (attachable, or not ours)."""
        if pci.driver(self._host, gpu) != HOST_DRIVER:
            return
        self._check_unused(gpu)
        if not pci_binding.driver_loaded(self._host, VFIO_DRIVER):
            raise RebindError(reason='the %s driver is not loaded on the '
                              'host (modprobe %s)' % (VFIO_DRIVER,
                                                      VFIO_DRIVER))
        if not procfs.lock_for_unbind(self._host, gpu):
            procfs.unlock(self._host, gpu)
            raise RebindError(reason='the nvidia driver still has clients '
                              'of GPU %s (its unbindLock was refused)'
                              % gpu)
        # Remembered first: an agent that dies halfway still gives the
        # GPU back at release.
        self._remember(gpu, HOST_DRIVER)
        try:
            self._move(gpu, VFIO_DRIVER)
        except host_errors.HostError as exc:
            self._recover(gpu)
            raise RebindError(reason='cannot move GPU %s from %s to %s: %s'
                              % (gpu, HOST_DRIVER, VFIO_DRIVER, exc))
        LOG.info('nvidia_gpu_driver: moved GPU %s from %s to %s', gpu,
                 HOST_DRIVER, VFIO_DRIVER)

    def give_back(self, gpu: pci.PCIAddress) -> None:
        """Give a GPU the agent moved back to the driver it came from."""
        origin = self._origin(gpu)
        if origin is None:
            return
        current = pci.driver(self._host, gpu)
        if current != origin:
            if current is not None:
                self._check_vfio_unused(gpu)
            try:
                pci_binding.set_driver_override(self._host, gpu, None)
                self._move(gpu, origin)
            except host_errors.HostError as exc:
                raise RebindError(reason='cannot give GPU %s back to %s: %s'
                                  % (gpu, origin, exc))
            LOG.info('nvidia_gpu_driver: gave GPU %s back to %s', gpu,
                     origin)
        self._forget(gpu)

    # The checks ---------------------------------------------------------

    def _check_unused(self, gpu: pci.PCIAddress) -> None:
        minor = procfs.device_minor(self._host, gpu)
        if minor is None:
            raise RebindError(reason='cannot tell which /dev/nvidia<N> is '
                              'GPU %s: no Device Minor in %s/%s/information'
                              % (gpu, procfs.PROC_GPUS, gpu))
        self._refuse_held(gpu, [procfs.device_file(minor)],
                          'in use on the host')

    def _check_vfio_unused(self, gpu: pci.PCIAddress) -> None:
        group = pci.iommu_group(self._host, gpu)
        if group is not None:
            # Unbinding a device a guest still has blocks in the kernel.
            self._refuse_held(gpu, ['/dev/vfio/%d' % group],
                              'still assigned')

    def _refuse_held(self, gpu: pci.PCIAddress, paths: list[str],
                     what: str) -> None:
        try:
            held = proc.holders(self._host, paths)
        except host_errors.HostError as exc:
            raise RebindError(reason='cannot tell whether GPU %s is %s: %s'
                              % (gpu, what, exc))
        if held:
            raise RebindError(reason='GPU %s is %s: %s' % (
                gpu, what, '; '.join(str(h) for h in held)))

    # The moves ----------------------------------------------------------

    def _move(self, gpu: pci.PCIAddress, target: str) -> None:
        """Unbind the GPU and bind it to ``target``; only ``target`` may
        take it meanwhile when it is vfio-pci (which matches no device by
        id)."""
        if target == VFIO_DRIVER:
            pci_binding.set_driver_override(self._host, gpu, target)
        pci_binding.unbind(self._host, gpu)
        pci_binding.wait_for_driver(self._host, gpu, None, self._timeout)
        pci_binding.bind(self._host, gpu, target)
        pci_binding.wait_for_driver(self._host, gpu, target, self._timeout)

    def _recover(self, gpu: pci.PCIAddress) -> None:
        """After a failed move to vfio-pci: back to nvidia if possible
        (then nothing is left to give back)."""
        try:
            pci_binding.set_driver_override(self._host, gpu, None)
            if pci.driver(self._host, gpu) == HOST_DRIVER:
                procfs.unlock(self._host, gpu)  # never unbound
            else:
                self._move(gpu, HOST_DRIVER)
        except host_errors.HostError as exc:
            LOG.warning('nvidia_gpu_driver: GPU %s could not be given back '
                        'to %s (%s); release tries again', gpu,
                        HOST_DRIVER, exc)
            return
        self._forget(gpu)

    # What the agent moved -------------------------------------------------

    def _path(self, gpu: pci.PCIAddress) -> str:
        return os.path.join(self._dir, str(gpu))

    def _origin(self, gpu: pci.PCIAddress) -> str | None:
        try:
            with open(self._path(gpu)) as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    def _remember(self, gpu: pci.PCIAddress, origin: str) -> None:
        os.makedirs(self._dir, exist_ok=True)
        with open(self._path(gpu), 'w') as f:
            f.write(origin + '\n')

    def _forget(self, gpu: pci.PCIAddress) -> None:
        try:
            os.unlink(self._path(gpu))
        except FileNotFoundError:
            pass
