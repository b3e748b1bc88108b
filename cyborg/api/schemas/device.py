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

"""JSON Schema of device requests."""

from cyborg.api.schemas import common
from cyborg.domain import partitions as partition_rules

_LIST = {'type': common.STRING, 'vendor': common.STRING,
         'hostname': common.STRING, 'filters': common.FILTERS}
LIST_QUERY = common.query(**_LIST)
#: From 2.3 the list also filters by status.
LIST_QUERY_2_3 = common.query(status=common.STRING, **_LIST)

#: ``PUT /v2/devices/{uuid}/partitions`` (2.10): the profile a
#: partitioned GPU serves (null: the one its driver's policy chooses),
#: and whether the policy may switch it (``pinned``: never).
PARTITIONS = {
    'type': 'object',
    'properties': {
        'profile': {'oneOf': [
            {'type': 'null'},
            {'type': 'string', 'pattern': partition_rules.PROFILE_PATTERN,
             'maxLength': partition_rules.PROFILE_MAX_LENGTH}]},
        'pinned': {'type': 'boolean'},
    },
    'required': ['profile', 'pinned'],
    'additionalProperties': False,
}
