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
import json
from typing import Any

import pecan

from cyborg.api import microversion
from cyborg.api import request_body
from cyborg.api import validation

JSON = 'application/json'


def authorize(rule: str):
    """Check ``rule`` for the caller and return the request context."""
    context = pecan.request.context
    pecan.request.authorizer.authorize(rule, context)
    return context


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


def render(document: Any, status: int = 200) -> str:
    pecan.response.status = status
    return json.dumps(document)


def no_content(status: int = 204) -> str:
    pecan.response.status = status
    del pecan.response.content_type
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
