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

"""/v2/quotas/{project_id} (API 2.9): a project's limit and usage of
each resource it is limited in or uses.

The limits are Keystone's (``[quota] driver = unified_limits``, read as
the conductor reads them, cached ``[quota] limit_cache_time``); the
usage is counted from the project's ARQs. A resource without a limit
(the ``noop`` driver, or one the ``[quota]
unified_limits_resource_strategy`` leaves unlimited) shows -1.
"""

from typing import Any

import pecan

from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.common import exception
from cyborg.common import limits as limits_mod
from cyborg.conf import quota as quota_conf
from cyborg.db import quotas as quotas_db
from cyborg.domain import quotas as quota_rules
from cyborg.policies import quota as policy

COLLECTION = 'quotas'
# The longest project id Keystone stores.
_MAX_PROJECT_ID = 64


def _check_version() -> None:
    if not base.version_at_least(microversion.PROFILE_UPDATES):
        raise exception.MicroversionTooLow(
            version=microversion.as_string(microversion.PROFILE_UPDATES))


class QuotasController(routing.Resource):

    def __init__(self):
        # The limits read from Keystone, made on first use (their cache
        # lives as long as the API process).
        self._limits: limits_mod.KeystoneLimits | None = None

    def _project_limits(self, conf, project_id: str, names: set[str]
                        ) -> dict[str, int]:
        """The limit of each of ``names`` (-1: none)."""
        if conf.quota.driver != quota_conf.UNIFIED_LIMITS:
            return dict.fromkeys(names, quota_rules.UNLIMITED)
        if self._limits is None:
            self._limits = limits_mod.KeystoneLimits(
                conf.quota.limit_cache_time)
        registered = self._limits.registered()
        project = self._limits.project(project_id)
        names |= set(registered) | set(project)
        limited = quota_rules.effective_limits(
            sorted(names), registered, project,
            conf.quota.unified_limits_resource_strategy,
            conf.quota.unified_limits_resource_list)
        return {name: limited.get(name, quota_rules.UNLIMITED)
                for name in names}

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, project_id, *, context, query):
        _check_version()
        if len(project_id) > _MAX_PROJECT_ID:
            raise exception.Invalid(reason='A project id has at most %d '
                                           'characters.' % _MAX_PROJECT_ID)
        # The rule again, for the project named (the endpoint checked it
        # for the caller's own).
        pecan.request.authorizer.authorize(
            policy.GET_ONE, context,
            {'project_id': project_id, 'user_id': context.user_id})
        usage = quotas_db.usage(context, project_id)
        limits = self._project_limits(pecan.request.conf, project_id,
                                      set(usage))
        resources: dict[str, Any] = {
            name: {'limit': limits[name], 'usage': usage.get(name, 0)}
            for name in sorted(limits)}
        return base.render({'quota': {'project_id': project_id,
                                      'resources': resources}})
