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

"""Options of the [taints] group: device taints and the device health
an accelerator request shows."""

from oslo_config import cfg

group = cfg.OptGroup('taints', title='Device taints')

opts = [
    cfg.IntOpt('max_keys', default=32, min=1, max=1000,
               help='Most distinct taint keys the deployment holds at '
                    'once, whatever their devices. Each key with a '
                    'scheduling effect becomes a Placement trait, and '
                    'every device profile group that does not tolerate it '
                    'asks for it as forbidden, so the number of keys '
                    'bounds what Nova sends Placement. A driver taint '
                    'whose new key would go past the limit is stored as '
                    'the cyborg.unhealthy taint (same effect, the key in '
                    'its reason); a taint rule with a new key past the '
                    'limit is refused.'),
    cfg.IntOpt('health_unknown_after', default=300, min=1,
               help='Seconds without a report or heartbeat from a host\'s '
                    'agent after which the device_health of an '
                    'accelerator request bound on that host is Unknown.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
