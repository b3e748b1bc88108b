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

"""Options of the [DEFAULT] group."""

import socket

from oslo_config import cfg

opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               sample_default='localhost',
               help='Name of this node. It is the RPC server name of the '
                    'agent and conductor, and the host name under which '
                    'the agent reports its devices. It must be unique '
                    'among the services of one deployment.'),
    cfg.StrOpt('state_path',
               default='/var/lib/cyborg',
               help='Top-level directory for the service state: the '
                    'default SQLite database and files the agent keeps.'),
    cfg.IntOpt('periodic_interval',
               default=60, min=1,
               help='Seconds between runs of periodic work (agent '
                    'discovery, conductor sweeps) unless a more specific '
                    'option says otherwise.'),
    cfg.IntOpt('heartbeat_interval',
               default=10, min=1,
               help='Seconds between two heartbeats a service writes to '
                    'the services table.'),
    cfg.IntOpt('service_down_time',
               default=60, min=1,
               help='Seconds since the last heartbeat after which a '
                    'service is considered down.'),
    cfg.IntOpt('graceful_shutdown_timeout',
               default=60, min=0, mutable=True,
               help='Seconds a service stopped by SIGTERM or SIGINT waits '
                    'for its work in flight (API requests, bind jobs, '
                    'attach handle preparations) before it exits. A bind '
                    'job still running then is handed back: its ARQ '
                    'stays BindStarted and the conductor resumes it when '
                    'it starts again.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
