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

"""Health signals every PCI device gives in sysfs, whatever holds it.

Read-only, and independent of any vendor tool, so a passthrough device
bound to ``vfio-pci`` has them too:

* ``pcie.gone``: the function is no longer on the bus;
* ``pcie.aer-fatal`` / ``pcie.aer-nonfatal``: the ``TOTAL_ERR_FATAL`` /
  ``TOTAL_ERR_NONFATAL`` counter of ``aer_dev_fatal`` /
  ``aer_dev_nonfatal`` rose since the last reading (the first reading of
  a device is its baseline: errors from before the agent started are
  not signals);
* ``pcie.link-width`` / ``pcie.link-speed``: ``current_link_width`` /
  ``current_link_speed`` below ``max_link_width`` / ``max_link_speed``
  (a link that reads ``Unknown`` or 0, as a virtual function's does,
  gives no signal).

The remediation catalog (:mod:`cyborg.domain.remediation`) says what
each signal does to the device.
"""

from __future__ import annotations

import re

from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import remediation

GONE = 'pcie.gone'
AER_FATAL = 'pcie.aer-fatal'
AER_NONFATAL = 'pcie.aer-nonfatal'
LINK_WIDTH = 'pcie.link-width'
LINK_SPEED = 'pcie.link-speed'

# (signal, file, total line)
_AER = ((AER_FATAL, 'aer_dev_fatal', 'TOTAL_ERR_FATAL'),
        (AER_NONFATAL, 'aer_dev_nonfatal', 'TOTAL_ERR_NONFATAL'))
_SPEED = re.compile(r'^\s*([0-9.]+)\s*GT/s')


def aer_total(host: sysfs.HostRoot, address: pci.PCIAddress | str,
              name: str, total: str) -> int | None:
    """The ``total`` counter of the AER statistics file ``name``; None
    when the kernel has no AER statistics for the device."""
    lines = sysfs.read_lines(host, pci.device_path(address, name))
    for line in lines or ():
        parts = line.split()
        if len(parts) == 2 and parts[0] == total and parts[1].isdigit():
            return int(parts[1])
    return None


def link_speed(text: str | None) -> float | None:
    """``16.0 GT/s PCIe`` -> 16.0; None for ``Unknown`` and the like."""
    match = _SPEED.match(text or '')
    return float(match.group(1)) if match else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def link_signals(host: sysfs.HostRoot, address: pci.PCIAddress | str
                 ) -> list[remediation.Signal]:
    """Link width and speed below their maximum."""
    found = []

    def read(name: str) -> str | None:
        return sysfs.read_text(host, pci.device_path(address, name))

    width, max_width = (_int(read('current_link_width')),
                        _int(read('max_link_width')))
    if width and max_width and width < max_width:
        found.append(remediation.Signal(
            LINK_WIDTH, 'PCIe link x%d of x%d' % (width, max_width)))
    speed, max_speed = (link_speed(read('current_link_speed')),
                        link_speed(read('max_link_speed')))
    if speed and max_speed and speed < max_speed:
        found.append(remediation.Signal(
            LINK_SPEED, 'PCIe link at %g of %g GT/s' % (speed, max_speed)))
    return found


class Monitor:
    """The sysfs signals of one driver's devices; remembers the AER
    counters between readings (one instance per driver)."""

    def __init__(self, host: sysfs.HostRoot) -> None:
        self._host = host
        self._counters: dict[tuple[str, str], int] = {}

    def signals(self, address: pci.PCIAddress | str
                ) -> list[remediation.Signal]:
        address = str(address)
        try:
            if not pci.exists(self._host, address):
                self._forget(address)
                return [remediation.Signal(
                    GONE, 'PCI function %s is gone' % address)]
            return self._aer(address) + link_signals(self._host, address)
        except host_errors.HostError:
            # Unreadable now (going away?): no signal rather than a wrong
            # one; presence is checked again at the next report.
            return []

    def _aer(self, address: str) -> list[remediation.Signal]:
        found = []
        for signal, name, total in _AER:
            count = aer_total(self._host, address, name, total)
            if count is None:
                continue
            before = self._counters.get((address, signal))
            self._counters[(address, signal)] = count
            if before is not None and count > before:
                found.append(remediation.Signal(
                    signal, '%s rose from %d to %d' % (total, before,
                                                       count)))
        return found

    def _forget(self, address: str) -> None:
        for key in [k for k in self._counters if k[0] == address]:
            del self._counters[key]
