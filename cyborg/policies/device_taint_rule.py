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

PATH = '/v2/device_taint_rules'

GET_ALL = 'cyborg:device_taint_rule:get_all'
GET_ONE = 'cyborg:device_taint_rule:get_one'
CREATE = 'cyborg:device_taint_rule:create'
DELETE = 'cyborg:device_taint_rule:delete'

rules = [
    base.rule(GET_ALL, base.ADMIN,
              'List device taint rules (API 2.8).', [('GET', PATH)]),
    base.rule(GET_ONE, base.ADMIN,
              'Show a device taint rule and its status: the devices, bound '
              'ARQs, instances and projects it affects (API 2.8).',
              [('GET', PATH + '/{uuid}')]),
    base.rule(CREATE, base.ADMIN,
              'Create a device taint rule: taint the devices it selects, '
              'or, with effect None, a dry run (API 2.8).',
              [('POST', PATH)]),
    base.rule(DELETE, base.ADMIN,
              'Delete a device taint rule and the taints it holds '
              '(API 2.8).', [('DELETE', PATH + '/{uuid}')]),
]
