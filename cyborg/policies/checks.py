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

"""Policy checks of cyborg's own, usable in any rule of ``policy.yaml``.

``service_token_role:configured``
    True when the request carries a service token (``X-Service-Token``,
    validated by keystonemiddleware) with one of the roles of
    ``[keystone_authtoken] service_token_roles``, compared without case.
``service_token_role:<role>``
    True when the service token has the role ``<role>``.

A role on the user's own token never counts: only the service token's.
"""

from typing import Any

from oslo_config import cfg
from oslo_policy import policy

from cyborg.common import constants

SERVICE_TOKEN_ROLE = 'service_token_role'
#: The match that stands for the configured service token roles.
CONFIGURED = 'configured'


def service_token_roles(conf: cfg.ConfigOpts) -> list[str]:
    """``[keystone_authtoken] service_token_roles``, or its default when
    keystonemiddleware's options are not registered (noauth mode)."""
    try:
        roles = conf.keystone_authtoken.service_token_roles
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return list(constants.DEFAULT_SERVICE_TOKEN_ROLES)
    return list(roles or ())


def has_service_role(service_roles: list[str] | None,
                     wanted: list[str]) -> bool:
    """Whether any of ``service_roles`` is one of ``wanted`` (any case)."""
    lowered = {role.lower() for role in wanted}
    return any(role.lower() in lowered for role in service_roles or ())


@policy.register(SERVICE_TOKEN_ROLE)
class ServiceTokenRoleCheck(policy.Check):
    """``service_token_role:configured`` or ``service_token_role:<role>``
    (see the module's documentation)."""

    def __call__(self, target: dict, creds: dict[str, Any],
                 enforcer: policy.Enforcer,
                 current_rule: str | None = None) -> bool:
        if self.match == CONFIGURED:
            wanted = service_token_roles(enforcer.conf)
        else:
            wanted = [self.match]
        return has_service_role(creds.get('service_roles'), wanted)
