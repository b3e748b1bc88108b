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

"""cyborg-agent: discovers accelerators on one compute host."""

import sys

from cyborg.agent import service as agent_service
from cyborg.clients import glance
from cyborg.common import config
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import signals
from cyborg.conf import CONF
from cyborg.hostcapture import replay


def main(argv: list[str] | None = None) -> int:
    config.prepare_service(argv or sys.argv)
    handler = signals.install('cyborg-agent', CONF)
    transport = rpc.get_transport(CONF)
    try:
        # [agent] host_root may name a capture: the drivers read its
        # replay.
        host_root, runner = replay.host_and_runner(CONF)
        agent = agent_service.create(
            CONF, transport,
            glance_factory=lambda: glance.GlanceClient.from_conf(CONF),
            runner=runner, host_root=host_root)
    except exception.ConfigInvalid as e:
        # A bad host name, driver list or capture: one line, nothing
        # started.
        rpc.cleanup(transport)
        config.refuse('cyborg-agent', [str(e)])
    agent.start()
    handler.wait()
    finished = agent.stop(handler.grace())
    rpc.cleanup(transport)
    return handler.exit(finished)
