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

PATH = '/v2/devices'

GET_ALL = 'cyborg:device:get_all'
GET_ONE = 'cyborg:device:get_one'
DISABLE = 'cyborg:device:disable'
ENABLE = 'cyborg:device:enable'
SET_PARTITIONS = 'cyborg:device:set_partitions'

rules = [
    base.rule(GET_ALL, base.PROJECT_MANAGER_OR_ADMIN,
              'List devices.', [('GET', PATH)]),
    base.rule(GET_ONE, base.PROJECT_MANAGER_OR_ADMIN,
              'Show a device.', [('GET', PATH + '/{uuid}')]),
    base.rule(DISABLE, base.ADMIN,
              'Disable a device.', [('POST', PATH + '/{uuid}/disable')]),
    base.rule(ENABLE, base.ADMIN,
              'Enable a device.', [('POST', PATH + '/{uuid}/enable')]),
    base.rule(SET_PARTITIONS, base.ADMIN,
              'Set or pin the partition profile of a partitioned GPU '
              '(API 2.10).', [('PUT', PATH + '/{uuid}/partitions')]),
]
