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
(``[agent] enabled_drivers``).
"""

import abc

from cyborg.domain import device_tree
from cyborg.domain import utilization as utilization_mod


class AcceleratorDriver(abc.ABC):
    """What every accelerator driver provides.

    Only :meth:`discover` is required. The hooks have defaults suited to
    devices that need no preparation.
    """

    #: Name of the driver in the entry point namespace.
    name: str = ''

    @abc.abstractmethod
    def discover(self) -> list[device_tree.Device]:
        """The devices of this host that the driver manages."""

    def health(self, devices: list[device_tree.Device]) -> dict[str, str]:
        """Health per device address; by default what discover said."""
        return {device.address: device.health for device in devices}

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
                image_path: str) -> None:
        """Program the image at ``image_path`` (an FPGA bitstream, a file
        on this host that the agent was given) through ``controlpath``
        (one of the control path ids the driver reported for the device).

        Returns once the device runs the image. Raises on failure (the
        message becomes the ARQ's bind error);
        :class:`NotImplementedError` (the default) when the driver cannot
        program devices. Called on agent RPC threads, when a bind asks
        for a bitstream or function; it must be safe to call again with
        the same image.
        """
        raise NotImplementedError('%s cannot program devices' % self.name)

    def prepare_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str) -> None:
        """Make ``handle`` attachable (e.g. create its mdev).

        Devices whose handles are attachable as discovered need nothing.
        """
        return None

    def release_attach_handle(self, handle: device_tree.AttachHandle,
                              handle_uuid: str) -> None:
        """Undo :meth:`prepare_attach_handle`."""
        return None
