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

"""JSON Schema of device profile requests."""

from typing import Any

from cyborg.api.schemas import common
from cyborg.common import exception
from cyborg.domain import device_profile as dp_rules

#: ``?name=<name>[,<name>...]``.
LIST_QUERY = common.query(name=common.STRING)
#: ``?value=<uuid>`` or ``?value=<name>[,<name>...]``.
DELETE_QUERY = common.query(value=common.STRING)
NAME_PATTERN = '^[a-zA-Z0-9-_]+$'

_KEYS = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': {'type': ['string', 'integer']},
}
# A group: keys as above, and (microversion 2.9) ordered ``alternatives``,
# each of resources: and trait: keys (checked further in
# cyborg.domain.device_profile).
_GROUP = dict(_KEYS, properties={
    dp_rules.ALTERNATIVES: {'type': 'array', 'minItems': 1,
                            'maxItems': dp_rules.MAX_ALTERNATIVES,
                            'items': _KEYS}})

PROFILE = {
    'type': 'object',
    'properties': {
        'name': {'type': 'string', 'minLength': 1, 'maxLength': 255,
                 'pattern': NAME_PATTERN},
        'description': {'type': ['string', 'null'], 'maxLength': 255},
        'uuid': {'type': 'string', 'minLength': 1, 'maxLength': 36},
        'groups': {'type': 'array', 'minItems': 1, 'maxItems': 64,
                   'items': _GROUP},
    },
    'required': ['name', 'groups'],
    'additionalProperties': False,
}

#: ``PATCH /v2/device_profiles/{uuid}``: what changes (the name stays).
UPDATE = {
    'type': 'object',
    'properties': {
        'description': PROFILE['properties']['description'],
        'groups': PROFILE['properties']['groups'],
        'enabled': {'type': 'boolean'},
    },
    'minProperties': 1,
    'additionalProperties': False,
}

CREATE = {
    'type': 'array',
    'items': PROFILE,
    'minItems': 1,
    'maxItems': 1,
}


def as_list(body: Any) -> Any:
    """A creation body as the list :data:`CREATE` describes: one profile
    object is taken as a list of it; a list of several is refused (400)
    before anything else is checked."""
    if isinstance(body, dict):
        body = [body]
    if isinstance(body, list) and len(body) != 1:
        raise exception.Invalid(reason='Only one device profile allowed per '
                                       'POST request for now.')
    return body
