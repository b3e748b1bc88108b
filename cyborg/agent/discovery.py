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

import socket

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
from stevedore import named

from cyborg.accelerator.drivers import base
from cyborg.common import exception
from cyborg.domain import device_tree
from cyborg.domain import utilization as utilization_mod

LOG = logging.getLogger(__name__)

DRIVER_NAMESPACE = 'cyborg.accelerator.driver'


def load_drivers(conf: cfg.ConfigOpts) -> list[base.AcceleratorDriver]:
    """The drivers ``[agent] enabled_drivers`` names, in that order."""
    missing = []
    manager = named.NamedExtensionManager(
        DRIVER_NAMESPACE, names=conf.agent.enabled_drivers,
        invoke_on_load=True, invoke_args=(conf,), name_order=True,
        on_missing_entrypoints_callback=missing.extend,
        propagate_map_exceptions=True, on_load_failure_callback=_load_failed)
    if missing:
        raise exception.ConfigInvalid(
            reason='[agent] enabled_drivers names unknown drivers: %s' %
            ', '.join(sorted(missing)))
    drivers = []
    for extension in manager:
        extension.obj.name = extension.name
        drivers.append(extension.obj)
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
    """Asks every driver for its devices and reports the host's tree."""

    def __init__(self, host: str, rp_name: str,
                 drivers: list[base.AcceleratorDriver], conductor_api):
        self.host = host
        self.rp_name = rp_name
        self._drivers = drivers
        self._conductor = conductor_api

    def collect(self) -> tuple[list[dict], list[str]]:
        """The host's tree in wire form and the drivers that failed."""
        wire, failed, _utilization = self.collect_all()
        return wire, failed

    def collect_all(self) -> tuple[list[dict], list[str],
                                   dict[str, utilization_mod.Metrics]]:
        """The host's tree in wire form, the drivers that failed, and
        the utilization of its devices (outside the tree)."""
        devices, failed = [], []
        utilization: dict[str, utilization_mod.Metrics] = {}
        for driver in self._drivers:
            try:
                found = driver.discover()
                health = driver.health(found)
            except Exception:
                LOG.exception('Driver %s failed to discover devices; '
                              'keeping its devices as last reported',
                              driver.name)
                failed.append(driver.name)
                continue
            for device in found:
                device.driver = driver.name
                device.health = health.get(device.address, device.health)
            devices.extend(found)
            utilization.update(self._utilization(driver, found))
        return (device_tree.tree_to_wire(devices), sorted(failed),
                utilization)

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
        return {address: metrics for address, metrics in
                utilization_mod.clean_report(measured).items()
                if address in addresses}

    def report(self, context) -> dict | None:
        """Discover and send one report; None if the conductor is away.

        The digest covers the tree only: a report whose utilization
        alone changed is an unchanged tree to the conductor.
        """
        wire, failed, utilization = self.collect_all()
        digest = device_tree.tree_digest({'devices': wire, 'failed': failed})
        try:
            return self._conductor.report_inventory(
                context, self.host, self.rp_name, wire, digest, failed,
                utilization=utilization)
        except messaging.MessagingTimeout:
            LOG.warning('The conductor did not answer the inventory report '
                        'of %s in time; it is sent again shortly', self.host)
            return None
