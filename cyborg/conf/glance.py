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

"""Options of the [glance] group: how cyborg reaches Glance (image v2).

The standard keystoneauth1 session, auth and adapter options, as in the
``[placement]`` and ``[nova]`` groups. With keystone, set ``auth_type =
password`` and its options; the endpoint comes from the service catalog
(``service_type = image``). The user needs to see the bitstream images
(public images, or images shared with its project).

Without keystone, against a Glance that does not check tokens::

    [glance]
    auth_type = admin_token
    endpoint = http://127.0.0.1:9292
    token = admin
    endpoint_override = http://127.0.0.1:9292
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from cyborg.conf import ksa

group = cfg.OptGroup(
    'glance', title='Glance (image service) client options',
    help='How cyborg authenticates to and finds the Glance image API, '
         'where FPGA bitstreams are stored.')

DEFAULT_SERVICE_TYPE = 'image'
# Seconds of one read or connect; keystoneauth's default is no timeout.
DEFAULT_TIMEOUT = 30


def register_opts(conf: cfg.ConfigOpts) -> None:
    ksa.register(conf, group, DEFAULT_SERVICE_TYPE, timeout=DEFAULT_TIMEOUT)


def list_opts():
    return {group: ksa.list_options(DEFAULT_SERVICE_TYPE,
                                    timeout=DEFAULT_TIMEOUT)}


def use_endpoint(conf: cfg.ConfigOpts, url: str, token: str = 'admin'
                 ) -> None:
    """Point ``[glance]`` at the Glance at ``url``, without keystone
    (``auth_type = admin_token``, sending ``token``): the all-in-one's
    ``--glance-url`` and ``--bitstream-dir``."""
    conf.register_opts(ks_loading.get_auth_plugin_conf_options('admin_token'),
                       group=group)
    conf.set_override('auth_type', 'admin_token', group=group)
    conf.set_override('endpoint', url, group=group)
    conf.set_override('token', token, group=group)
    conf.set_override('endpoint_override', url, group=group)
