"""cyborg-all-in-one: API, conductor and agent in one process.

Runs on embedded defaults: SQLite in the state directory, an in-process
RPC transport and ``noauth``. Everything else comes from --config-file.
"""

import argparse
import os
import sys

from oslo_log import log as logging

from cyborg.agent import service as agent_service
from cyborg.api import app as api_app
from cyborg.common import config
from cyborg.common import constants
from cyborg.common import rpc
from cyborg.common import service
from cyborg.common import wsgi_server
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration

LOG = logging.getLogger(__name__)

DEFAULT_STATE_DIR = os.path.join(os.path.expanduser('~'), '.local', 'share',
                                 'cyborg')

USAGE = """\
Cyborg all-in-one is running.

  API endpoint:  {endpoint}
  State:         {state_dir}

Use the OpenStack client against it (no Keystone; you act as an admin):

  export OS_AUTH_TYPE=none OS_ENDPOINT={endpoint}
  openstack accelerator device profile create my-gpu \\
      '[{{"resources:PGPU": "1"}}]'
  openstack accelerator device profile list

Press Ctrl-C to stop.
"""


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog='cyborg-all-in-one', description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--host', default='127.0.0.1',
                        help='Address the API listens on (127.0.0.1).')
    parser.add_argument('--port', type=int, default=6666,
                        help='Port the API listens on (6666).')
    parser.add_argument('--state-dir', default=DEFAULT_STATE_DIR,
                        help='Directory for the database and other state '
                             '(%(default)s).')
    return parser.parse_known_args(argv)


def _set_embedded_defaults(state_dir: str) -> None:
    CONF.set_default('state_path', state_dir)
    CONF.set_default('transport_url', constants.INPROC_TRANSPORT_URL)
    CONF.set_default('auth_strategy', 'noauth', group='api')
    CONF.set_default('connection', 'sqlite:///%s' % os.path.join(
        state_dir, 'cyborg.sqlite'), group='database')


def main(argv: list[str] | None = None) -> int:
    argv = argv or sys.argv
    args, rest = _parse(argv[1:])
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    config.register_logging_opts()
    config.parse_args([argv[0]] + rest)
    _set_embedded_defaults(state_dir)
    config.setup_logging()

    db_api.configure(CONF)
    migration.upgrade()
    transport = rpc.get_transport(CONF)
    services = [conductor_service.create(CONF, transport),
                agent_service.create(CONF, transport)]
    for svc in services:
        svc.start()
    server = wsgi_server.WSGIServer(api_app.setup_app(CONF, transport),
                                    args.host, args.port)
    server.start()
    endpoint = 'http://%s:%d' % (args.host, server.port)
    print(USAGE.format(endpoint=endpoint, state_dir=state_dir), flush=True)
    service.wait_for_signal()
    print('Stopping...', flush=True)
    server.stop()
    for svc in reversed(services):
        svc.stop()
    rpc.cleanup(transport)
    return 0
