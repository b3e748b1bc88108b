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

"""Options of the [upgrade_levels] group: RPC version caps for rolling
upgrades."""

from oslo_config import cfg

group = cfg.OptGroup(
    'upgrade_levels', title='RPC version caps for rolling upgrades',
    help='While services of two releases run side by side, cap the RPC '
         'API versions this service sends to those the older ones '
         'understand; unset once every service is upgraded.')

_VERSION = r'^[0-9]+\.[0-9]+$'

opts = [
    cfg.StrOpt('conductor',
               regex=_VERSION,
               help='The highest conductor RPC API version (such as 1.0) '
                    'that the API and the agents send. Set it while some '
                    'conductors still run the previous release. By default '
                    'there is no cap.'),
    cfg.StrOpt('agent',
               regex=_VERSION,
               help='The highest agent RPC API version (such as 1.0) that '
                    'the conductors send. Set it on upgraded conductors '
                    'while some agents still run the previous release: '
                    'agents may then be upgraded after the conductors. A '
                    'call needing a newer version fails with an error '
                    'naming this option. By default there is no cap.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
