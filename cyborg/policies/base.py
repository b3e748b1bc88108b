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

"""Base rules: the personas every endpoint rule is built from."""

from oslo_policy import policy

# Registers the checks before any rule below is parsed.
from cyborg.policies import checks

PROJECT_SCOPE = ['project']

ADMIN = 'rule:admin_api'
PROJECT_READER_OR_ADMIN = 'rule:project_reader_or_admin'
PROJECT_MEMBER_OR_ADMIN = 'rule:project_member_or_admin'
PROJECT_MANAGER_OR_ADMIN = 'rule:project_manager_or_admin'
PROJECT_MEMBER_OR_SERVICE = 'rule:project_member_or_service'
SERVICE_TOKEN = 'rule:service_token_api'

rules = [
    policy.RuleDefault('admin_api', 'role:admin',
                       description='An administrator.'),
    policy.RuleDefault('project_admin_api',
                       'role:admin and project_id:%(project_id)s',
                       description='An administrator of the project.'),
    policy.RuleDefault('project_member_api',
                       'role:member and project_id:%(project_id)s',
                       description='A member of the project.'),
    policy.RuleDefault('project_reader_api',
                       'role:reader and project_id:%(project_id)s',
                       description='A reader of the project.'),
    policy.RuleDefault('project_manager_api',
                       'role:manager and project_id:%(project_id)s',
                       description='A manager of the project.'),
    policy.RuleDefault('service_api', 'role:service',
                       description='Another OpenStack service (Nova).'),
    policy.RuleDefault('service_token_api',
                       '%s:%s' % (checks.SERVICE_TOKEN_ROLE,
                                  checks.CONFIGURED),
                       description='A request that carries a service token '
                                   '(X-Service-Token) with one of the roles '
                                   'of [keystone_authtoken] '
                                   'service_token_roles: another OpenStack '
                                   'service (Nova) acting on behalf of a '
                                   'user. service_token_role:<role> names '
                                   'one role instead.'),
    policy.RuleDefault('project_member_or_admin',
                       'rule:project_member_api or rule:admin_api',
                       description='A project member or an administrator.'),
    policy.RuleDefault('project_reader_or_admin',
                       'rule:project_reader_api or rule:admin_api',
                       description='A project reader or an administrator.'),
    policy.RuleDefault('project_manager_or_admin',
                       'rule:project_manager_api or rule:admin_api',
                       description='A project manager or an administrator.'),
    policy.RuleDefault('project_member_or_service',
                       'rule:project_member_api or rule:service_api',
                       description='A project member or a service.'),
]


def rule(name: str, check: str, description: str,
         operations: list[tuple[str, str]]) -> policy.DocumentedRuleDefault:
    """An endpoint rule; every one is project scoped."""
    return policy.DocumentedRuleDefault(
        name=name, check_str=check, description=description,
        operations=[{'method': method, 'path': path}
                    for method, path in operations],
        scope_types=PROJECT_SCOPE)
