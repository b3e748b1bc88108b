"""Assembles the agent RPC service."""

from oslo_config import cfg

from cyborg.agent import manager
from cyborg.common import constants
from cyborg.common import service
from cyborg.conductor import rpcapi as conductor_rpcapi


def create(conf: cfg.ConfigOpts, transport) -> service.RPCService:
    host = conf.host
    endpoint = manager.AgentManager(
        host, conductor_rpcapi.ConductorAPI(transport))
    tasks = [service.PeriodicTask('agent-heartbeat', endpoint.heartbeat,
                                  conf.heartbeat_interval)]
    return service.RPCService(transport, constants.AGENT_TOPIC, host,
                              endpoint, periodic_tasks=tasks)
