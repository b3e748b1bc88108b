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

"""Options of the [agent] group."""

from oslo_config import cfg

group = cfg.OptGroup('agent', title='Agent options')

opts = [
    cfg.ListOpt('enabled_drivers',
                default=['fake_driver'],
                help='Accelerator drivers the agent loads, by their names '
                     'in the "cyborg.accelerator.driver" entry point '
                     'namespace.'),
    cfg.StrOpt('resource_provider_name',
               sample_default='<the host FQDN>',
               help='Name of the compute node resource provider in '
                    'Placement (the name nova-compute registered). '
                    'Defaults to this host\'s fully qualified domain '
                    'name, the name nova-compute\'s libvirt driver gives '
                    'its node; cyborg-all-in-one, which creates the '
                    'provider itself, defaults to [DEFAULT] host, the '
                    'host its devices are reported under.'),
    cfg.IntOpt('discovery_interval',
               default=60, min=1,
               help='Seconds between two device discoveries of the agent.'),
    cfg.StrOpt('host_root',
               default='/',
               help='The root under which drivers read the host\'s '
                    '"sys", "dev" and "proc" trees, e.g. "/host" when the '
                    'agent runs in a container with the host\'s /sys, '
                    '/dev and /proc mounted under /host, or a fixture '
                    'tree in tests. Symbolic links are never followed '
                    'out of it.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
