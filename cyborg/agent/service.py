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

"""Assembles the agent RPC service."""

from collections.abc import Callable
import functools
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import manager
from cyborg.agent import partition_guard
from cyborg.agent import remediate
from cyborg.agent import restore
from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import service
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.domain import remediation

# Seconds before a report the conductor did not answer is sent again.
REPORT_RETRY_DELAY = 5


def catalog(conf: cfg.ConfigOpts) -> remediation.Catalog:
    """The remediation catalog with ``[remediation] override``;
    ConfigInvalid naming a wrong entry."""
    try:
        return remediation.load_catalog(conf.remediation.override)
    except ValueError as exc:
        raise exception.ConfigInvalid(reason='[remediation] override: %s'
                                      % exc)


def create(conf: cfg.ConfigOpts, transport,
           glance_factory: Callable[[], Any] | None = None,
           runner: Any = None, host_root: Any = None) -> service.RPCService:
    """The agent; raises ConfigInvalid for a bad identity, driver list
    or remediation catalog.

    ``glance_factory`` builds the Glance client the agent fetches
    bitstreams with (on the first programming); without it, programming
    a Glance image fails with NoBitstreamSource. ``runner`` and
    ``host_root``: what the drivers run commands through and read (the
    replay of a capture, see :mod:`cyborg.hostcapture.replay`); None:
    their own."""
    host = conf.host
    rp_name = discovery.resource_provider_name(conf)
    discovery.check_identity(host, rp_name)
    conductor_api = conductor_rpcapi.ConductorAPI(
        transport, version_cap=conf.upgrade_levels.conductor)
    drivers = discovery.load_drivers(conf, runner=runner,
                                     host=host_root)
    guard = partition_guard.ConductorSwitchGuard(conductor_api, host)
    for driver in drivers:
        driver.use_switch_guard(guard)
    locks = driver_calls.DriverLocks()
    remediator = remediate.Remediator(
        remediation.Tracker(catalog(conf), conf.remediation.recovery_reports),
        locks,
        bound_devices=lambda context: conductor_api.bound_devices(
            context, host),
        reset_devices=conf.remediation.reset_devices)

    # One source (one bitstream cache) for the restore and the endpoint,
    # built on first use; the endpoint's programmings wait for the restore.
    @functools.cache
    def images() -> manager.ImageSource:
        return manager.ImageSource.from_conf(conf, glance_factory)

    restorer = restore.Restorer(host, conductor_api, drivers, locks,
                                images=images)
    finder = discovery.Discovery(host, rp_name, drivers, conductor_api,
                                 locks=locks, remediator=remediator,
                                 extra_signals=restorer.signals)
    endpoint = manager.AgentManager(
        host, conductor_api, drivers, images=images,
        report=finder.report, locks=locks,
        preparations=finder.preparations, restored=restorer.wait)
    interval = conf.agent.discovery_interval

    def discover_and_report():
        """Restore the host's prepared handles (once), then report;
        retry soon when the conductor did not answer."""
        context = cyborg_context.get_admin_context()
        if not restorer.run(context) or finder.report(context) is None:
            return min(REPORT_RETRY_DELAY, interval)
        return None

    tasks = [
        service.PeriodicTask('agent-heartbeat', endpoint.heartbeat,
                             conf.heartbeat_interval),
        service.PeriodicTask('agent-discovery', discover_and_report,
                             interval),
    ]
    listener = metrics.Listener(conf, conf.metrics.agent_port)
    return service.RPCService(transport, constants.AGENT_TOPIC, host,
                              endpoint, periodic_tasks=tasks,
                              on_start=listener.start,
                              on_stop=lambda timeout: listener.stop())
