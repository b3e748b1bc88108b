"""Assembles the conductor RPC service."""

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg.common import constants
from cyborg.common import service
from cyborg.conductor import manager
from cyborg import context as cyborg_context
from cyborg.db import api as db_api


def create(conf: cfg.ConfigOpts, transport) -> service.RPCService:
    host = conf.host
    endpoint = manager.ConductorManager(host)

    def heartbeat():
        db_api.service_heartbeat(cyborg_context.get_admin_context(), host,
                                 constants.BINARY_CONDUCTOR,
                                 timeutils.utcnow())

    tasks = [service.PeriodicTask('conductor-heartbeat', heartbeat,
                                  conf.heartbeat_interval)]
    return service.RPCService(transport, constants.CONDUCTOR_TOPIC, host,
                              endpoint, periodic_tasks=tasks)
