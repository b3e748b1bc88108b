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

"""Options of the agent's FPGA bitstream cache, in the [agent] group."""

from oslo_config import cfg

from cyborg.conf import agent

opts = [
    cfg.StrOpt('bitstream_cache_dir',
               default='$state_path/bitstreams',
               help='Directory where the agent keeps the FPGA bitstreams '
                    'it downloaded from Glance, one file per image, named '
                    'by the image id. Only the agent may write in it.'),
    cfg.IntOpt('bitstream_cache_size_mb',
               default=4096, min=1,
               help='Most megabytes (MiB) of bitstreams the cache keeps. '
                    'The least recently used bitstreams not being '
                    'programmed are removed to make room for a new one; a '
                    'bitstream larger than this cannot be programmed.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(agent.group)
    conf.register_opts(opts, group=agent.group.name)


def list_opts():
    return {agent.group: opts}
