"""cyborg-agent: discovers accelerators on one compute host."""

import sys

from cyborg.agent import service as agent_service
from cyborg.common import config
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conf import CONF


def main(argv: list[str] | None = None) -> int:
    config.prepare_service(argv or sys.argv)
    transport = rpc.get_transport(CONF)
    agent = agent_service.create(CONF, transport)
    agent.start()
    service.wait_for_signal()
    agent.stop()
    rpc.cleanup(transport)
    return 0
