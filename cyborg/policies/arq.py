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

from oslo_policy import policy

from cyborg.policies import base

PATH = '/v2/accelerator_requests'

GET_ALL = 'cyborg:arq:get_all'
GET_ONE = 'cyborg:arq:get_one'
CREATE = 'cyborg:arq:create'
UPDATE = 'cyborg:arq:update'
DELETE = 'cyborg:arq:delete'
#: Not an endpoint's rule: checked after UPDATE or DELETE for what only
#: Nova does (see its description).
INSTANCE_BINDING = 'arq_instance_binding'

rules = [
    base.rule(GET_ALL, base.PROJECT_READER_OR_ADMIN,
              'List accelerator requests.', [('GET', PATH)]),
    base.rule(GET_ONE, base.PROJECT_READER_OR_ADMIN,
              'Show an accelerator request.',
              [('GET', PATH + '/{accelerator_request_uuid}')]),
    base.rule(CREATE, base.PROJECT_MEMBER_OR_SERVICE,
              'Create accelerator requests.', [('POST', PATH)]),
    base.rule(UPDATE, base.PROJECT_MEMBER_OR_SERVICE,
              'Bind or unbind accelerator requests.',
              [('PATCH', PATH), ('PATCH', PATH + '/{uuid}')]),
    base.rule(DELETE, base.PROJECT_MEMBER_OR_SERVICE,
              'Delete accelerator requests.',
              [('DELETE', PATH), ('DELETE', PATH + '/{uuid}')]),
    # Who may act on accelerator requests for an instance.
    policy.RuleDefault(
        INSTANCE_BINDING, base.SERVICE_TOKEN,
        description=(
            'Act on accelerator requests for an instance: bind or unbind '
            'them (PATCH %(path)s, PATCH %(path)s/{uuid}), delete the '
            'requests of an instance (DELETE '
            '%(path)s?instance={instance_uuid}) and delete a request bound '
            'to an instance. Checked after cyborg:arq:update or '
            'cyborg:arq:delete. These are what Nova does for its '
            'instances, so the default needs a service token; a refusal '
            'answers 403 "This operation requires a service token", or, '
            'deleting a bound request, names its instance.'
            % {'path': PATH})),
]
