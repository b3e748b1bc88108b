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

"""Lists every cyborg option for oslo-config-generator."""

import collections

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import bitstream_cache
from cyborg.conf import conductor
from cyborg.conf import default
from cyborg.conf import driver_opts
from cyborg.conf import glance
from cyborg.conf import metrics
from cyborg.conf import notifications
from cyborg.conf import nova
from cyborg.conf import placement
from cyborg.conf import quota
from cyborg.conf import remediation
from cyborg.conf import taints
from cyborg.conf import upgrade_levels

_MODULES = (default, api, conductor, agent, placement, nova, upgrade_levels,
            glance, bitstream_cache, notifications, metrics, remediation,
            taints, quota)


def list_opts():
    """Cyborg's own groups, then every installed driver's."""
    grouped = collections.OrderedDict()
    for module in _MODULES:
        for group, opts in module.list_opts().items():
            grouped.setdefault(group, []).extend(opts)
    for group, opts in driver_opts.driver_opts():
        grouped.setdefault(group, []).extend(opts)
    return list(grouped.items())


def set_lib_defaults():
    """Defaults cyborg changes in the libraries it uses."""
    from oslo_middleware import cors
    from oslo_policy import opts as policy_opts

    cfg.set_defaults(cors.CORS_OPTS,
                     allow_headers=['X-Auth-Token',
                                    'X-OpenStack-Request-ID',
                                    'X-Identity-Status', 'X-Roles',
                                    'X-Service-Catalog', 'X-User-Id',
                                    'X-Project-Id',
                                    'OpenStack-API-Version'],
                     expose_headers=['X-Auth-Token',
                                     'X-OpenStack-Request-ID',
                                     'X-Subject-Token', 'X-Service-Token',
                                     'OpenStack-API-Version',
                                     'OpenStack-API-Minimum-Version',
                                     'OpenStack-API-Maximum-Version'],
                     allow_methods=['GET', 'PUT', 'POST', 'DELETE',
                                    'PATCH'])
    policy_opts.set_defaults(cfg.CONF, policy_file='policy.yaml',
                             enforce_scope=True, enforce_new_defaults=True)
