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

"""Per-project limits at ARQ creation ([quota] driver).

:func:`from_conf` gives None for the ``noop`` driver: creations then
check nothing and cost nothing more. With ``unified_limits``, a creation
reads the limits of what its ARQs count (from Keystone, cached), inserts
its ARQs, then, with its project's quota row locked (see
:func:`cyborg.db.arqs.arq_create`), counts the project's usage from the
ARQ rows (its own new rows included) and compares it with the limits;
over one, the transaction rolls back and the caller gets a 403 naming
each resource, its limit, the usage before the request and the requested
amount. oslo.limit has no reservations: the lock orders concurrent
creations of a project, so that the count of each includes every one
committed before it and no two can pass a limit together. The lock is
taken last and held for the count and the commit only; a creation none
of whose resources has a limit takes none.
"""

from typing import Any

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import limits as limits_mod
from cyborg.conf import quota as quota_conf
from cyborg.db import arqs as arq_db
from cyborg.db import quotas as quotas_db
from cyborg.domain import quotas as quota_rules

LOG = logging.getLogger(__name__)


class UnifiedLimits:
    """Checks a project's new ARQs against its limits in Keystone."""

    def __init__(self, limits: limits_mod.KeystoneLimits, strategy: str,
                 listed: list[str]):
        self.limits = limits
        self._strategy = strategy
        self._listed = listed

    def project_limits(self, project_id: str, names) -> dict[str, int]:
        """The limits of those of ``names`` that are limited."""
        return quota_rules.effective_limits(
            names, self.limits.registered(), self.limits.project(project_id),
            self._strategy, self._listed)

    def check(self, project_id: str, new: list[dict[str, int]]
              ) -> arq_db.QuotaCount | None:
        """The count to make after the insert of ARQs counting ``new``
        (None when no limit applies to them): it raises QuotaExceeded if
        ``project_id``'s usage, counted in the transaction of the
        connection it is given, passes a limit. The limits are read now,
        before the caller's lock."""
        requested = quota_rules.deltas(new)
        limits = quota_rules.bounded(self.project_limits(project_id,
                                                         requested))
        if not limits:
            return None

        def count(connection) -> None:
            total = quotas_db.count_usage(connection, project_id)
            before = {name: total.get(name, 0) - requested.get(name, 0)
                      for name in limits}
            over = quota_rules.over_limits(limits, before, requested)
            if over:
                LOG.info('Refused %d ARQs to project %s: %s', len(new),
                         project_id, '; '.join(map(str, over)))
                raise exception.QuotaExceeded(
                    project=project_id, details='; '.join(map(str, over)))
        return count


def unregistered_limits(context, conf: Any,
                        limits: limits_mod.KeystoneLimits | None = None
                        ) -> list[tuple[str, list[str], bool]]:
    """The resources device profiles ask for (and
    ``accelerator_requests``) without a registered limit in Keystone:
    (name, the profiles using it, whether the strategy makes that a
    limit of 0), sorted by name. Raises QuotaUnavailable when Keystone
    cannot be read."""
    if limits is None:
        limits = limits_mod.KeystoneLimits(0)
    used = {quota_rules.ARQS: []}
    for resource_class, profiles in quotas_db.profile_resource_classes(
            context).items():
        used[quota_rules.class_name(resource_class)] = profiles
    registered = limits.registered()
    denied = set(quota_rules.limited_names(
        used, registered, conf.quota.unified_limits_resource_strategy,
        conf.quota.unified_limits_resource_list))
    return [(name, used[name], name in denied)
            for name in quota_rules.unregistered(used, registered)]


def describe_unregistered(missing: list[tuple[str, list[str], bool]]
                          ) -> list[str]:
    """One line per resource of :func:`unregistered_limits`."""
    return ['%s (%s): %s' % (
        name, 'device profiles %s' % ', '.join(profiles) if profiles
        else 'every accelerator request',
        'limit 0, every request is refused' if denied else 'unlimited')
        for name, profiles, denied in missing]


def from_conf(conf: Any) -> UnifiedLimits | None:
    """The check ``[quota] driver`` asks for (None: ``noop``)."""
    if conf.quota.driver != quota_conf.UNIFIED_LIMITS:
        return None
    return UnifiedLimits(
        limits_mod.KeystoneLimits(conf.quota.limit_cache_time),
        conf.quota.unified_limits_resource_strategy,
        list(conf.quota.unified_limits_resource_list))
