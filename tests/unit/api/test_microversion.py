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

from cyborg.api import microversion as mv


@pytest.mark.parametrize(
    'header, expected',
    [
        (None, (2, 0)),
        ('', (2, 0)),
        ('accelerator 2.2', (2, 2)),
        ('ACCELERATOR 2.1', (2, 1)),
        ('accelerator latest', (2, 6)),
        ('accelerator 2.03', (2, 3)),
        ('accelerator 2.4', (2, 4)),
        ('accelerator 2.5', (2, 5)),
        ('accelerator 2.6', (2, 6)),
        ('compute 2.1, accelerator 2.2', (2, 2)),
        ('accelerator 2.1,compute 2.60', (2, 1)),
        ('2.2', (2, 2)),
        ('latest', (2, 6)),
        ('compute 2.1', (2, 0)),
    ],
)
def test_parse_header_accepts(header, expected):
    assert mv.parse_header(header) == expected


@pytest.mark.parametrize(
    'header',
    [
        '10',
        'accelerator abc',
        'accelerator',
        'accelerator 2',
        'a b c',
        'accelerator 2.x',
    ],
)
def test_parse_header_rejects_unparsable(header):
    with pytest.raises(mv.InvalidHeader):
        mv.parse_header(header)


@pytest.mark.parametrize(
    'header, fragment',
    [
        (
            'accelerator 3.0',
            'Mutually exclusive versions requested. Version 3.0 requested',
        ),
        ('accelerator 1.9', 'Version 1.9 requested but not supported'),
        (
            'accelerator 2.7',
            'Version 2.7 was requested but the minor version is not supported',
        ),
    ],
)
def test_parse_header_rejects_unsupported(header, fragment):
    with pytest.raises(mv.UnsupportedVersion) as error:
        mv.parse_header(header)
    assert fragment in str(error.value)
    assert '[2.0, 2.6]' in str(error.value)


def test_response_headers():
    assert dict(mv.response_headers((2, 1))) == {
        'OpenStack-API-Version': 'accelerator 2.1',
        'OpenStack-API-Minimum-Version': '2.0',
        'OpenStack-API-Maximum-Version': '2.6',
        'Vary': 'OpenStack-API-Version',
    }


@pytest.mark.parametrize(
    'header, expected',
    [
        # microversion_parse reads a list: its last accelerator entry.
        ('accelerator 2.1, accelerator 2.2', (2, 2)),
        ('compute, accelerator 2.2', (2, 2)),
        ('accelerator  latest , compute 2.1', (2, 6)),
    ],
)
def test_lists_are_read_by_microversion_parse(header, expected):
    assert mv.parse_header(header) == expected


@pytest.mark.parametrize(
    'header',
    [
        'accelerator \uff12.\uff12',  # digits, but not ASCII ones
        'accelerator 1234567890.1',
        'accelerator 2.2 2',
        'compute 2.1, foo',
        '2.2, latest',
    ],
)
def test_versions_are_ascii_numbers_of_a_service(header):
    with pytest.raises(mv.InvalidHeader):
        mv.parse_header(header)
