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

"""keystoneauth1 session, auth and adapter options of a service group.

Shared by the groups cyborg uses to reach other services ([placement],
[nova]).
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

DEFAULT_VALID_INTERFACES = ['internal', 'public']


def register(conf: cfg.ConfigOpts, group: cfg.OptGroup, service_type: str,
             timeout: float | None = None) -> None:
    """Register the options with their cyborg defaults.

    Each ConfigOpts gets a group object of its own: ``register_group``
    copies it shallowly, so a shared one would share registered options
    (and their overrides) between ConfigOpts instances.
    """
    conf.register_group(cfg.OptGroup(group.name, title=group.title,
                                     help=group.help))
    ks_loading.register_session_conf_options(conf, group.name)
    ks_loading.register_auth_conf_options(conf, group.name)
    ks_loading.register_adapter_conf_options(conf, group.name,
                                             include_deprecated=False)
    conf.set_default('service_type', service_type, group=group.name)
    conf.set_default('valid_interfaces', DEFAULT_VALID_INTERFACES,
                     group=group.name)
    if timeout is not None:
        conf.set_default('timeout', timeout, group=group.name)


def list_options(service_type: str, timeout: float | None = None
                 ) -> list[cfg.Opt]:
    """The options for oslo-config-generator, without duplicates.

    The auth plugin options listed are those of the ``password`` plugin,
    the usual choice with keystone; other plugins load their own options
    at run time.
    """
    session = ks_loading.get_session_conf_options()
    if timeout is not None:
        cfg.set_defaults(session, timeout=timeout)
    adapter = ks_loading.get_adapter_conf_options(include_deprecated=False)
    cfg.set_defaults(adapter, service_type=service_type,
                     valid_interfaces=DEFAULT_VALID_INTERFACES)
    opts, seen = [], set()
    for opt in (session + ks_loading.get_auth_common_conf_options()
                + ks_loading.get_auth_plugin_conf_options('password')
                + adapter):
        if opt.dest not in seen:
            seen.add(opt.dest)
            opts.append(opt)
    return opts
