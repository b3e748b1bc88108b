"""Policy rules and enforcement.

New role and scope defaults are enforced by default: every rule is
project scoped, so a system-scoped token is refused with 403.
"""

import itertools

from oslo_config import cfg
from oslo_policy import policy

from cyborg.common import exception
from cyborg.policies import arq
from cyborg.policies import attribute
from cyborg.policies import base
from cyborg.policies import deployable
from cyborg.policies import device
from cyborg.policies import device_profile


def list_rules():
    return list(itertools.chain(base.rules, device_profile.rules, arq.rules,
                                device.rules, deployable.rules,
                                attribute.rules))


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


def authorize(enforcer: policy.Enforcer, rule: str, context,
              target: dict | None = None) -> None:
    """Raise PolicyNotAuthorized unless ``context`` may do ``rule``.

    The default target is the caller's own project, as upstream.
    """
    if target is None:
        target = {'project_id': context.project_id,
                  'user_id': context.user_id}
    try:
        allowed = enforcer.authorize(rule, target, context)
    except policy.InvalidScope:
        allowed = False
    if not allowed:
        raise exception.PolicyNotAuthorized(action=rule)
