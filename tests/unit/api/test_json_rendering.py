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

"""Handlers answer through pecan's JSON renderer, byte for byte what the
API always sent; the JSON media type is written once."""

import json
import pathlib
from unittest import mock

import pytest

from cyborg.api import errors
from tests.unit.api import test_api_app as api


@pytest.fixture
def conductor():
    return mock.Mock()


def test_a_document_is_rendered_as_json_dumps_would(conf, conductor):
    response = api._request(api._app(conf, conductor), 'GET', '/v2')
    assert response.status_int == 200
    assert response.content_type == errors.JSON
    assert response.body == json.dumps(response.json).encode()


def test_no_content_has_no_body(conf, conductor, database):
    app = api._app(conf, conductor)
    response = api._request(app, 'DELETE', '/v2/device_profiles/a')
    assert response.status_int == 204
    assert response.body == b''


def test_the_json_media_type_is_written_once():
    api_package = pathlib.Path(errors.__file__).parent
    literal = "'application/json'"
    holders = [path.relative_to(api_package).as_posix()
               for path in api_package.rglob('*.py')
               if literal in path.read_text()]
    assert holders == ['errors.py']
