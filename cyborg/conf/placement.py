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

"""Options of the [placement] group: how cyborg reaches Placement.

These are the standard keystoneauth1 session, auth and adapter options.
With keystone, set ``auth_type = password`` and its options (``auth_url``,
``username``, ...); the endpoint comes from the service catalog.

Without keystone, against a Placement running with
``[api] auth_strategy = noauth2``, use the ``admin_token`` plugin, which
sends a fixed token and never talks to keystone::

    [placement]
    auth_type = admin_token
    endpoint = http://127.0.0.1:8778
    token = admin
    endpoint_override = http://127.0.0.1:8778
"""

from oslo_config import cfg

from cyborg.conf import ksa

group = cfg.OptGroup(
    'placement', title='Placement service client options',
    help='How cyborg authenticates to and finds the Placement service.')

DEFAULT_SERVICE_TYPE = 'placement'


def register_opts(conf: cfg.ConfigOpts) -> None:
    ksa.register(conf, group, DEFAULT_SERVICE_TYPE)


def list_opts():
    return {group: ksa.list_options(DEFAULT_SERVICE_TYPE)}
