"""Request body parsing and JSON Schema validation."""

import functools
import json
from typing import Any

import jsonschema

from cyborg.common import exception

JSON = 'application/json'


class UnsupportedMediaType(exception.CyborgException):
    msg_fmt = ('Unknown mimetype: %(content_type)s; request bodies must be '
               'application/json')
    code = 415


def parse_json_body(request) -> Any:
    """The request's JSON body; 415 for another media type, 400 if bad."""
    content_type = request.content_type
    if content_type and content_type != JSON:
        raise UnsupportedMediaType(content_type=content_type)
    body = request.body
    if not body:
        raise exception.Invalid(reason='the request has no body')
    try:
        return json.loads(body)
    except ValueError as e:
        raise exception.InvalidJSON(reason=str(e))


@functools.cache
def _validator(schema_json: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(schema_json))


def validate(schema: dict, document: Any) -> None:
    """Raise Invalid (400) naming where ``document`` breaks ``schema``."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is None:
        return
    where = '/'.join(str(p) for p in error.absolute_path) or 'body'
    raise exception.Invalid(reason='%s: %s' % (where, error.message))


def check_query(params, allowed: frozenset[str]) -> dict[str, str]:
    """The query parameters as a dict; 400 for an unknown or repeated one."""
    result = {}
    for key, value in params.items():
        if key not in allowed:
            raise exception.Invalid(reason='Unknown argument: "%s"' % key)
        if key in result:
            raise exception.Invalid(reason='Argument "%s" given more than '
                                           'once' % key)
        result[key] = value
    return result
