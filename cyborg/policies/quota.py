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

"""Policies of /v2/quotas."""

from cyborg.policies import base

PATH = '/v2/quotas'

GET_ONE = 'cyborg:quota:get_one'

rules = [
    base.rule(GET_ONE, base.PROJECT_READER_OR_ADMIN,
              'Show a project\'s limits and usage of each resource: a '
              'reader of the project or an administrator (API 2.9).',
              [('GET', PATH + '/{project_id}')]),
]
