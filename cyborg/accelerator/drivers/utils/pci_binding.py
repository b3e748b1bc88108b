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

"""Moving a PCI function from one host driver to another through sysfs.

The kernel's ``driver_override`` ABI (the sequence libvirt's managed mode
and NVIDIA's own tools use): ``driver_override`` names the only driver
that may take the function, ``<dev>/driver/unbind`` releases it from its
driver, ``drivers/<name>/bind`` hands it to a driver. Each write is the
kernel's answer on a real host; :func:`wait_for_driver` still polls the
``driver`` link, as a bind can also be finished by something else
(udev, the emulated kernel of the fixture trees).
"""

from __future__ import annotations

import time

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

DRIVERS = '/sys/bus/pci/drivers'
# How often wait_for_driver reads the driver link.
POLL_INTERVAL = 0.05


def driver_loaded(host: sysfs.HostRoot, name: str) -> bool:
    """Whether the PCI driver ``name`` is registered (its module
    loaded)."""
    return sysfs.exists(host, sysfs.path(DRIVERS, name))


def driver_override(host: sysfs.HostRoot,
                    address: pci.PCIAddress) -> str | None:
    """The function's ``driver_override``; ``None`` when unset (the
    kernel shows ``(null)``)."""
    text = sysfs.read_text(host, pci.device_path(address,
                                                 'driver_override'))
    return None if text in (None, '', '(null)') else text


def set_driver_override(host: sysfs.HostRoot, address: pci.PCIAddress,
                        name: str | None) -> None:
    """Let only driver ``name`` take the function; ``None`` clears it (as
    ``echo > driver_override``). Binds or unbinds nothing."""
    sysfs.write_text(host, pci.device_path(address, 'driver_override'),
                     name if name else '\n')


def unbind(host: sysfs.HostRoot, address: pci.PCIAddress) -> None:
    """Release the function from its driver, if it has one."""
    if pci.driver(host, address) is not None:
        sysfs.write_text(host, pci.device_path(address, 'driver', 'unbind'),
                         str(address))


def bind(host: sysfs.HostRoot, address: pci.PCIAddress, name: str) -> None:
    """Hand the unbound function to driver ``name``."""
    sysfs.write_text(host, sysfs.path(DRIVERS, name, 'bind'), str(address))


def wait_for_driver(host: sysfs.HostRoot, address: pci.PCIAddress,
                    wanted: str | None, timeout: float) -> None:
    """Wait until the function is bound to ``wanted`` (``None``:
    unbound); after ``timeout`` seconds, raises
    :class:`~.errors.HostError` naming the driver it is on."""
    deadline = time.monotonic() + timeout
    while True:
        current = pci.driver(host, address)
        if current == wanted:
            return
        if time.monotonic() >= deadline:
            raise errors.HostError(
                '%s is %s after %.1fs, not %s' % (
                    address, _bound(current), timeout, _bound(wanted)))
        time.sleep(POLL_INTERVAL)


def _bound(name: str | None) -> str:
    return 'unbound' if name is None else 'bound to %s' % name
