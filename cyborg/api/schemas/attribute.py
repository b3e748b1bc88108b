"""JSON Schema of attribute requests."""

_ATTRIBUTE = {
    'type': 'object',
    'properties': {
        'deployable_id': {'type': ['integer', 'string'],
                          'pattern': '^[0-9]+$', 'minimum': 1},
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
