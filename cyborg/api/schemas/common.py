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

"""Schema pieces every resource's query-string schemas share.

A query-string schema is an object schema whose ``properties`` are the
parameters an endpoint takes (each value is a string); any other
parameter is refused as an unknown argument. A schema that lists
``filters`` takes the ``filters.field=...&filters.value=...`` syntax
(:mod:`cyborg.api.filters`), seen as one object of field -> value.
"""

from typing import Any

from cyborg.api import filters

STRING: dict[str, Any] = {'type': 'string'}

#: The WSME-style filters of the devices and deployables lists.
FILTERS: dict[str, Any] = {
    'type': 'object',
    'propertyNames': {'enum': sorted(filters.FILTER_FIELDS)},
    'additionalProperties': {'type': ['string', 'null']},
}


def query(**parameters: dict) -> dict[str, Any]:
    """The schema of a query string that takes parameters (name ->
    schema of its value) and nothing else."""
    return {
        'type': 'object',
        'properties': parameters,
        'additionalProperties': False,
    }


#: The query string of an endpoint that takes no parameter.
NO_QUERY = query()


#: One JSON-patch-like operation of a PATCH body; what its values mean is
#: the endpoint's to check.
PATCH_OP: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'op': {'type': 'string'},
        'path': {'type': 'string'},
        'value': {},
    },
    'required': ['op', 'path'],
}

#: A PATCH body that is a list of at least one operation.
PATCH_OPS: dict[str, Any] = {
    'type': 'array',
    'items': PATCH_OP,
    'minItems': 1,
}
