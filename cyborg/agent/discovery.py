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

"""Device discovery on one compute host and its report to the conductor."""

from collections.abc import Callable
import socket
import threading
import typing

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
from stevedore import named

from cyborg.accelerator.drivers import base
from cyborg.agent import driver_calls
from cyborg.agent import remediate
from cyborg.common import exception
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)

DRIVER_NAMESPACE = 'cyborg.accelerator.driver'


def load_drivers(conf: cfg.ConfigOpts, runner: typing.Any = None,
                 host: typing.Any = None) -> list[base.AcceleratorDriver]:
    """The drivers ``[agent] enabled_drivers`` names, in that order,
    each built with ``runner`` and ``host`` when given (see
    :mod:`cyborg.accelerator.drivers.base`; a driver that takes only
    ``conf`` still loads without them)."""
    missing: list[str] = []
    sources = {name: value for name, value in (('runner', runner),
                                               ('host', host))
               if value is not None}
    manager = named.NamedExtensionManager(
        DRIVER_NAMESPACE, names=conf.agent.enabled_drivers,
        invoke_on_load=True, invoke_args=(conf,), invoke_kwds=sources,
        name_order=True,
        on_missing_entrypoints_callback=missing.extend,
        propagate_map_exceptions=True, on_load_failure_callback=_load_failed)
    if missing:
        raise exception.ConfigInvalid(
            reason='[agent] enabled_drivers names unknown drivers: %s' %
            ', '.join(sorted(missing)))
    drivers: list[base.AcceleratorDriver] = []
    for extension in manager:
        # invoke_on_load: every extension holds its driver.
        driver = typing.cast(base.AcceleratorDriver, extension.obj)
        driver.name = extension.name
        drivers.append(driver)
    return drivers


def _load_failed(_manager, entrypoint, error):
    raise exception.ConfigInvalid(
        reason='accelerator driver %s cannot be loaded: %s' %
        (entrypoint.name, error))


def resource_provider_name(conf: cfg.ConfigOpts) -> str:
    """The compute node provider name: configured, else this host's FQDN."""
    return conf.agent.resource_provider_name or socket.getfqdn()


def check_identity(host: str, rp_name: str) -> None:
    """Refuse to start with a host identity that cannot work."""
    for option, value in (('[DEFAULT] host', host),
                          ('[agent] resource_provider_name', rp_name)):
        if not value or value.strip() != value or len(value) > 255 or any(
                char.isspace() or char == '/' for char in value):
            raise exception.ConfigInvalid(
                reason='%s is %r; it must be a non-empty name of at most '
                       '255 characters without spaces or "/"' %
                       (option, value))


class Discovery:
    """Asks every driver for its devices and reports the host's tree.

    One discovery at a time: the periodic thread and an RPC thread (after
    a programming) may both ask for one, and the second waits for the
    first (see :mod:`cyborg.accelerator.drivers.base`).
    """

    def __init__(self, host: str, rp_name: str,
                 drivers: list[base.AcceleratorDriver], conductor_api,
                 locks: driver_calls.DriverLocks | None = None,
                 preparations: driver_calls.Preparations | None = None,
                 remediator: remediate.Remediator | None = None,
                 extra_signals: Callable[
                     [str], dict[str, list[remediation.Signal]]]
                 | None = None):
        """``locks``: the per-driver locks, shared with the agent's RPC
        endpoint; ``preparations`` remembers what the drivers declared
        (for the endpoint too); ``remediator`` turns the drivers' health
        signals into taints (by default the default catalog, and no
        device is ever reset); ``extra_signals`` gives, by driver name,
        signals of the agent's own to add to the driver's (the restore's
        ``restore.failed``)."""
        self.host = host
        self.rp_name = rp_name
        self._drivers = drivers
        self._conductor = conductor_api
        self._locks = locks or driver_calls.DriverLocks()
        self.preparations = preparations or driver_calls.Preparations()
        self._extra_signals = extra_signals
        self._remediator = remediator or remediate.Remediator(
            remediation.Tracker(remediation.load_catalog(())), self._locks)
        # Held for a whole discovery and its report.
        self._lock = threading.Lock()
        # The digest of the last report the conductor answered: while the
        # tree keeps it, a report sends the digest alone.
        self._acknowledged: str | None = None

    def collect(self) -> tuple[list[dict], list[str]]:
        """The host's tree in wire form and the drivers that failed."""
        wire, failed, _utilization = self.collect_all()
        return wire, failed

    def collect_all(self, context=None
                    ) -> tuple[list[dict], list[str],
                               dict[str, utilization_mod.Metrics]]:
        """The host's tree in wire form, the drivers that failed, and
        the utilization of its devices (outside the tree). Every
        discovery is one report to the remediation state; with a
        ``context`` (a report to send) due resets are done too."""
        with self._lock:
            return self._collect_all(context)

    def _collect_all(self, context=None
                     ) -> tuple[list[dict], list[str],
                                dict[str, utilization_mod.Metrics]]:
        devices: list[device_tree.Device] = []
        failed: list[str] = []
        utilization: dict[str, utilization_mod.Metrics] = {}
        reported: list[remediate.Reported] = []
        for driver in self._drivers:
            # Shared with the RPC endpoint: a driver that declares its calls
            # serialized is never asked to discover while it prepares, releases
            # or programs a device.
            with self._locks.held(driver):
                result = self._discover(driver)
                if result is None:
                    failed.append(driver.name)
                    continue
                found, signals = result
                if self._extra_signals is not None:
                    signals = _merged_signals(
                        signals, self._extra_signals(driver.name))
                utilization.update(self._utilization(driver, found))
            self.preparations.remember(driver.name, found)
            reported.append(remediate.Reported(driver, found, signals))
            devices.extend(found)
        self._remediator.apply(context, reported, failed)
        return (device_tree.tree_to_wire(devices), sorted(failed),
                utilization)

    def _discover(self, driver: base.AcceleratorDriver
                  ) -> tuple[list[device_tree.Device],
                             dict[str, list[remediation.Signal]]] | None:
        """The driver's devices and their health signals; None when it
        fails."""
        try:
            found = driver.discover()
            signals = driver.health_signals(found)
            for device in found:
                device.driver = driver.name
        except Exception:
            # None, not []: an empty list would make the conductor remove the
            # driver's devices; a failed driver's are kept as last reported.
            LOG.exception('Driver %s failed to discover devices; '
                          'keeping its devices as last reported',
                          driver.name)
            return None
        return found, signals

    def _utilization(self, driver: base.AcceleratorDriver,
                     found: list[device_tree.Device]
                     ) -> dict[str, utilization_mod.Metrics]:
        """The driver's utilization of its devices: only known metrics
        of devices it reported; nothing when it fails (the tree is sent
        all the same)."""
        if not found:
            return {}
        try:
            measured = driver.utilization(found)
        except Exception:
            LOG.exception('Driver %s failed to read the utilization of its '
                          'devices; they are reported without it',
                          driver.name)
            return {}
        addresses = {device.address for device in found}
        # Only the driver's own devices: a reading for another address would
        # land on another driver's device.
        return {address: metrics for address, metrics in
                utilization_mod.clean_report(measured).items()
                if address in addresses}

    def report(self, context) -> dict | None:
        """Discover and send one report; None if the conductor is away.

        The digest covers the tree only: a report whose utilization
        alone changed is an unchanged tree to the conductor. Once the
        conductor has answered a report, the next ones of the same tree
        send its digest without the tree (see
        :meth:`cyborg.conductor.rpcapi.ConductorAPI.report_inventory`).
        """
        # Held through the send too: reports of the host reach the conductor in
        # the order they were collected, so an older tree never replaces a
        # newer one.
        with self._lock:
            wire, failed, utilization = self._collect_all(context)
            digest = device_tree.tree_digest({'devices': wire,
                                              'failed': failed})
            try:
                answer = self._conductor.report_inventory(
                    context, self.host, self.rp_name, wire, digest, failed,
                    utilization=utilization,
                    acknowledged=digest == self._acknowledged)
            except messaging.MessagingTimeout:
                # The conductor may still apply it; sending it again is
                # harmless: a tree already applied (same digest) is not applied
                # twice.
                LOG.warning('The conductor did not answer the inventory '
                            'report of %s in time; it is sent again '
                            'shortly', self.host)
                return None
            self._acknowledged = digest
            return answer


def _merged_signals(signals: dict[str, list[remediation.Signal]],
                    extra: dict[str, list[remediation.Signal]]
                    ) -> dict[str, list[remediation.Signal]]:
    merged = {address: list(found) for address, found in signals.items()}
    for address, more in extra.items():
        merged.setdefault(address, []).extend(more)
    return merged
