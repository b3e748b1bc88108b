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

import pytest

from cyborg.api import filters
from cyborg.common import exception

COLUMNS = frozenset(['id', 'created_at', 'type'])


def test_split_plain_and_wsme_forms():
    plain, found = filters.split({
        'type': 'GPU', 'filters.field': 'limit', 'filters.value': '2',
        'filters[1].field': 'sort_key', 'filters[1].value': 'type'})
    assert plain == {'type': 'GPU'}
    assert found == {'limit': '2', 'sort_key': 'type'}


@pytest.mark.parametrize('params', [
    {'filters.field': 'bogus', 'filters.value': '1'},
    {'filters': '[{"field": "limit"}]'},
    {'filters.fields': 'limit'},
])
def test_split_rejects_bad_filters(params):
    with pytest.raises(exception.Invalid):
        filters.split(params)


def test_paging():
    assert filters.paging({'limit': '3', 'sort_key': 'type',
                           'sort_dir': 'desc', 'name': 'x'}, COLUMNS) == {
        'limit': 3, 'sort_key': 'type', 'sort_dir': 'desc'}
    assert filters.paging({'marker': 'x'}, COLUMNS) == {}


@pytest.mark.parametrize('given', [
    {'limit': 'x'}, {'limit': '-1'}, {'sort_key': 'nope'},
    {'sort_dir': 'sideways'}])
def test_paging_rejects(given):
    with pytest.raises(exception.Invalid):
        filters.paging(given, COLUMNS)


@pytest.mark.parametrize('value', ['\u00b2', '\u0661', '-1', '1' * 4301,
                                   str(2 ** 31), '', ' 1'])
def test_limit_is_an_ascii_integer_within_the_column_range(value):
    with pytest.raises(exception.Invalid, match='limit must be an integer'):
        filters.paging({'limit': value}, ())


def test_a_filter_index_too_long_to_be_one_is_refused():
    with pytest.raises(exception.Invalid, match='Invalid filters argument'):
        filters.split({'filters[%s].field' % ('9' * 4301): 'limit'})
