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

"""cyborg-api: the REST API in a standalone threaded server."""

import sys

from oslo_log import log as logging

from cyborg import policies
from cyborg.api import app as api_app
from cyborg.api import wsgi_server
from cyborg.common import config
from cyborg.common import metrics
from cyborg.common import signals
from cyborg.conf import CONF

LOG = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    config.prepare_service(argv or sys.argv,
                           database=config.DATABASE_EXISTING)
    try:
        # The port first: a busy one stops the start before anything runs.
        server = wsgi_server.WSGIServer(
            None, CONF.api.host_ip, CONF.api.port, CONF.api.client_timeout,
            CONF.api.max_connections)
    except wsgi_server.CannotListen as e:
        config.refuse('cyborg-api', ['%s; change [api] host_ip or port' % e])
    authorizer = policies.Authorizer(policies.get_enforcer(CONF))
    handler = signals.install('cyborg-api', CONF,
                              {'policy file': authorizer.reload})
    metrics.prepare_multiprocess_dir()
    server.set_app(api_app.setup_app(CONF, authorizer=authorizer))
    server.start()
    LOG.info('cyborg-api listening on http://%s:%s', CONF.api.host_ip,
             server.port)
    handler.wait()
    return handler.exit(server.stop(handler.grace()))
