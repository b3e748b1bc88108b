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

"""Request body parsing and JSON Schema validation.

Controllers name the schemas of their query string and body in
:func:`cyborg.api.controllers.base.endpoint`, which calls
:func:`validate_query` and :func:`extract_json` (placement's
``util.validate_query_params`` and ``util.extract_json``). The schemas
live in :mod:`cyborg.api.schemas`, one module per resource.
"""

import re
from typing import Any
from typing import Callable
import uuid as uuid_lib

import jsonschema
from oslo_utils import uuidutils

from cyborg.api import errors
from cyborg.api import request_body
from cyborg.common import exception

#: Largest value of an SQL INTEGER column (ids) on every database; also
#: the largest page size a list accepts.
MAX_INTEGER_COLUMN = 2 ** 31 - 1
#: Bytes a Text column holds on every database (MySQL's TEXT: 64 KiB - 1).
MAX_TEXT_BYTES = 65535
# ASCII digits only: int() also takes other scripts' digits, and a
# number too long to convert raises ValueError.
_UNSIGNED = re.compile(r'[0-9]{1,10}', re.ASCII)


def parse_json_body(request) -> Any:
    """The request's JSON body; 415 for another media type, 400 if bad.

    :class:`request_body.BodyGuard` has parsed and checked it already in
    the API's pipeline; a request built without it (a unit test) gets the
    same checks here.
    """
    seen, document = request_body.parsed(request.environ)
    if seen:
        return document
    content_type = request.content_type
    if content_type and content_type != errors.JSON:
        raise exception.UnsupportedMediaType(content_type=content_type)
    body = request.body
    if not body:
        raise exception.Invalid(reason='the request has no body')
    return request_body.loads(body)


# Validators of the schemas seen, by id (the schemas are module
# constants), with the schema itself so that a recycled id is noticed.
_VALIDATORS: dict[int, tuple[dict, jsonschema.Draft7Validator]] = {}


def _validator(schema: dict) -> jsonschema.Draft7Validator:
    entry = _VALIDATORS.get(id(schema))
    if entry is None or entry[0] is not schema:
        jsonschema.Draft7Validator.check_schema(schema)
        entry = (schema, jsonschema.Draft7Validator(schema))
        _VALIDATORS[id(schema)] = entry
    return entry[1]


def validate(schema: dict, document: Any) -> None:
    """Raise Invalid (400) naming where ``document`` breaks ``schema``."""
    validator = _validator(schema)
    if validator.is_valid(document):
        return
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    where = '/'.join(str(p) for p in error.absolute_path) or 'body'
    # jsonschema's messages quote the bad value in full.
    value = repr(error.instance)
    message = error.message.replace(value, errors.shorten(value))
    raise exception.Invalid(reason='%s: %s' % (where,
                                               errors.shorten(
                                                   message,
                                                   errors.MAX_MESSAGE)))


def query_params(request) -> dict[str, str]:
    """The query string's parameters (never the body's); 400 if repeated.

    Pecan also hands form fields and JSON object keys to controllers as
    keyword arguments, so controllers read the query string here instead.
    """
    result = {}
    for key, value in request.GET.items():
        if key in result:
            raise exception.Invalid(reason='Argument "%s" given more than '
                                           'once' % key)
        result[key] = value
    return result


def check_query(params: dict[str, str],
                allowed: frozenset[str]) -> dict[str, str]:
    """``params`` if every key is ``allowed``; 400 naming the first not."""
    for key in params:
        if key not in allowed:
            raise exception.Invalid(reason='Unknown argument: "%s"' % key)
    return params


def validate_query(params: dict[str, Any], schema: dict) -> dict[str, Any]:
    """``params`` (a query string's, see :func:`query_params`) checked
    against ``schema``, an object schema: a parameter it does not list in
    ``properties`` is an unknown argument (400), then each value must
    match its schema (400 naming the parameter)."""
    check_query(params, frozenset(schema.get('properties', ())))
    validate(schema, params)
    return params


def extract_json(request, schema: dict,
                 normalize: Callable[[Any], Any] | None = None) -> Any:
    """The request's JSON body (:func:`parse_json_body`), passed through
    ``normalize`` if given, valid for ``schema`` (:func:`validate`)."""
    document = parse_json_body(request)
    if normalize is not None:
        document = normalize(document)
    validate(schema, document)
    return document


def parse_integer(value: str, name: str, minimum: int = 0,
                  maximum: int = MAX_INTEGER_COLUMN) -> int:
    """``value`` (a query or path string) as an integer from ``minimum``
    to ``maximum``; 400 naming ``name`` otherwise."""
    if _UNSIGNED.fullmatch(value or '') is not None:
        number = int(value)
        if minimum <= number <= maximum:
            return number
    raise exception.Invalid(reason='%s must be an integer from %d to %d, '
                                   'not %r' % (name, minimum, maximum,
                                               value[:40]))


def canonical_uuid(value: str) -> str:
    """The lower-case dashed form of any UUID-like string."""
    return str(uuid_lib.UUID(value))


def check_uuid(value: str) -> str:
    """400 unless ``value`` is UUID-like; returns the canonical form."""
    if not uuidutils.is_uuid_like(value):
        raise exception.InvalidUUID(uuid=value)
    return canonical_uuid(value)


def check_text_size(value: str, name: str) -> str:
    """400 unless ``value``, as UTF-8, fits a Text column on every
    database (a schema's maxLength counts characters, MySQL bytes)."""
    size = len(value.encode('utf-8'))
    if size > MAX_TEXT_BYTES:
        raise exception.Invalid(reason='%s is %d bytes as UTF-8; at most %d '
                                       'are stored' % (name, size,
                                                       MAX_TEXT_BYTES))
    return value
