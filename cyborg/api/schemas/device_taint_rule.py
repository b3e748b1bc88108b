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

"""JSON Schema of device taint rule requests (API 2.8).

The shapes only; what a selector and a taint may hold is
:mod:`cyborg.domain.taint_rules`' and :mod:`cyborg.domain.taints`' to
say, and these schemas take their names and limits from there.
"""

from typing import Any

from cyborg.domain import taint_rules
from cyborg.domain import taints

_CRITERION = {'type': 'string', 'minLength': 1,
              'maxLength': taint_rules.CRITERION_MAX_LENGTH}

SELECTOR: dict[str, Any] = {
    'type': 'object',
    'minProperties': 1,
    'properties': dict(
        {field: _CRITERION for field in taint_rules.SELECTOR_FIELDS
         if field != 'attribute'},
        attribute={'type': 'object', 'minProperties': 1,
                   'maxProperties': taint_rules.ATTRIBUTES_MAX,
                   'propertyNames': _CRITERION,
                   'additionalProperties': {
                       'type': 'string',
                       'maxLength': taint_rules.CRITERION_MAX_LENGTH}}),
    'additionalProperties': False,
}

TAINT: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'key': {'type': 'string', 'minLength': 1,
                'maxLength': taints.KEY_MAX_LENGTH,
                'pattern': taints.KEY_PATTERN.pattern},
        'value': {'type': 'string', 'maxLength': taints.VALUE_MAX_LENGTH},
        'effect': {'enum': list(taints.EFFECTS)},
        'reason': {'type': ['string', 'null'],
                   'maxLength': taints.REASON_MAX_LENGTH},
    },
    'required': ['key', 'effect'],
    'additionalProperties': False,
}

CREATE: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'name': {'type': ['string', 'null'], 'maxLength': 255},
        'description': {'type': ['string', 'null'], 'maxLength': 255},
        'selector': SELECTOR,
        'taint': TAINT,
    },
    'required': ['selector', 'taint'],
    'additionalProperties': False,
}
