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

import inspect
import pathlib
import re

import pytest

from cyborg.api import microversion as mv


@pytest.mark.parametrize(
    'header, expected',
    [
        (None, (2, 0)),
        ('', (2, 0)),
        ('accelerator 2.2', (2, 2)),
        ('ACCELERATOR 2.1', (2, 1)),
        ('accelerator latest', (2, 10)),
        ('accelerator 2.03', (2, 3)),
        ('accelerator 2.4', (2, 4)),
        ('accelerator 2.5', (2, 5)),
        ('accelerator 2.6', (2, 6)),
        ('accelerator 2.7', (2, 7)),
        ('compute 2.1, accelerator 2.2', (2, 2)),
        ('accelerator 2.1,compute 2.60', (2, 1)),
        ('2.2', (2, 2)),
        ('latest', (2, 10)),
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
            'accelerator 2.11',
            'Version 2.11 was requested but the minor version is not '
            'supported',
        ),
    ],
)
def test_parse_header_rejects_unsupported(header, fragment):
    with pytest.raises(mv.UnsupportedVersion) as error:
        mv.parse_header(header)
    assert fragment in str(error.value)
    assert '[2.0, 2.10]' in str(error.value)


def test_response_headers():
    assert dict(mv.response_headers((2, 1))) == {
        'OpenStack-API-Version': 'accelerator 2.1',
        'OpenStack-API-Minimum-Version': '2.0',
        'OpenStack-API-Maximum-Version': '2.10',
        'Vary': 'OpenStack-API-Version',
    }


@pytest.mark.parametrize(
    'header, expected',
    [
        # microversion_parse reads a list: its last accelerator entry.
        ('accelerator 2.1, accelerator 2.2', (2, 2)),
        ('compute, accelerator 2.2', (2, 2)),
        ('accelerator  latest , compute 2.1', (2, 10)),
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


def _version_constants(module):
    return {name: value for name, value in vars(module).items()
            if name.isupper() and isinstance(value, tuple)
            and len(value) == 2 and value[0] == 2
            and all(isinstance(part, int) for part in value)}


def test_every_version_between_min_and_max_has_its_constant():
    """The history: one documented constant per version, MAX_VERSION the
    newest."""
    versions = set(_version_constants(mv).values())
    newest = max(versions)
    assert mv.MAX_VERSION == newest
    assert versions == {(2, minor) for minor in range(newest[1] + 1)}
    source = inspect.getsource(mv)
    for name in _version_constants(mv):
        if name not in ('MIN_VERSION', 'MAX_VERSION'):
            assert '#: %s - ' % mv.as_string(getattr(mv, name)) in source


def test_no_api_module_defines_a_version_constant():
    """Controllers and API helpers use microversion's constants."""
    package = pathlib.Path(mv.__file__).parent
    for path in package.rglob('*.py'):
        if path.name == 'microversion.py':
            continue
        text = path.read_text()
        assert not re.search(r'^\w+ = \(2, \d+\)', text, re.M), path
