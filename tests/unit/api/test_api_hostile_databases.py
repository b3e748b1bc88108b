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

"""Hostile input that only a production database refuses: what the
schemas count in characters, MySQL's TEXT counts in bytes. Each such
request is a 400 on every database, never the 503 of a database error.
"""

import json

import pytest

from tests.unit.api import test_api_hostile as hostile
from tests.unit.api.test_api_hostile import api  # noqa: F401 (fixture)
from tests.unit.api.test_api_hostile import populated  # noqa: F401 (fixture)
from tests.unit.api.test_api_hostile import snapshot  # noqa: F401 (fixture)

# 30,000 characters (within the schema's 65,535), 90,000 bytes as UTF-8.
WIDE = '\u20ac' * 30000


def test_an_attribute_value_over_a_text_column_is_a_400(
        populated, snapshot):  # noqa: F811
    app, _ids = populated
    before = snapshot()
    response = hostile._request(
        app, 'POST', '/v2/attributes',
        json.dumps({'deployable_id': 1, 'key': 'wide', 'value': WIDE},
                   ensure_ascii=False).encode())
    hostile._assert_refused(response, (400,))
    assert 'at most 65535' in response.text
    assert snapshot() == before


def test_a_profile_over_a_text_column_is_a_400(api, snapshot):  # noqa: F811
    group = {'trait:CUSTOM_%s_%d' % ('X' * 200, i): 'required'
             for i in range(300)}
    group['resources:FPGA'] = '1'
    before = snapshot()
    response = hostile._request(app=api, method='POST',
                                path='/v2/device_profiles',
                                body=[{'name': 'wide', 'groups': [group]}])
    hostile._assert_refused(response, (400,))
    assert 'at most 65535' in response.text
    assert snapshot() == before


@pytest.mark.parametrize('value', ['\U0001F600' * 255, 'v' * 65535])
def test_values_within_the_columns_are_stored(
        populated, value):  # noqa: F811
    app, _ids = populated
    response = hostile._request(app, 'POST', '/v2/attributes',
                                {'deployable_id': 1, 'key': value[:255],
                                 'value': value})
    assert response.status_int == 201, response.body[:300]
    assert response.json['value'] == value
