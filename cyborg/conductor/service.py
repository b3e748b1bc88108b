"""Assembles the conductor RPC service."""

from collections.abc import Callable

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg.clients import placement as placement_client
from cyborg.common import constants
from cyborg.common import service
from cyborg.conductor import manager
from cyborg import context as cyborg_context
from cyborg.db import api as db_api


def create(conf: cfg.ConfigOpts, transport,
           placement_factory: Callable[
               [], placement_client.PlacementClient] | None = None
           ) -> service.RPCService:
    """The conductor; Placement comes from ``[placement]`` by default."""
    host = conf.host
    if placement_factory is None:
        def placement_factory():
            return placement_client.PlacementClient.from_conf(conf)
    endpoint = manager.ConductorManager(host, placement_factory)

    def heartbeat():
        db_api.service_heartbeat(cyborg_context.get_admin_context(), host,
                                 constants.BINARY_CONDUCTOR,
                                 timeutils.utcnow())

    tasks = [
        service.PeriodicTask('conductor-heartbeat', heartbeat,
                             conf.heartbeat_interval),
        service.PeriodicTask(
            'conductor-placement-sync',
            lambda: endpoint.sync_pending_hosts(
                cyborg_context.get_admin_context()),
            conf.periodic_interval, run_immediately=False),
    ]
    return service.RPCService(transport, constants.CONDUCTOR_TOPIC, host,
                              endpoint, periodic_tasks=tasks)
