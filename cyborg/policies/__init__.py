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

"""Policy rules and enforcement.

New role and scope defaults are enforced by default: every rule is
project scoped, so a system-scoped token is refused with 403.
"""

import itertools
import time

from oslo_config import cfg
from oslo_policy import policy

from cyborg.common import exception
from cyborg.policies import arq
from cyborg.policies import attribute
from cyborg.policies import base
from cyborg.policies import checks
from cyborg.policies import deployable
from cyborg.policies import device
from cyborg.policies import device_profile
from cyborg.policies import device_taint_rule
from cyborg.policies import metrics
from cyborg.policies import quota


def list_rules():
    return list(itertools.chain(base.rules, device_profile.rules, arq.rules,
                                device.rules, deployable.rules,
                                attribute.rules, metrics.rules,
                                device_taint_rule.rules, quota.rules))


def get_enforcer(conf: cfg.ConfigOpts | None = None) -> policy.Enforcer:
    """A new enforcer with cyborg's rules registered.

    Also the ``oslo.policy.enforcer`` entry point, for oslopolicy tools.
    """
    if conf is None:
        from cyborg.conf import opts
        conf = cfg.CONF
        opts.set_lib_defaults()
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(list_rules())
    return enforcer


class Authorizer:
    """Policy checks with a cache of decisions.

    A decision depends only on the rule, the caller's credentials and the
    target, so it is cached under those. The cache is dropped whenever
    oslo.policy reloads its rules (it re-reads a changed policy file at
    most every ``reload_interval`` seconds).
    """

    def __init__(self, enforcer: policy.Enforcer,
                 reload_interval: float = 1.0, max_entries: int = 4096):
        self.enforcer = enforcer
        self._reload_interval = reload_interval
        self._max_entries = max_entries
        self._decisions: dict[tuple, bool] = {}
        self._rules_seen = None
        self._next_reload = 0.0

    def _refresh(self) -> None:
        now = time.monotonic()
        if now < self._next_reload:
            return
        self._next_reload = now + self._reload_interval
        self.enforcer.load_rules()
        if self.enforcer.rules is not self._rules_seen:
            self._rules_seen = self.enforcer.rules
            self._decisions = {}

    def reload(self) -> None:
        """Read the policy file (and policy directories) again now, as on
        SIGHUP, and drop the cached decisions."""
        self.enforcer.load_rules(force_reload=True)
        self._rules_seen = self.enforcer.rules
        self._decisions = {}
        self._next_reload = time.monotonic() + self._reload_interval

    def authorize(self, rule: str, context,
                  target: dict | None = None) -> None:
        """Raise PolicyNotAuthorized unless ``context`` may do ``rule``.

        The default target is the caller's own project, as upstream.
        """
        if not self.allowed(rule, context, target):
            raise exception.PolicyNotAuthorized(action=rule)

    def allowed(self, rule: str, context, target: dict | None = None) -> bool:
        """Whether ``context`` may do ``rule`` (see :meth:`authorize`)."""
        if target is None:
            target = {'project_id': context.project_id,
                      'user_id': context.user_id}
        self._refresh()
        key = (rule, _credentials_key(context),
               tuple(sorted(target.items())),
               # What service_token_role:configured compares with.
               tuple(checks.service_token_roles(self.enforcer.conf)))
        allowed = self._decisions.get(key)
        if allowed is None:
            try:
                allowed = bool(self.enforcer.authorize(rule, target, context))
            except policy.InvalidScope:
                allowed = False
            if len(self._decisions) >= self._max_entries:
                self._decisions = {}
            self._decisions[key] = allowed
        return allowed


def _credentials_key(context) -> tuple:
    return (tuple(context.roles or ()), tuple(context.service_roles or ()),
            context.project_id, context.user_id, context.system_scope,
            context.domain_id, context.project_domain_id,
            context.user_domain_id, context.is_admin)
