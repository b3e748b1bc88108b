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

"""JSON Schema of attribute requests."""

from cyborg.api import validation
from cyborg.api.schemas import common

LIST_QUERY = common.query(deployable_id=common.STRING, key=common.STRING)

_ATTRIBUTE = {
    'type': 'object',
    'properties': {
        # An id as a number or a string of ASCII digits, within the
        # column's range either way.
        'deployable_id': {'type': ['integer', 'string'],
                          'pattern': '^[0-9]{1,10}$', 'minimum': 1,
                          'maximum': validation.MAX_INTEGER_COLUMN},
        'key': {'type': 'string', 'minLength': 1, 'maxLength': 255},
        'value': {'type': ['string', 'number'], 'maxLength': 65535},
        'uuid': {'type': 'string', 'maxLength': 36},
    },
    'required': ['deployable_id', 'key', 'value'],
    'additionalProperties': False,
}

CREATE = {
    'oneOf': [
        _ATTRIBUTE,
        {'type': 'object', 'properties': {'attribute': _ATTRIBUTE},
         'required': ['attribute'], 'additionalProperties': False},
    ],
}
