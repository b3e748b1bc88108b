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

"""The base of the drivers that report PCI functions.

Every PCI driver's constructor starts the same way: register and read its
option group, take the host root and the command runner it was given
(tests pass a fixture tree and fake tools, host capture recording ones)
or build them (``[agent] host_root``, a real runner), check
its resource class, addresses and PCI ids, and keep a :class:`Once` for
conditions it logs. :class:`PCIDriver` does that once; the option
checks are also functions, for options outside a driver's own block.

A configuration that cannot work raises
:class:`~cyborg.accelerator.drivers.errors.DriverConfigError` naming the
group and option; raised from a constructor, it stops the agent at start.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import re
import types

from oslo_config import cfg

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import pcie_health
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import resource_names

_HEX_ID = re.compile(r'^(?:0x)?([0-9a-f]{4})$')

# Placement's limit on resource class and trait names.
MAX_NAME = 255


# Where the option checks below, and the drivers, find it.
config_error = errors.config_error


def parse_hex_id(text: str, group: str, option: str) -> int:
    """A PCI vendor or device id, ``8086`` or ``0x8086``."""
    match = _HEX_ID.match(str(text).strip().lower())
    if match is None:
        raise config_error(group, option, '%r is not a PCI id (4 hex '
                           'digits, e.g. 8086)' % (text,))
    return int(match.group(1), 16)


def check_resource_class(name: str, group: str, option: str) -> str:
    if (len(name) > MAX_NAME
            or not resource_names.is_valid_resource_class(name)):
        raise config_error(group, option, '%r is not a resource class '
                           '(a standard one or CUSTOM_[A-Z0-9_]+)' % name)
    return name


def check_trait(name: str, group: str, option: str) -> str:
    if len(name) > MAX_NAME or not resource_names.is_valid_trait(name):
        raise config_error(group, option, '%r is not a trait (a standard '
                           'one or CUSTOM_[A-Z0-9_]+)' % name)
    return name


def parse_addresses(values: list[str], group: str,
                    option: str) -> list[pci.PCIAddress]:
    """PCI addresses of an option, in any spelling the helpers accept."""
    found = []
    for value in values:
        try:
            found.append(pci.parse_address(value))
        except host_errors.InvalidPCIAddress:
            raise config_error(group, option, '%r is not a PCI address '
                               '(e.g. 0000:3b:00.0)' % (value,))
    return found


class Once:
    """Remembers which conditions were already logged, so that a
    condition that lasts is logged when it appears, not at every
    discovery; one that went away and comes back is logged again.

    Call :meth:`next_round` at the start of each discovery and log only
    when :meth:`first` answers ``True``.
    """

    def __init__(self) -> None:
        self._previous: set[object] = set()
        self._current: set[object] = set()

    def next_round(self) -> None:
        self._previous, self._current = self._current, set()

    def first(self, key: object) -> bool:
        """Whether ``key`` is new: seen neither in the last round nor
        before in this one."""
        new = key not in self._previous and key not in self._current
        self._current.add(key)
        return new


class PCIDriver(base.AcceleratorDriver):
    """A driver of PCI functions, with its option group read and checked.

    Subclasses name their options module (``group``, ``register_opts``)
    in :attr:`options_module`, then read what is theirs from
    ``self._options`` with the checks below.
    """

    #: The module of the driver's option group; ``None``: it has none.
    options_module: types.ModuleType | None = None

    def __init__(self, conf: cfg.ConfigOpts,
                 runner: runner_mod.Runner | None = None,
                 host: sysfs.HostRoot | None = None) -> None:
        self._conf = conf
        if self.options_module is not None:
            # Registered here too: a driver works on any ConfigOpts.
            self.options_module.register_opts(conf)
            self._options = conf[self.group]
        self._host = (host if host is not None
                      else sysfs.HostRoot.from_conf(conf))
        self._runner = (runner if runner is not None
                        else runner_mod.CommandRunner())
        self._once = Once()
        self._pcie = pcie_health.Monitor(self._host)

    def health_signals(self, devices: list[device_tree.Device]
                       ) -> dict[str, list[remediation.Signal]]:
        """The driver's verdict, and the PCIe signals of sysfs
        (:mod:`~cyborg.accelerator.drivers.utils.pcie_health`)."""
        found = super().health_signals(devices)
        for device in devices:
            found.setdefault(device.address, []).extend(
                self._pcie.signals(device.address))
        return found

    @property
    def group(self) -> str:
        """The name of the driver's option group."""
        assert self.options_module is not None
        return self.options_module.group.name

    def config_error(self, option: str,
                     reason: str) -> errors.DriverConfigError:
        return config_error(self.group, option, reason)

    def _resource_class(self, option: str = 'resource_class') -> str:
        return check_resource_class(self._options[option], self.group,
                                    option)

    def _hex_ids(self, option: str = 'device_ids',
                 known: Iterable[int] | None = None,
                 what: str = '') -> frozenset[int]:
        """The ids of a list option; with ``known``, ids outside it are
        refused (``<id>: not <what> (known: ...)``) and an empty option
        means all of them."""
        ids = {parse_hex_id(value, self.group, option)
               for value in self._options[option]}
        if known is None:
            return frozenset(ids)
        known = frozenset(known)
        unknown = sorted(ids - known)
        if unknown:
            raise self.config_error(option, '%s: not %s (known: %s)' % (
                ', '.join('%04x' % i for i in unknown), what,
                ', '.join('%04x' % i for i in sorted(known))))
        return frozenset(ids or known)

    def _option_addresses(self, option: str = 'addresses'
                          ) -> set[pci.PCIAddress]:
        return set(parse_addresses(self._options[option], self.group,
                                   option))

    def _check_addresses(self, addresses: Iterable[pci.PCIAddress],
                         accept: Callable[[pci.PCIDevice], bool],
                         what: str) -> list[pci.PCIAddress]:
        """Refuse a configured address whose device is not ``what``
        (``accept`` says no); an address with no device yet is accepted
        (it may be hot-plugged later). Returns the addresses found."""
        found = []
        for address in sorted(addresses):
            try:
                device = pci.read_device(self._host, address)
            except host_errors.DeviceNotFound:
                continue
            if not accept(device):
                raise self.config_error('addresses', '%s is %04x:%04x, '
                                        'not %s' % (address,
                                                    device.vendor_id,
                                                    device.device_id, what))
            found.append(address)
        return found
