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

PATH = '/v2/device_profiles'

GET_ALL = 'cyborg:device_profile:get_all'
GET_ONE = 'cyborg:device_profile:get_one'
CREATE = 'cyborg:device_profile:create'
DELETE = 'cyborg:device_profile:delete'
UPDATE = 'cyborg:device_profile:update'

rules = [
    base.rule(GET_ALL, base.PROJECT_READER_OR_ADMIN,
              'List device profiles.', [('GET', PATH)]),
    base.rule(GET_ONE, base.PROJECT_READER_OR_ADMIN,
              'Show a device profile.',
              [('GET', PATH + '/{device_profile_name_or_uuid}')]),
    base.rule(CREATE, base.ADMIN,
              'Create a device profile.', [('POST', PATH)]),
    base.rule(UPDATE, base.ADMIN,
              'Update a device profile (description, groups, enabled).',
              [('PATCH', PATH + '/{uuid}')]),
    base.rule(DELETE, base.ADMIN,
              'Delete device profiles.',
              [('DELETE', PATH), ('DELETE', PATH + '/{name_or_uuid}')]),
]
