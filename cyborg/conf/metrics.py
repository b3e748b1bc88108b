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

"""Options of the [metrics] group: Prometheus metrics.

The conductor and the agent serve /metrics on an address of their
own (never the RPC or API address: scrapers need no credentials there,
so it belongs on a management network). The API serves it on its own
address only when api_enabled is set, behind the
cyborg:metrics:get policy rule.
"""

from oslo_config import cfg

group = cfg.OptGroup('metrics', title='Prometheus metrics')

opts = [
    cfg.BoolOpt('enabled', default=True,
                help='Serve /metrics from the conductor and the agent on '
                     'their metrics address.'),
    cfg.HostAddressOpt('listen_host', default='127.0.0.1',
                       help='Address the conductor and the agent serve '
                            '/metrics on.'),
    cfg.PortOpt('conductor_port', default=9656,
                help='Port of the conductor\'s /metrics (a second '
                     'conductor process on one host needs its own).'),
    cfg.PortOpt('agent_port', default=9657,
                help='Port of the agent\'s /metrics.'),
    cfg.BoolOpt('api_enabled', default=False,
                help='Serve /metrics on the API\'s own address too, '
                     'behind the cyborg:metrics:get policy rule (the '
                     'metrics of every API worker process).'),
    cfg.IntOpt('fleet_cache_seconds', default=5, min=0,
               help='Seconds a conductor answers scrapes with the fleet '
                    'metrics it computed last, so several scrapers cost '
                    'one computation (0: compute for every scrape).'),
    cfg.BoolOpt('project_label', default=False,
                help='Count bound accelerator requests per project too '
                     '(one series per project and resource class: mind '
                     'the cardinality on clouds with many projects).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
