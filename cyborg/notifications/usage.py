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

"""The ``accelerator_request.exists`` payload: one usage record.

Its data is the record as :func:`cyborg.domain.usage.records` computes
it and the database keeps it (sent to the byte as created, whenever it
is sent); this module wraps it in the versioned envelope of Nova's
notifications with the ``cyborg_object.`` prefix and gives its JSON
Schema (draft 2020-12). ``doc/notification_samples/
accelerator_request.exists.json`` is a sample the tests validate.
"""

from typing import Any

from cyborg.domain import usage

NAME = 'AcceleratorRequestExistsPayload'
VERSION = '1.0'
PREFIX = 'cyborg_object.'
NAMESPACE = 'cyborg'
EVENT_TYPE = usage.EVENT_TYPE

_NULLABLE_STRING = {'type': ['string', 'null']}
_TIME = {'type': 'string', 'format': 'date-time'}

#: Each field of the data and its JSON Schema.
FIELDS: dict[str, dict[str, Any]] = {
    'arq_uuid': {'type': 'string', 'format': 'uuid'},
    'project_id': _NULLABLE_STRING,
    'instance_uuid': {'type': ['string', 'null'], 'format': 'uuid'},
    'device_profile_name': _NULLABLE_STRING,
    'resource_class': _NULLABLE_STRING,
    'vendor': _NULLABLE_STRING,
    'model': _NULLABLE_STRING,
    'host': _NULLABLE_STRING,
    'audit_period_beginning': _TIME,
    'audit_period_ending': _TIME,
    # Seconds bound within the period: never more than the period.
    'bound_seconds': {'type': 'number', 'minimum': 0,
                      'exclusiveMinimum': 0},
    # The device's latest reading while the ARQ still held it at the end
    # of the period (see cyborg.domain.usage.records), else null.
    'latest_utilization': {
        'type': ['object', 'null'],
        'required': ['metrics', 'reported_at'],
        'properties': {
            'metrics': {'type': 'object',
                        'additionalProperties': {'type': 'number'}},
            'reported_at': {'type': ['string', 'null']},
        },
    },
}


def envelope(data: dict[str, Any]) -> dict[str, Any]:
    """The versioned payload carrying ``data`` (a stored record)."""
    return {PREFIX + 'name': NAME, PREFIX + 'namespace': NAMESPACE,
            PREFIX + 'version': VERSION,
            PREFIX + 'data': {field: data[field] for field in FIELDS}}


def schema() -> dict[str, Any]:
    """The JSON Schema of the enveloped payload: every field present,
    none other."""
    keys = [PREFIX + key for key in ('name', 'namespace', 'version',
                                     'data')]
    return {
        '$schema': 'https://json-schema.org/draft/2020-12/schema',
        'title': '%s %s' % (NAME, VERSION),
        'description': 'The usage of one accelerator request during one '
                       'audit period.',
        'type': 'object',
        'required': keys,
        'additionalProperties': False,
        'properties': {
            PREFIX + 'name': {'const': NAME},
            PREFIX + 'namespace': {'const': NAMESPACE},
            PREFIX + 'version': {'const': VERSION},
            PREFIX + 'data': {
                'type': 'object',
                'required': list(FIELDS),
                'additionalProperties': False,
                'properties': FIELDS,
            },
        },
    }
