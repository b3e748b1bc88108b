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

"""Helpers every controller uses."""

import datetime
import functools
from typing import Any
from typing import Callable

import pecan

from cyborg import context as context_lib
from cyborg.api import filters
from cyborg.api import microversion
from cyborg.api import request_body
from cyborg.api import validation
from cyborg.api.schemas import common
from cyborg.common import exception

#: A policy rule an endpoint checks: its name (refused with
#: PolicyNotAuthorized), or (name, the exception class refusing it).
Rule = str | tuple[str, type[exception.CyborgException]]
#: A schema, or a function of the handler's positional arguments (the
#: path's) that picks one; it may read the request's version.
Schema = dict | Callable[..., dict]


def authorize(rule: str,
              error: type[exception.CyborgException] | None = None
              ) -> context_lib.RequestContext:
    """Check ``rule`` for the caller and return the request context;
    ``error`` (without arguments) instead of PolicyNotAuthorized."""
    context = pecan.request.context
    if error is None:
        pecan.request.authorizer.authorize(rule, context)
    elif not allowed(rule):
        raise error()
    return context


def allowed(rule: str) -> bool:
    """Whether the caller may do ``rule``."""
    return pecan.request.authorizer.allowed(rule, pecan.request.context)


def _pick(schema: Schema, args: tuple) -> dict:
    return schema(*args) if callable(schema) else schema


def _query(schema: dict) -> dict[str, Any]:
    params = query()
    if 'filters' in schema.get('properties', ()):
        plain, found = filters.split(params)
        params = dict(plain, filters=found)
    return validation.validate_query(params, schema)


def endpoint(*rules: Rule, query: Schema = common.NO_QUERY,
             body: Schema | None = None,
             normalize: Callable[[Any], Any] | None = None
             ) -> Callable[[Callable], Callable]:
    """Declare what a handler needs before it runs, checked in order:

    1. the policy ``rules`` (at least one);
    2. the query string, valid for the ``query`` schema
       (:func:`cyborg.api.validation.validate_query`);
    3. when ``body`` is given, the JSON body, passed through ``normalize``
       and valid for the ``body`` schema
       (:func:`cyborg.api.validation.extract_json`).

    The handler is called with the path's positional arguments and the
    keyword arguments ``context``, ``query`` (the parameters, a dict) and,
    with a ``body`` schema, ``body``; the keyword arguments pecan derives
    from the query string and the body are dropped.
    """
    if not rules:
        raise TypeError('an endpoint needs a policy rule')

    def decorate(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def checked(self, *args, **_pecan_kwargs):
            context = None
            for rule in rules:
                name, error = rule if isinstance(rule, tuple) else (rule,
                                                                    None)
                context = authorize(name, error)
            kwargs = {'context': context,
                      'query': _query(_pick(query, args))}
            if body is not None:
                kwargs['body'] = validation.extract_json(
                    pecan.request, _pick(body, args), normalize)
            return handler(self, *args, **kwargs)
        checked.policy_rules = rules
        checked.query_schema = query
        checked.body_schema = body
        return checked
    return decorate


def query() -> dict[str, str]:
    """This request's query string parameters; see validation.

    Every endpoint reads them, after its policy check: a body the body
    guard refused is refused here too, by the endpoints that take no body
    as by those that do (a hostile body is never ignored).
    """
    request_body.parsed(pecan.request.environ)
    return validation.query_params(pecan.request)


def version_at_least(version: tuple[int, int]) -> bool:
    return pecan.request.version >= version


def version_string() -> str:
    return microversion.as_string(pecan.request.version)


def render(document: Any, status: int = 200) -> Any:
    """``document`` with ``status``, for the handler's JSON renderer
    (``@pecan.expose('json')``, pecan's ``json.JSONEncoder``)."""
    pecan.response.status = status
    return document


def no_content(status: int = 204) -> str:
    """An empty answer with ``status``: the handler's JSON renderer is
    skipped (it would render an empty string as ``""``)."""
    pecan.response.status = status
    del pecan.response.content_type
    pecan.override_template(None)
    return ''


def link(collection: str, uuid: str, rel: str = 'self') -> dict[str, str]:
    return {'href': '%s/v2/%s/%s' % (pecan.request.base_url, collection,
                                     uuid),
            'rel': rel}


def timestamp(value: datetime.datetime | str | None) -> str | None:
    """ISO 8601 with an explicit UTC offset; stored times are UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.isoformat()
