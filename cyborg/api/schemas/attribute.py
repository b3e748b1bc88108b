"""JSON Schema of attribute requests."""

from cyborg.api import validation

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
