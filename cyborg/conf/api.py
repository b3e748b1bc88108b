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

"""Options of the [api] group."""

from oslo_config import cfg

group = cfg.OptGroup('api', title='REST API options')

#: Defaults of the standalone servers' limits (client_timeout,
#: max_connections), which :class:`cyborg.api.wsgi_server.WSGIServer`
#: also takes when it is given none.
CLIENT_TIMEOUT = 30.0
MAX_CONNECTIONS = 100

opts = [
    cfg.HostAddressOpt('host_ip',
                       default='127.0.0.1',
                       help='Address the standalone cyborg-api server '
                            'listens on.'),
    cfg.PortOpt('port',
                default=6666,
                help='Port the standalone cyborg-api server listens on.'),
    cfg.FloatOpt('client_timeout',
                 default=CLIENT_TIMEOUT, min=0.1,
                 help='Seconds the standalone cyborg-api and '
                      'cyborg-all-in-one servers give a client to send its '
                      'request line and headers, as long again to send its '
                      'body once the API reads it, and wait at most as long '
                      'for each read or write; a slower client is '
                      'disconnected. Under uWSGI or another WSGI server '
                      'use its own settings (see the limits guide).'),
    cfg.IntOpt('max_connections',
               default=MAX_CONNECTIONS, min=1,
               help='Connections the standalone cyborg-api and '
                    'cyborg-all-in-one servers serve at once, a thread '
                    'each; a connection beyond it is answered 503 with '
                    'Retry-After and closed.'),
    cfg.StrOpt('public_endpoint', mutable=True,
               help='Public URL of the API, used to build links in '
                    'responses, e.g. "https://cloud.example.com/accelerator". '
                    'When unset, the name and port the API server listens '
                    'on (SERVER_NAME, SERVER_PORT), never the client\'s '
                    'Host header; set it behind a proxy.'),
    cfg.StrOpt('auth_strategy',
               default='keystone',
               choices=[('keystone', 'Validate tokens with '
                                     'keystonemiddleware.'),
                        ('noauth', 'No authentication: identity, roles '
                                   'and scope come from request headers. '
                                   'For development and tests only.')],
               help='How API requests are authenticated.'),
    cfg.FloatOpt('device_profile_cache_ttl',
                 default=2.0, min=0,
                 help='Seconds a device profile read by name stays cached '
                      'in an API process. Profiles are immutable; a '
                      'profile deleted through another API process can be '
                      'returned for up to this long. 0 disables the '
                      'cache.'),
    cfg.FloatOpt('alternatives_probe_ttl',
                 default=1.0, min=0,
                 help='Seconds the alternative a device profile group '
                      'with ordered alternatives resolved to (the first '
                      'one Placement can satisfy) stays cached in an API '
                      'process, so that the reads of a burst of boots '
                      'probe Placement once. Within this time a read may '
                      'name an alternative whose last free unit was just '
                      'taken. 0 probes Placement at every read.'),
    cfg.FloatOpt('alternatives_probe_max_stale',
                 default=5.0, min=0,
                 help='Seconds an API process may still answer the '
                      'alternative a group resolved to once '
                      'alternatives_probe_ttl has passed, while it probes '
                      'Placement for that group again in the background: '
                      'the read of a busy profile then never waits for '
                      'Placement. A group not probed for longer is probed '
                      'before the read answers. Within this time a read '
                      'may name an alternative whose last free unit was '
                      'taken, or a later alternative after an earlier '
                      'one was freed. Never less than '
                      'alternatives_probe_ttl; 0 (with '
                      'alternatives_probe_ttl = 0) probes at every read.'),
    cfg.IntOpt('conductor_timeout',
               default=30, min=1,
               help='Seconds an API request that writes waits for a '
                    'conductor to answer before it answers 503 with a '
                    'Retry-After header (every write goes through a '
                    'conductor). Replaces [DEFAULT] rpc_response_timeout '
                    'for the API\'s calls to the conductor. Keep it below '
                    'the timeout of the API\'s clients (Nova\'s HTTP '
                    'timeout to Cyborg) and above the longest write a '
                    'loaded conductor takes (a bind of many requests, '
                    'device profile creation: well under a second '
                    'normally).'),
    cfg.IntOpt('program_timeout',
               default=300, min=1,
               help='Seconds a PATCH /v2/deployables/{uuid}/program waits '
                    'for the conductor to have the bitstream downloaded and '
                    'programmed before it answers 503 (the programming may '
                    'still finish; the deployable shows it). Replaces '
                    '[api] conductor_timeout for that call only; keep it '
                    'above [conductor] program_timeout.'),
    cfg.IntOpt('max_accelerators_per_profile',
               default=64, min=1, mutable=True,
               help='Most accelerators one device profile may request in '
                    'total, over every resources: key of every group. '
                    'Each becomes an ARQ when Nova creates the ARQs of an '
                    'instance. Checked when a profile is created (400).'),
    cfg.IntOpt('max_arqs_per_request',
               default=64, min=1,
               help='Most ARQs one POST /v2/accelerator_requests may '
                    'create (400 beyond, nothing created); guards against '
                    'profiles created before a lower '
                    'max_accelerators_per_profile.'),
    cfg.IntOpt('max_arqs_per_project',
               default=10000, min=1,
               help='Most ARQs one project may hold; a creation that '
                    'would exceed it answers 403 and creates nothing. A '
                    'safety cap against runaway clients, not a quota: '
                    'concurrent creations may overshoot it by the size of '
                    'one request each.'),
    cfg.IntOpt('max_items_per_request',
               default=256, min=1,
               help='Most ARQs one bind or unbind PATCH may name, and '
                    'most uuids one DELETE ?arqs= may list (400 beyond).'),
    cfg.StrOpt('noauth_default_project_id',
               default='00000000000000000000000000000001',
               help='With auth_strategy=noauth, the project of a request '
                    'that carries no X-Project-Id header.'),
    cfg.ListOpt('noauth_default_roles',
                default=['admin', 'manager', 'member', 'reader'],
                help='With auth_strategy=noauth, the roles of a request '
                     'that carries no X-Roles header.'),
    cfg.BoolOpt('access_log',
                default=True,
                help='Log one INFO line per API request (method, path, '
                     'status, time, request id, project), as Placement '
                     'does. Turn it off where the WSGI server (uWSGI, '
                     'Apache) logs requests already; each line costs the '
                     'API some CPU.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
