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

"""Assembles the conductor RPC service."""

from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import glance as glance_client
from cyborg.clients import placement as placement_client
from cyborg.common import constants
from cyborg.common import metrics
from cyborg.common import service
from cyborg.conductor import alternatives
from cyborg.conductor import binding
from cyborg.conductor import fleet_metrics
from cyborg.conductor import manager
from cyborg.conductor import partitions
from cyborg.conductor import placement_sync
from cyborg.conductor import programming
from cyborg.conductor import quotas
from cyborg.conductor import sync_worker
from cyborg.conductor import usage_audit
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import services as services_db
from cyborg.domain import device_tree
from cyborg.notifications import notifier as notifications_notifier


class AgentHandles:
    """Asks a handle's agent to prepare and release it (as its
    deployable's preparation says); handles that need none cost
    nothing."""

    def __init__(self, transport, timeout: float,
                 version_cap: str | None = None,
                 program_timeout: float | None = None):
        """``timeout``: seconds to wait for a preparation or release;
        ``program_timeout``: for a programming (default ``timeout``)."""
        self._agent_api = agent_rpcapi.AgentAPI(transport, timeout,
                                                version_cap)
        self._program_api = agent_rpcapi.AgentAPI(
            transport, program_timeout or timeout, version_cap)

    def prepare(self, context, claim: binding_db.Claim) -> None:
        # A region to program is programmed by the job itself.
        if (device_tree.needs_preparation(claim.preparation)
                and claim.preparation != device_tree.Preparation.PROGRAM):
            self._agent_api.prepare_attach_handle(
                context, claim.device_host, claim.driver, claim.attach_type,
                claim.attach_info, claim.handle_uuid, claim.preparation)

    def program_image(self, context, host: str, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None:
        """Agent API 1.2 (refused, before anything is sent, where
        ``[upgrade_levels] agent`` is below it)."""
        return self._program_api.program_image(context, host, driver,
                                               controlpath, image)

    def set_partitions(self, context, host: str, driver: str | None,
                       address: str, profile: str | None,
                       pinned: bool) -> None:
        """Agent API 1.4 (refused, before anything is sent, where
        ``[upgrade_levels] agent`` is below it)."""
        self._agent_api.set_partitions(context, host, driver, address,
                                       profile, pinned)

    def release(self, context, handle: arq_db.PreparedHandle) -> None:
        self._agent_api.release_attach_handle(
            context, handle.host, handle.driver, handle.attach_type,
            handle.attach_info, handle.uuid, handle.preparation)


def bitstream_resolver(conf: cfg.ConfigOpts
                       ) -> programming.BitstreamResolver:
    """Glance where ``[glance]`` is configured (an ``auth_type`` or an
    ``endpoint_override``), else no source of bitstreams."""
    if conf.glance.auth_type or conf.glance.endpoint_override:
        return programming.GlanceBitstreams(
            lambda: glance_client.GlanceClient.from_conf(conf))
    return programming.NoBitstreamSource()


def metrics_sources(conf: cfg.ConfigOpts,
                    context_factory: Callable[[], Any]) -> list:
    """What the conductor's /metrics listener serves besides the process
    metrics: the fleet metrics, read with contexts from
    ``context_factory``."""
    return [fleet_metrics.FleetCollector(conf, context_factory)]


def create(conf: cfg.ConfigOpts, transport,
           placement_factory: Callable[
               [], placement_client.PlacementClient] | None = None,
           notifier=None,
           notifications: notifications_notifier.Notifier | None = None
           ) -> service.RPCService:
    """The conductor.

    Placement comes from ``[placement]`` by default; ``notifier`` (with
    ``start``, ``stop`` and ``deliver``) sends Nova events;
    ``notifications`` sends the versioned notifications (by default as
    ``[notifications]`` says, one for every collaborator that emits).
    """
    host = conf.host
    if notifications is None:
        notifications = notifications_notifier.Notifier.from_conf(
            conf, '%s:%s' % (constants.BINARY_CONDUCTOR, host))
    if placement_factory is None:
        def placement_factory():
            return placement_client.PlacementClient.from_conf(conf)
    if notifier is not None:
        deliver, lease = notifier.deliver, binding_db.Lease(
            host, conf.nova.claim_timeout)
    else:
        deliver, lease = (lambda rows: None), None
    agents = AgentHandles(transport, conf.conductor.agent_timeout,
                          conf.upgrade_levels.agent,
                          program_timeout=conf.conductor.program_timeout)
    # One PlacementSync (its client built on first use) for every writer.
    sync = placement_sync.PlacementSync(client_factory=placement_factory)
    syncer = sync_worker.SyncWorker(sync,
                                    conf.conductor.placement_sync_workers)
    programmer = programming.RegionProgrammer(bitstream_resolver(conf),
                                              agents, syncer, notifications)
    binder = binding.Binder(
        host, conf.conductor.workers, conf.conductor.bind_timeout,
        agents, deliver, lease, programmer=programmer,
        notifier=notifications,
        abandoned_timeout=conf.conductor.abandoned_arq_timeout)
    endpoint = manager.ConductorManager(
        host, syncer, binder, arq_limits=manager.ARQLimits.from_conf(conf),
        programmer=programmer, notifier=notifications,
        usage_period=(conf.notifications.audit_period
                      if notifications.enabled else None),
        # The probe shares the sync's Placement client.
        prober=alternatives.Prober(lambda: sync.client),
        quotas=quotas.from_conf(conf),
        partitions=partitions.Partitions(agents, lambda: sync.client),
        switch_guard=partitions.SwitchGuard(lambda: sync.client))

    def admin():
        return cyborg_context.get_admin_context()

    # The /metrics listener, started with the service: the process
    # metrics and the fleet's.
    listener = metrics.Listener(conf, conf.metrics.conductor_port,
                                metrics_sources(conf, admin))

    def heartbeat():
        services_db.service_heartbeat(admin(), host,
                                      constants.BINARY_CONDUCTOR,
                                      timeutils.utcnow())

    def on_start():
        listener.start()
        if notifier is not None:
            notifier.start()
        binder.resume(admin())

    def on_stop(timeout: float | None) -> bool:
        """Finish the bind jobs within ``timeout`` seconds, hand back
        the rest; whether none was handed back."""
        handed_back = binder.stop(timeout=timeout)
        # Syncs not started stay pending in the database.
        syncer.stop()
        if notifier is not None:
            # The events of the finished jobs go to Nova first.
            notifier.stop()
            notifier.wait(10)
        notifications.flush(10)
        listener.stop()
        return not handed_back

    tasks = [
        service.PeriodicTask('conductor-heartbeat', heartbeat,
                             conf.heartbeat_interval),
        service.PeriodicTask(
            'conductor-placement-sync',
            lambda: syncer.sync_pending_hosts(admin()),
            conf.periodic_interval, run_immediately=False),
        service.PeriodicTask(
            'conductor-bind-sweeper', lambda: endpoint.sweep_binds(admin()),
            conf.periodic_interval, run_immediately=False),
        service.PeriodicTask(
            'conductor-adoption',
            lambda: syncer.sync_adopted_hosts(admin()),
            conf.conductor.adoption_interval, run_immediately=False),
    ]
    if notifications.enabled:
        # Usage records only where they are sent: binding intervals are
        # kept whatever (cyborg.db.usage), the records start with the
        # first period that ends once notifications are on.
        auditor = usage_audit.UsageAuditor(
            host, conf.notifications.audit_period, notifications)

        def audit_usage() -> None:
            # Its count of records sent is not returned: a number
            # returned by a periodic task is the delay to its next run.
            auditor.run(admin())

        tasks.append(service.PeriodicTask(
            'conductor-usage-audit', audit_usage, conf.periodic_interval))
    return service.RPCService(transport, constants.CONDUCTOR_TOPIC, host,
                              endpoint, periodic_tasks=tasks,
                              on_start=on_start, on_stop=on_stop)
