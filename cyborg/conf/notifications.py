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

"""Options of the [notifications] group: versioned notifications.

Off by default, as Nova's: with driver = messagingv2 the conductor
sends each notification to the versioned_notifications topic of the
notification transport (transport_url here, else the RPC
transport's).
"""

from oslo_config import cfg

group = cfg.OptGroup('notifications', title='Versioned notifications')

opts = [
    cfg.StrOpt('driver', default='noop',
               choices=[('noop', 'send nothing'),
                        ('messagingv2', 'send over oslo.messaging '
                         '(message format 2.0)'),
                        ('log', 'write each notification to the log')],
               help='How notifications are sent. noop (the default) '
                    'sends none.'),
    cfg.ListOpt('topics', default=['versioned_notifications'],
                help='Topics the notifications are sent to (Nova\'s '
                     'convention: versioned_notifications).'),
    cfg.StrOpt('transport_url', secret=True,
               help='Transport of the notifications, when it is not the '
                    'RPC transport ([DEFAULT] transport_url).'),
    cfg.IntOpt('audit_period', default=3600, min=60,
               help='Seconds of one usage audit period: once per period '
                    'an accelerator_request.exists notification is '
                    'sent for every accelerator request bound during it. '
                    'Periods are aligned on the Unix epoch (3600: on the '
                    'hour).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
