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

"""Every request schema of the API, with examples it accepts and refuses,
and the decorator that applies them."""

import inspect

import jsonschema
import pytest

from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import root
from cyborg.api.schemas import arq
from cyborg.api.schemas import attribute
from cyborg.api.schemas import common
from cyborg.api.schemas import deployable
from cyborg.api.schemas import device
from cyborg.api.schemas import device_profile
from cyborg.common import exception

UUID = 'aaaaaaaa-0000-4000-8000-000000000001'
OPS = [{'op': 'add', 'path': '/hostname', 'value': 'h1'}]

BODIES = [
    # (schema, valid examples, invalid examples with their message)
    (arq.CREATE,
     [{'device_profile_name': 'dp'},
      {'device_profile_name': '', 'device_profile_group_id': 0,
       'image_uuid': None}],
     [({}, "body: 'device_profile_name' is a required property"),
      ({'device_profile_name': 1}, "device_profile_name: 1 is not of type "
                                   "'string'"),
      ({'device_profile_name': 'dp', 'x': 1}, 'body: Additional '
                                              'properties are not allowed'),
      ({'device_profile_name': 'd' * 256}, 'device_profile_name: ')]),
    (arq.PATCH,
     [{UUID: OPS}, {UUID: [{'op': 'remove', 'path': '/hostname'}]}],
     [([], "body: [] is not of type 'object'"),
      ({}, 'body: {} should be non-empty'),
      ({UUID: []}, '%s: [] should be non-empty' % UUID),
      ({UUID: [{'op': 'add'}]}, "%s/0: 'path' is a required property"
                                % UUID),
      ({UUID: [{'op': 1, 'path': '/hostname'}]}, "%s/0/op: 1 is not of "
                                                 "type 'string'" % UUID)]),
    (arq.PATCH_MEMBER,
     [OPS, {UUID: OPS}],
     [([], 'body: [] should be non-empty'),
      ('x', "body: 'x' is not of type 'array'"),
      (None, "body: None is not of type 'array'"),
      ({}, 'body: {} should be non-empty'),
      ([{'path': '/hostname'}], "0: 'op' is a required property")]),
    (attribute.CREATE,
     [{'deployable_id': 1, 'key': 'k', 'value': 'v'},
      {'deployable_id': '12', 'key': 'k', 'value': 1.5, 'uuid': UUID},
      {'attribute': {'deployable_id': 1, 'key': 'k', 'value': 'v'}}],
     [({'deployable_id': 0, 'key': 'k', 'value': 'v'},
       'deployable_id: 0 is less than the minimum of 1'),
      ({'deployable_id': 'x', 'key': 'k', 'value': 'v'},
       "deployable_id: 'x' does not match"),
      ({'deployable_id': 1, 'key': '', 'value': 'v'},
       "key: '' should be non-empty"),
      ({'key': 'k', 'value': 'v'}, 'body: ')]),
    (device_profile.CREATE,
     [[{'name': 'dp-1', 'groups': [{'resources:FPGA': '1'}]}],
      [{'name': 'dp', 'description': None, 'uuid': UUID,
        'groups': [{'resources:FPGA': 1}]}]],
     [([], 'body: [] should be non-empty'),
      ([{'name': 'dp'}], "0: 'groups' is a required property"),
      ([{'name': 'a b', 'groups': [{'x': '1'}]}], '0/name: '),
      ([{'name': 'dp', 'groups': []}], '0/groups: [] should be non-empty'),
      ([{'name': 'dp', 'groups': [{}]}], '0/groups/0: {} should be '
                                         'non-empty'),
      ([{'name': 'dp', 'groups': [{'x': None}]}], '0/groups/0/x: None is '
                                                  'not of type')]),
]

BODY_CASES = [
    pytest.param(schema, example, id='valid-%d-%d' % (i, j))
    for i, (schema, valid, _) in enumerate(BODIES)
    for j, example in enumerate(valid)
]
BAD_BODY_CASES = [
    pytest.param(schema, example, message, id='invalid-%d-%d' % (i, j))
    for i, (schema, _, invalid) in enumerate(BODIES)
    for j, (example, message) in enumerate(invalid)
]


@pytest.mark.parametrize('schema, example', BODY_CASES)
def test_body_schema_accepts(schema, example):
    validation.validate(schema, example)


@pytest.mark.parametrize('schema, example, message', BAD_BODY_CASES)
def test_body_schema_refuses(schema, example, message):
    with pytest.raises(exception.Invalid) as error:
        validation.validate(schema, example)
    assert error.value.code == 400
    assert str(error.value).startswith(message), str(error.value)


QUERIES = [
    # (schema, accepted parameters, an unknown parameter)
    (common.NO_QUERY, {}, 'limit'),
    (arq.LIST_QUERY, {'instance': UUID, 'bind_state': 'resolved'}, 'arqs'),
    (arq.DELETE_QUERY, {'arqs': UUID}, 'bind_state'),
    (arq.DELETE_QUERY, {'instance': UUID}, 'name'),
    (attribute.LIST_QUERY, {'deployable_id': '1', 'key': 'k'}, 'value'),
    (device_profile.LIST_QUERY, {'name': 'a,b'}, 'value'),
    (device_profile.DELETE_QUERY, {'value': 'a'}, 'name'),
    (device.LIST_QUERY, {'type': 'FPGA', 'vendor': 'v', 'hostname': 'h',
                         'filters': {'limit': '1'}}, 'status'),
    (device.LIST_QUERY_2_3, {'status': 'enabled', 'filters': {}}, 'health'),
    (deployable.LIST_QUERY, {'filters': {'name': 'd', 'sort_dir': None}},
     'name'),
]


@pytest.mark.parametrize('schema, params, unknown', QUERIES)
def test_query_schema(schema, params, unknown):
    assert validation.validate_query(dict(params), schema) == params
    with pytest.raises(exception.Invalid) as error:
        validation.validate_query({**params, unknown: 'x'}, schema)
    assert str(error.value) == 'Unknown argument: "%s"' % unknown


@pytest.mark.parametrize('value', [1, None, ['a']])
def test_query_values_are_strings(value):
    with pytest.raises(exception.Invalid) as error:
        validation.validate_query({'name': value}, device_profile.LIST_QUERY)
    assert str(error.value).startswith('name: ')


def test_filters_name_known_fields_only():
    with pytest.raises(exception.Invalid):
        validation.validate_query({'filters': {'colour': 'red'}},
                                  deployable.LIST_QUERY)


@pytest.mark.parametrize('body, expected', [
    ({'name': 'dp'}, [{'name': 'dp'}]),
    ([{'name': 'dp'}], [{'name': 'dp'}]),
    ('x', 'x'),
])
def test_device_profile_as_list(body, expected):
    assert device_profile.as_list(body) == expected


@pytest.mark.parametrize('body', [[], [{}, {}]])
def test_device_profile_as_list_takes_one_profile(body):
    with pytest.raises(exception.Invalid) as error:
        device_profile.as_list(body)
    assert str(error.value) == ('Only one device profile allowed per POST '
                                'request for now.')


def _handlers():
    for name, resource in root.RootController().collections.items():
        for attribute_name in ('get_all', 'get_one', 'post', 'patch',
                               'delete', *(handler for _, handler in
                                           resource.actions.values())):
            handler = getattr(resource, attribute_name, None)
            if handler is not None:
                yield pytest.param(handler, id='%s.%s' % (name,
                                                          attribute_name))


@pytest.mark.parametrize('handler', list(_handlers()))
def test_every_handler_declares_its_rules_and_schemas(handler):
    """Each handler is wrapped by base.endpoint: a policy rule first, a
    query-string schema, and schemas that are valid JSON Schema."""
    assert handler.policy_rules, handler
    schemas = [handler.query_schema, handler.body_schema]
    for schema in schemas:
        if schema is None:
            continue
        if callable(schema):
            # Picked by path (member or collection) or by version.
            continue
        jsonschema.Draft7Validator.check_schema(schema)
    assert 'context' in inspect.signature(handler.__wrapped__).parameters


@pytest.mark.parametrize('schema', [
    common.NO_QUERY, arq.CREATE, arq.PATCH, arq.PATCH_MEMBER, arq.OPS,
    arq.LIST_QUERY, arq.DELETE_QUERY, attribute.CREATE,
    attribute.LIST_QUERY, device_profile.CREATE, device_profile.LIST_QUERY,
    device_profile.DELETE_QUERY, device.LIST_QUERY, device.LIST_QUERY_2_3,
    deployable.LIST_QUERY,
])
def test_schemas_are_valid_json_schema(schema):
    jsonschema.Draft7Validator.check_schema(schema)


def test_an_endpoint_names_a_policy_rule():
    with pytest.raises(TypeError):
        base.endpoint(query=common.NO_QUERY)
