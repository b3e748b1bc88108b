"""JSON Schema of device profile requests."""

NAME_PATTERN = '^[a-zA-Z0-9-_]+$'

_GROUP = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': {'type': ['string', 'integer']},
}

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

CREATE = {
    'type': 'array',
    'items': PROFILE,
    'minItems': 1,
    'maxItems': 1,
}
