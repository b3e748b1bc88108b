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

import os
import time

import pytest

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.common import exception

READ_DP = 'cyborg:device_profile:get_all'

# rule -> personas allowed under the new defaults.
EXPECTED = {
    'cyborg:device_profile:get_all': {'reader', 'member', 'manager', 'admin'},
    'cyborg:device_profile:get_one': {'reader', 'member', 'manager', 'admin'},
    'cyborg:device_profile:create': {'admin'},
    'cyborg:device_profile:delete': {'admin'},
    'cyborg:device_profile:update': {'admin'},
    'cyborg:device_taint_rule:get_all': {'admin'},
    'cyborg:device_taint_rule:get_one': {'admin'},
    'cyborg:device_taint_rule:create': {'admin'},
    'cyborg:device_taint_rule:delete': {'admin'},
    'cyborg:arq:get_all': {'reader', 'member', 'manager', 'admin'},
    'cyborg:arq:get_one': {'reader', 'member', 'manager', 'admin'},
    'cyborg:arq:create': {'member', 'manager', 'admin', 'service'},
    'cyborg:arq:update': {'member', 'manager', 'admin', 'service'},
    'cyborg:arq:delete': {'member', 'manager', 'admin', 'service'},
    'cyborg:device:get_all': {'manager', 'admin'},
    'cyborg:device:get_one': {'manager', 'admin'},
    'cyborg:device:disable': {'admin'},
    'cyborg:device:enable': {'admin'},
    'cyborg:device:set_partitions': {'admin'},
    'cyborg:deployable:get_all': {'manager', 'admin'},
    'cyborg:deployable:get_one': {'manager', 'admin'},
    'cyborg:deployable:program': {'admin'},
    'cyborg:attribute:get_all': {'manager', 'admin'},
    'cyborg:attribute:get_one': {'manager', 'admin'},
    'cyborg:attribute:create': {'admin'},
    'cyborg:attribute:delete': {'admin'},
    'cyborg:metrics:get': {'admin', 'service'},
    'cyborg:quota:get_one': {'reader', 'member', 'manager', 'admin'},
}

# Keystone's implied roles, as a token carries them.
PERSONAS = {
    'reader': ['reader'],
    'member': ['member', 'reader'],
    'manager': ['manager', 'member', 'reader'],
    'admin': ['admin', 'manager', 'member', 'reader'],
    'service': ['service'],
    'other': ['foo'],
}


@pytest.fixture
def authorizer(conf):
    return policies.Authorizer(policies.get_enforcer(conf))


def _context(roles, **kwargs):
    kwargs.setdefault('project_id', 'p1')
    return cyborg_context.RequestContext(roles=roles, user_id='u1', **kwargs)


def test_every_rule_is_listed_and_project_scoped():
    rules = {r.name: r for r in policies.list_rules()}
    for name in EXPECTED:
        assert rules[name].scope_types == ['project']
    endpoint_rules = {n for n in rules if n.startswith('cyborg:')}
    assert endpoint_rules == set(EXPECTED)


@pytest.mark.parametrize('rule', sorted(EXPECTED))
@pytest.mark.parametrize('persona', sorted(PERSONAS))
def test_new_defaults(authorizer, rule, persona):
    context = _context(PERSONAS[persona])
    if persona in EXPECTED[rule]:
        authorizer.authorize(rule, context)
    else:
        with pytest.raises(exception.PolicyNotAuthorized) as error:
            authorizer.authorize(rule, context)
        assert error.value.code == 403
        assert str(error.value) == (
            'Access was denied to the following resource: %s' % rule
        )


@pytest.mark.parametrize('rule', sorted(EXPECTED))
def test_system_scope_is_refused(authorizer, rule):
    context = _context(PERSONAS['admin'], project_id=None, system_scope='all')
    with pytest.raises(exception.PolicyNotAuthorized):
        authorizer.authorize(rule, context)


def test_other_project_target_is_refused(authorizer):
    context = _context(PERSONAS['member'])
    with pytest.raises(exception.PolicyNotAuthorized):
        authorizer.authorize(
            'cyborg:arq:get_one',
            context,
            {'project_id': 'p2', 'user_id': 'u2'},
        )


def test_decisions_are_cached_per_credentials(authorizer):
    calls = []
    real = authorizer.enforcer.authorize

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    authorizer.enforcer.authorize = counting
    for _ in range(3):
        authorizer.authorize(READ_DP, _context(['reader']))
    assert calls == [READ_DP]
    with pytest.raises(exception.PolicyNotAuthorized):
        authorizer.authorize(READ_DP, _context(['foo']))
    assert calls == [READ_DP, READ_DP]


def test_policy_file_change_drops_cached_decisions(conf, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('{}')
    conf.set_override('policy_file', str(policy_file), group='oslo_policy')
    authorizer = policies.Authorizer(
        policies.get_enforcer(conf), reload_interval=0
    )
    authorizer.authorize(READ_DP, _context(['reader']))
    policy_file.write_text('"%s": "role:admin"\n' % READ_DP)
    future = time.time() + 10
    os.utime(policy_file, (future, future))
    with pytest.raises(exception.PolicyNotAuthorized):
        authorizer.authorize(READ_DP, _context(['reader']))


def test_rule_names_are_only_written_in_the_policy_modules():
    """Controllers name rules through the constants of cyborg.policies."""
    import ast
    import pathlib

    package = pathlib.Path(policies.__file__).parent.parent
    names = {rule.name for rule in policies.list_rules()}
    found = []
    for path in package.rglob('*.py'):
        if path.parent.name == 'policies':
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append('%s: %s' % (path, node.value))
    assert found == []
