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

"""cyborg-conductor: the RPC service that owns the database."""

import sys

from cyborg.clients import nova as nova_client
from cyborg.common import config
from cyborg.common import rpc
from cyborg.common import signals
from cyborg.conductor import notifier as nova_notifier
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.db import api as db_api


def main(argv: list[str] | None = None) -> int:
    config.prepare_service(argv or sys.argv,
                           database=config.DATABASE_EXISTING)
    handler = signals.install('cyborg-conductor', CONF)
    db_api.configure(CONF)
    transport = rpc.get_transport(CONF)
    notifier = nova_notifier.Notifier(
        CONF.host, CONF, lambda: nova_client.NovaClient.from_conf(CONF))
    conductor = conductor_service.create(CONF, transport, notifier=notifier)
    conductor.start()
    handler.wait()
    finished = conductor.stop(handler.grace())
    rpc.cleanup(transport)
    return handler.exit(finished)
