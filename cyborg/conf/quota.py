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

"""Options of the [quota] group: per-project limits of accelerator
requests, kept in Keystone (unified limits, read with oslo.limit)."""

from oslo_config import cfg

group = cfg.OptGroup('quota', title='Per-project limits')

NOOP = 'noop'
UNIFIED_LIMITS = 'unified_limits'
REQUIRE = 'require'
IGNORE = 'ignore'

opts = [
    cfg.StrOpt('driver', default=NOOP, choices=[
        (NOOP, 'No limits: every accelerator request is allowed.'),
        (UNIFIED_LIMITS, 'Keystone unified limits, read with oslo.limit '
                         '(the [oslo_limit] group says how to reach '
                         'Keystone and which endpoint the limits are '
                         'registered for).')],
               help='How the conductor limits what a project may hold '
                    'when it creates accelerator requests. The resources '
                    'are accelerator_requests (ARQs) and class:<resource '
                    'class> (e.g. class:FPGA, class:PGPU), spelled as Nova '
                    'spells its own so limits can be copied.'),
    cfg.StrOpt('unified_limits_resource_strategy', default=REQUIRE,
               choices=[
                   (REQUIRE, 'The resources of '
                             'unified_limits_resource_list must have a '
                             'registered limit (a missing one is a limit '
                             'of 0); others without one are unlimited.'),
                   (IGNORE, 'The resources of unified_limits_resource_'
                            'list are unlimited without a registered '
                            'limit; every other resource must have one '
                            '(a missing one is a limit of 0).')],
               help='What a resource without a registered limit in '
                    'Keystone means (as Nova\'s option of the same name). '
                    'cyborg-manage limits check lists the resources a '
                    'device profile uses that have none.'),
    cfg.ListOpt('unified_limits_resource_list',
                default=['accelerator_requests'],
                help='The resources unified_limits_resource_strategy '
                     'names: accelerator_requests and class:<resource '
                     'class> entries.'),
    cfg.IntOpt('limit_cache_time', default=60, min=0,
               help='Seconds the limits read from Keystone are used '
                    'before they are read again: a limit changed in '
                    'Keystone applies after at most this long (0: read '
                    'for every check).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    # oslo.limit's own group: the Keystone endpoint and credentials.
    from oslo_limit import opts as limit_opts
    limit_opts.register_opts(conf)


def list_opts():
    return {group: opts}
