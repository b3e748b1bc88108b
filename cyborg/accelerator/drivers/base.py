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

"""The accelerator driver interface.

A driver turns what it finds on the host into the device trees of
:mod:`cyborg.domain.device_tree`. Drivers are loaded by name from the
``cyborg.accelerator.driver`` entry point namespace
(``[agent] enabled_drivers``) and built as ``Driver(conf, runner=None,
host=None)``: ``runner`` runs its vendor commands (a
:class:`~cyborg.accelerator.drivers.utils.runner.CommandRunner` when
None), ``host`` is the
:class:`~cyborg.accelerator.drivers.utils.sysfs.HostRoot` it reads
(``[agent] host_root`` when None). Host capture passes recording ones,
the replay of a capture its fake tools.

**Types.** Attach types, health and preparations are the enums of
:mod:`cyborg.domain.device_tree` (:class:`~device_tree.AttachType`,
:class:`~device_tree.Health`, :class:`~device_tree.Preparation`); the
agent sends their values.

**Failures.** A driver reports what it cannot do with the exceptions of
:mod:`cyborg.accelerator.drivers.errors`: :class:`~errors.PrepareFailed`,
:class:`~errors.ProgramFailed`,
:class:`~errors.DriverConfigError` (from its constructor), all
:class:`~errors.DriverError`. The agent answers an RPC that ends in one as
that call's expected failure (its message is what users read); any other
exception is a bug in the driver, answered as an unexpected error and
logged with its traceback. :meth:`~AcceleratorDriver.discover`,
:meth:`~AcceleratorDriver.health`,
:meth:`~AcceleratorDriver.health_signals`,
:meth:`~AcceleratorDriver.reset_device` and
:meth:`~AcceleratorDriver.utilization` may raise anything: the agent
keeps the driver's devices as last reported (or reports them without
utilization, or keeps the device's taint) and logs why.

**Restore.** A host reboot makes the kernel forget what the driver
prepared. Before its first report after a start, the agent restores the
handles of the host's bound accelerator requests (see
:mod:`cyborg.domain.restore`): it asks :meth:`~AcceleratorDriver.is_prepared`
and, unless the answer is True, calls
:meth:`~AcceleratorDriver.restore_attach_handle` (by default
:meth:`~AcceleratorDriver.prepare_attach_handle`, which is safe to
repeat); a handle no request holds any more that the driver says is
prepared is released. A region programmed at bind is programmed again
with its image when its deployable no longer shows the function trait
the conductor recorded.

**Threads.** The agent calls a driver from two kinds of threads:

* the discovery: :meth:`~AcceleratorDriver.discover`, then
  :meth:`~AcceleratorDriver.health_signals` (by default through
  :meth:`~AcceleratorDriver.health`), :meth:`~AcceleratorDriver.reset_device`
  when the remediation catalog asks for it, and
  :meth:`~AcceleratorDriver.utilization` with its devices. It runs on the
  agent's periodic thread, and on an RPC thread after a programming; the
  agent runs one discovery at a time, so these three never overlap each
  other.
* the restore at start, before the first discovery:
  :meth:`~AcceleratorDriver.is_prepared`,
  :meth:`~AcceleratorDriver.restore_attach_handle`,
  :meth:`~AcceleratorDriver.release_attach_handle` (of a handle no
  accelerator request holds any more) and, for a region that lost its
  bitstream, :meth:`~AcceleratorDriver.discover` and
  :meth:`~AcceleratorDriver.program`; RPC calls on handles wait until
  it is done.
* RPC threads: :meth:`~AcceleratorDriver.prepare_attach_handle`,
  :meth:`~AcceleratorDriver.release_attach_handle` and
  :meth:`~AcceleratorDriver.program`. Several may run at once (for
  different handles or devices), and while a discovery runs.

A driver whose calls must not overlap (state shared between them, a
device that cannot be read while it is programmed) sets
:attr:`~AcceleratorDriver.serialized`: the agent then holds one lock per
driver around each of its calls.
"""

import abc

from cyborg.accelerator.drivers import errors
from cyborg.domain import device_tree
from cyborg.domain import partitions
from cyborg.domain import remediation
from cyborg.domain import utilization as utilization_mod


class AcceleratorDriver(abc.ABC):
    """What every accelerator driver provides.

    Only :meth:`discover` is required. The hooks have defaults suited to
    devices that need no preparation.
    """

    #: Name of the driver in the entry point namespace.
    name: str = ''

    #: True: the agent makes this driver's calls one at a time (see the
    #: module docstring); False: they may overlap as described there.
    serialized: bool = False

    @abc.abstractmethod
    def discover(self) -> list[device_tree.Device]:
        """The devices of this host that the driver manages."""

    def health(self, devices: list[device_tree.Device]
               ) -> dict[str, device_tree.Health]:
        """Health per device address; by default what discover said."""
        return {device.address: device.health for device in devices}

    def health_signals(self, devices: list[device_tree.Device]
                       ) -> dict[str, list[remediation.Signal]]:
        """The health signals of each device address (see
        :mod:`cyborg.domain.remediation`); the agent turns them into the
        devices' taints through the remediation catalog.

        By default the driver's own verdict: a device :meth:`health`
        says is unhealthy has the signal ``unhealthy``. Called by the
        discovery in place of :meth:`health`; edge-triggered signals (a
        new kernel log line, a counter that rose) are given once.
        """
        health = self.health(devices)
        return {device.address: (
            [remediation.Signal(remediation.UNHEALTHY)]
            if health.get(device.address, device.health)
            == device_tree.Health.UNHEALTHY else [])
            for device in devices}

    def reset_device(self, device: device_tree.Device) -> None:
        """Reset ``device`` (reported by :meth:`discover`) through the
        vendor tool, asked by the remediation catalog once no
        accelerator request is bound on it. Returns once the device is
        usable again; raises
        :class:`~cyborg.accelerator.drivers.errors.ResetFailed` when the
        reset failed, :class:`NotImplementedError` (the default) when
        the driver cannot reset this device."""
        raise NotImplementedError('%s cannot reset devices' % self.name)

    def utilization(self, devices: list[device_tree.Device]
                    ) -> dict[str, utilization_mod.Metrics]:
        """Utilization per device address, for the metrics of
        :mod:`cyborg.domain.utilization` the hardware exposes (by
        default none).

        Called after :meth:`discover` with its devices. A device the
        driver cannot measure now (a tool missing or failing, a file
        absent) is left out; it never makes the report fail. Only reads:
        nothing here may change a device's settings.
        """
        return {}

    def program(self, controlpath: device_tree.ControlPathID,
                image_path: str) -> str | None:
        """Program the image at ``image_path`` (an FPGA bitstream, a file
        on this host that the agent was given) through ``controlpath``
        (one of the control path ids the driver reported for the device).

        Returns once the device runs the image: the id of the function
        the device runs now, where the driver can read it (the conductor
        then records that function), else None (the conductor records
        the function the image's metadata names). Raises
        :class:`~cyborg.accelerator.drivers.errors.ProgramFailed` on
        failure (the message becomes the ARQ's bind error);
        :class:`NotImplementedError` (the default) when the driver cannot
        program devices. It must be safe to call again with the same
        image.
        """
        raise NotImplementedError('%s cannot program devices' % self.name)

    def set_partitions(self, address: str, profile: str | None,
                       pinned: bool) -> None:
        """Have the device at ``address`` serve partition ``profile``
        (None: the one the driver's policy chooses), kept against the
        policy when ``pinned``; shown from the next discovery. Raises
        :class:`~cyborg.accelerator.drivers.errors.PartitionRefused`
        (the default: the driver partitions no device) or
        :class:`~cyborg.accelerator.drivers.errors.PartitionProfileUnknown`.
        """
        raise errors.PartitionRefused(
            reason='%s does not partition devices' % self.name)

    def use_switch_guard(self, guard: partitions.SwitchGuard) -> None:
        """Ask ``guard`` (the agent gives its own before the first
        discovery) before an empty device serves a partition profile it
        did not serve in the last discovery, and serve what it answers:
        Placement may have granted what the device serves to a claim
        whose bind has not come yet. By default nothing: the driver
        partitions no device."""
        return None

    def prepare_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        """Make ``handle`` attachable as ``preparation`` says (the
        preparation this driver declared for the handle's deployable:
        e.g. create its mdev). Safe to call again for a handle already
        prepared; raises
        :class:`~cyborg.accelerator.drivers.errors.PrepareFailed`.

        Devices whose handles are attachable as discovered need nothing.
        """
        return None

    def release_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation) -> None:
        """Undo :meth:`prepare_attach_handle` (safe to call again, and
        for a handle whose device is gone); raises
        :class:`~cyborg.accelerator.drivers.errors.PrepareFailed`."""
        return None

    def is_prepared(self, handle: device_tree.AttachHandle,
                    handle_uuid: str,
                    preparation: device_tree.Preparation) -> bool | None:
        """Whether :meth:`prepare_attach_handle`'s work on ``handle`` is
        in place on the host now (its mdev exists, its VF runs the vGPU
        type): True, False, or None (the default) when the driver cannot
        read it back (a VF's VLAN). Only reads; raises nothing but
        :class:`~cyborg.accelerator.drivers.errors.DriverError`.

        At start the agent restores a bound handle unless this is True,
        and releases a handle no accelerator request holds only when it
        is True.
        """
        return None

    def restore_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str,
                              preparation: device_tree.Preparation
                              ) -> None:
        """Prepare ``handle`` again after the host lost its preparation
        (a reboot); by default :meth:`prepare_attach_handle`. Raises
        :class:`~cyborg.accelerator.drivers.errors.PrepareFailed` with
        the reason the agent reports."""
        self.prepare_attach_handle(handle, handle_uuid, preparation)
