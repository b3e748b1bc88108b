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

"""The partition document a driver reports and a device row keeps."""

import pytest

from cyborg.domain import partitions

GOOD = partitions.state('homogeneous', '1g.18gb', True, 2, 5)


def test_a_document_round_trips_through_the_row():
    text = partitions.stored_form(GOOD)
    assert partitions.from_stored(text) == GOOD
    assert partitions.from_stored(partitions.stored_form(
        dict(GOOD, profile=None))) == dict(GOOD, profile=None)


@pytest.mark.parametrize('bad', [
    None, 'homogeneous', [], {},
    dict(GOOD, mode='dynamic'),
    dict(GOOD, profile='all of it'),
    dict(GOOD, pinned='yes'),
    dict(GOOD, in_use=-1),
    dict(GOOD, creatable=True),
    dict(GOOD, creatable=1.5),
    dict(GOOD, extra=1),
    {k: v for k, v in GOOD.items() if k != 'pinned'},
])
def test_a_bad_document_is_none(bad):
    assert partitions.clean(bad) is None
    assert partitions.stored_form(bad) is None


@pytest.mark.parametrize('text', [None, '', 'not json', '[1]'])
def test_an_unreadable_row_is_none(text):
    assert partitions.from_stored(text) is None


@pytest.mark.parametrize('name, ok', [
    ('1g.18gb', True), ('1g.18gb+me', True), ('7g.141gb', True),
    ('1g.10gb+me+gfx', True), ('1G.18GB', False), ('1g', False),
    ('g.18gb', False), ('1g.18gb ', False), ('1' * 30 + 'g.1gb', False),
    (7, False)])
def test_profile_names(name, ok):
    assert partitions.is_profile_name(name) is ok
