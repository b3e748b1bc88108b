"""Lists every cyborg option for oslo-config-generator."""

import collections

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import default
from cyborg.conf import fake_driver
from cyborg.conf import nova
from cyborg.conf import placement

_MODULES = (default, api, conductor, agent, fake_driver, placement, nova)


def list_opts():
    grouped = collections.OrderedDict()
    for module in _MODULES:
        for group, opts in module.list_opts().items():
            grouped.setdefault(group, []).extend(opts)
    return list(grouped.items())


def set_lib_defaults():
    """Defaults cyborg changes in the libraries it uses."""
    from oslo_middleware import cors
    from oslo_policy import opts as policy_opts

    cfg.set_defaults(cors.CORS_OPTS,
                     allow_headers=['X-Auth-Token',
                                    'X-OpenStack-Request-ID',
                                    'X-Identity-Status', 'X-Roles',
                                    'X-Service-Catalog', 'X-User-Id',
                                    'X-Project-Id',
                                    'OpenStack-API-Version'],
                     expose_headers=['X-Auth-Token',
                                     'X-OpenStack-Request-ID',
                                     'X-Subject-Token', 'X-Service-Token',
                                     'OpenStack-API-Version',
                                     'OpenStack-API-Minimum-Version',
                                     'OpenStack-API-Maximum-Version'],
                     allow_methods=['GET', 'PUT', 'POST', 'DELETE',
                                    'PATCH'])
    policy_opts.set_defaults(cfg.CONF, policy_file='policy.yaml',
                             enforce_scope=True, enforce_new_defaults=True)
