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

"""Configuration: the one global CONF object and option registration."""

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import bitstream_cache
from cyborg.conf import conductor
from cyborg.conf import database
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

CONF = cfg.CONF

for _module in (default, api, conductor, agent, placement, nova, database,
                upgrade_levels, glance, bitstream_cache, notifications,
                metrics, remediation, taints, quota):
    _module.register_opts(CONF)
# The drivers' groups, found through their entry points.
driver_opts.register_driver_opts(CONF)
