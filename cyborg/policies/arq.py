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

from cyborg.policies import base

PATH = '/v2/accelerator_requests'

rules = [
    base.rule('cyborg:arq:get_all', base.PROJECT_READER_OR_ADMIN,
              'List accelerator requests.', [('GET', PATH)]),
    base.rule('cyborg:arq:get_one', base.PROJECT_READER_OR_ADMIN,
              'Show an accelerator request.',
              [('GET', PATH + '/{accelerator_request_uuid}')]),
    base.rule('cyborg:arq:create', base.PROJECT_MEMBER_OR_SERVICE,
              'Create accelerator requests.', [('POST', PATH)]),
    base.rule('cyborg:arq:update', base.PROJECT_MEMBER_OR_SERVICE,
              'Bind or unbind accelerator requests.',
              [('PATCH', PATH), ('PATCH', PATH + '/{uuid}')]),
    base.rule('cyborg:arq:delete', base.PROJECT_MEMBER_OR_SERVICE,
              'Delete accelerator requests.',
              [('DELETE', PATH), ('DELETE', PATH + '/{uuid}')]),
]
