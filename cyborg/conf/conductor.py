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

"""Options of the [conductor] group."""

from oslo_config import cfg

group = cfg.OptGroup('conductor', title='Conductor options')

opts = [
    cfg.IntOpt('workers',
               default=16, min=1,
               help='Threads of one conductor that run ARQ bind jobs '
                    '(an agent preparing an attach handle, an FPGA region '
                    'being programmed) and release prepared attach '
                    'handles: at most this many binds or releases are in '
                    'progress at once, the rest queue. RPC requests are '
                    'served by oslo.messaging\'s own pool '
                    '([DEFAULT] executor_thread_pool_size).'),
    cfg.IntOpt('bind_timeout',
               default=300, min=10,
               help='Seconds after which an unfinished ARQ bind job is '
                    'failed by any conductor; also how long a prepared '
                    'attach handle whose release failed waits before it is '
                    'tried again.'),
    cfg.IntOpt('abandoned_arq_timeout',
               default=3600, min=0,
               help='Seconds after its creation an accelerator request '
                    'that was never bound (state Initial) is deleted by '
                    'the sweeper of any conductor, with a WARNING log '
                    'line. Nova binds the ARQs it creates at once, so one '
                    'left Initial was abandoned: the answer to its '
                    'creation was lost (a broker or database outage, a '
                    'failing node) and its creator never learnt its uuid, '
                    'or its creator gave up. It would otherwise stay '
                    'forever and count in its project\'s limits. 0 keeps '
                    'such ARQs.'),
    cfg.IntOpt('agent_timeout',
               default=30, min=1,
               help='Seconds the conductor waits for an agent to prepare or '
                    'release an attach handle (e.g. create or remove an '
                    'mdev) before giving up: the bind fails, or the '
                    'release is tried again later.'),
    cfg.IntOpt('placement_sync_workers',
               default=8, min=1,
               help='Threads that bring Placement in line with the '
                    'database after an inventory report, a device status '
                    'or an attribute changed a host\'s resource providers. '
                    'The conductor answers such a request first and syncs '
                    'after; a host whose sync could not run (Placement '
                    'down, conductor stopped) is synced by the periodic '
                    'task of any conductor.'),
    cfg.IntOpt('adoption_interval',
               default=600, min=10,
               help='Seconds between two checks of the resource providers '
                    'taken over from an upstream Cyborg import that wait '
                    'for their allocations to go (to take our name and '
                    'parent, or to drop an upstream resource class). '
                    'Between checks such a host counts as synced, so agent '
                    'reports cost no Placement request for it.'),
    cfg.IntOpt('program_timeout',
               default=240, min=1,
               help='Seconds the conductor waits for an agent to download '
                    'an FPGA bitstream from Glance (through its cache) and '
                    'program it before giving up: the bind (or the program '
                    'API call) fails. Keep it below bind_timeout, and the '
                    "API's [api] program_timeout above it."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
