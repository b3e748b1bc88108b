"""The agent's RPC endpoint and its periodic work on one compute host."""

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import constants
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg import context as cyborg_context

LOG = logging.getLogger(__name__)


class AgentManager:
    """Handles agent RPC requests; reports to the conductor."""

    target = messaging.Target(version=constants.RPC_API_VERSION)

    def __init__(self, host: str,
                 conductor_api: conductor_rpcapi.ConductorAPI):
        self.host = host
        self._conductor = conductor_api

    def heartbeat(self) -> None:
        """Tell the conductor this agent is alive."""
        self._conductor.service_heartbeat(
            cyborg_context.get_admin_context(), self.host,
            constants.BINARY_AGENT)

    def ping(self, context) -> str:
        """Answer a liveness probe from the conductor."""
        return self.host
