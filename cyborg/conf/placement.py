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

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

group = cfg.OptGroup(
    'placement', title='Placement service client options',
    help='How cyborg authenticates to and finds the Placement service.')

DEFAULT_SERVICE_TYPE = 'placement'
DEFAULT_VALID_INTERFACES = ['internal', 'public']


def _adapter_opts() -> list[cfg.Opt]:
    opts = ks_loading.get_adapter_conf_options(include_deprecated=False)
    cfg.set_defaults(opts, service_type=DEFAULT_SERVICE_TYPE,
                     valid_interfaces=DEFAULT_VALID_INTERFACES)
    return opts


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group)
    ks_loading.register_session_conf_options(conf, group.name)
    ks_loading.register_auth_conf_options(conf, group.name)
    ks_loading.register_adapter_conf_options(conf, group.name,
                                             include_deprecated=False)
    conf.set_default('service_type', DEFAULT_SERVICE_TYPE, group=group.name)
    conf.set_default('valid_interfaces', DEFAULT_VALID_INTERFACES,
                     group=group.name)


def list_opts():
    """Every option of the group, for oslo-config-generator.

    The auth plugin options listed are those of the ``password`` plugin,
    the usual choice with keystone; other plugins load their own options at
    run time.
    """
    opts = []
    seen = set()
    for opt in (ks_loading.get_session_conf_options()
                + ks_loading.get_auth_common_conf_options()
                + ks_loading.get_auth_plugin_conf_options('password')
                + _adapter_opts()):
        if opt.dest not in seen:
            seen.add(opt.dest)
            opts.append(opt)
    return {group: opts}
