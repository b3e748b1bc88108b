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

"""Unit tests of cyborg.domain.bitstream: every key of the FPGA bitstream
metadata spec, its presence and its format, and the matching helpers."""

from __future__ import annotations

import json

import pytest

from cyborg.common import exception
from cyborg.domain import bitstream
from cyborg.domain import resource_names

FUNCTION = 'd8424dc4-a4a3-c413-f89e-433683f9040b'
FUNCTION_HEX = FUNCTION.replace('-', '')
REGION = 'f3c99413-5081-4aad-bced-07eb84a6d0bb'
REGION_HEX = REGION.replace('-', '')
TOPOLOGY = {'pf_num': 1, 'vf_num': 0,
            'pf': [{'name': 'pf_1', 'pci_offset': '0', 'vf': []}]}


def properties(**changes) -> dict:
    props = {
        'bs-name': 'gzip.gbs', 'bs-uuid': '11111111-2222-3333-4444-'
                                          '555555555555',
        'vendor': 'Intel', 'board': 'PAC_ARRIA10', 'version': '1.0',
        'driver_ver': '2.0.1', 'driver_path': '/opt/fpga/drivers/gzip',
        'function_uuid': FUNCTION,
        # Glance's own properties are ignored.
        'os_hash_algo': 'sha512', 'status': 'active', 'size': 42,
    }
    for key, value in changes.items():
        key = key.replace('bs_', 'bs-')
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    return props


def invalid(key: str, **changes) -> str:
    with pytest.raises(exception.InvalidBitstreamMetadata) as info:
        bitstream.parse(properties(**changes))
    message = str(info.value)
    assert key in message
    return message


def test_the_spec_keys():
    assert list(bitstream.KEYS) == [
        'bs-name', 'bs-uuid', 'vendor', 'board', 'shell_id', 'version',
        'driver', 'driver_ver', 'driver_path', 'topology', 'description',
        'region_uuid', 'function_uuid', 'function_name']
    assert bitstream.REQUIRED == (
        'bs-name', 'bs-uuid', 'vendor', 'board', 'version', 'driver_ver',
        'driver_path', 'function_uuid')


def test_minimal_metadata():
    meta = bitstream.parse(properties())
    assert meta == bitstream.BitstreamMetadata(
        bs_name='gzip.gbs', bs_uuid='11111111222233334444555555555555',
        vendor='Intel', board='PAC_ARRIA10', version='1.0',
        driver_ver='2.0.1', driver_path='/opt/fpga/drivers/gzip',
        function_uuid=FUNCTION_HEX)
    assert meta.is_shell
    assert meta.topology is meta.region_uuid is meta.description is None


def test_full_metadata():
    meta = bitstream.parse(properties(
        shell_id=REGION, driver='OPAE', topology=json.dumps(TOPOLOGY),
        description='Compression, 40 Gb/s: "fast".',
        region_uuid=REGION.upper(), function_name='gzip-v2'))
    assert meta.shell_id == REGION_HEX
    assert not meta.is_shell
    assert meta.driver == 'OPAE'
    assert meta.topology == TOPOLOGY
    assert meta.description == 'Compression, 40 Gb/s: "fast".'
    assert meta.region_uuid == REGION_HEX
    assert meta.function_name == 'gzip-v2'


@pytest.mark.parametrize('key', bitstream.REQUIRED)
def test_required_key_missing(key):
    assert 'is required' in invalid(key, **{key: None})


@pytest.mark.parametrize('key', bitstream.REQUIRED)
def test_required_key_empty(key):
    assert 'must not be empty' in invalid(key, **{key: '  '})


@pytest.mark.parametrize('key', [k for k in bitstream.KEYS
                                 if k not in bitstream.REQUIRED])
def test_nullable_key_absent_null_or_empty(key):
    for value in (None, ''):
        props = properties()
        props[key] = value
        meta = bitstream.parse(props)
        assert getattr(meta, key.replace('-', '_')) is None


@pytest.mark.parametrize('key', list(bitstream.KEYS))
def test_value_must_be_a_string(key):
    assert 'must be a string' in invalid(key, **{key: 12})


@pytest.mark.parametrize('key', bitstream.ID_KEYS)
@pytest.mark.parametrize('value', [
    'not-a-uuid', 'd8424dc4a4a3c413f89e433683f9040', FUNCTION + '0',
    'g' * 32, 'd8424dc4-a4a3c413-f89e433683f9040b', '{%s}' % FUNCTION,
    'd8424dc4a-4a3-c413-f89e-433683f9040b', ' ' + FUNCTION + '-',
    'urn:uuid:' + FUNCTION])
def test_identifier_format(key, value):
    assert 'is not a UUID' in invalid(key, **{key: value})


@pytest.mark.parametrize('key', bitstream.ID_KEYS)
@pytest.mark.parametrize('value', [FUNCTION, FUNCTION.upper(), FUNCTION_HEX,
                                   FUNCTION_HEX.upper()])
def test_identifiers_are_canonical(key, value):
    meta = bitstream.parse(properties(**{key: value}))
    assert getattr(meta, key.replace('-', '_')) == FUNCTION_HEX


@pytest.mark.parametrize('key', ['bs-name', 'vendor', 'board', 'driver',
                                 'function_name'])
@pytest.mark.parametrize('value', ['has space', '-leading', 'a/b', 'x' * 256,
                                   'semi;colon', 'é'])
def test_name_format(key, value):
    assert 'is not a valid name' in invalid(key, **{key: value})


@pytest.mark.parametrize('key', ['bs-name', 'vendor', 'board', 'driver',
                                 'function_name'])
def test_name_accepts_letters_digits_dots_dashes(key):
    meta = bitstream.parse(properties(**{key: 'Aes-128_v2.gbs'}))
    assert getattr(meta, key.replace('-', '_')) == 'Aes-128_v2.gbs'


@pytest.mark.parametrize('key', ['version', 'driver_ver'])
@pytest.mark.parametrize('value', ['1 .0', '.1', 'v1/2', 'x' * 256])
def test_version_format(key, value):
    assert 'is not a valid version' in invalid(key, **{key: value})


@pytest.mark.parametrize('key', ['version', 'driver_ver'])
def test_version_accepted(key):
    assert getattr(bitstream.parse(properties(**{key: '19.2.0+b1'})),
                   key) == '19.2.0+b1'


@pytest.mark.parametrize('value', ['/path\n', 'a\x00b', 'p' * 1025])
def test_driver_path_format(value):
    invalid('driver_path', driver_path=value)


def test_driver_path_may_be_a_url():
    meta = bitstream.parse(properties(
        driver_path='https://example.org/drivers/gzip-1.0.tar.gz'))
    assert meta.driver_path.startswith('https://')


@pytest.mark.parametrize('value, problem', [
    ('{', 'not valid JSON'), ('[1, 2]', 'must be a JSON object, not list'),
    ('"pf"', 'must be a JSON object, not str')])
def test_topology_format(value, problem):
    assert problem in invalid('topology', topology=value)


def test_description_length():
    invalid('description', description='d' * 65536)
    meta = bitstream.parse(properties(description='d' * 65535))
    assert len(meta.description) == 65535


def test_error_is_a_400():
    with pytest.raises(exception.InvalidBitstreamMetadata) as info:
        bitstream.parse({})
    assert info.value.code == 400
    assert str(info.value) == ('Invalid bitstream metadata bs-name: is '
                               'required')


# Matching ------------------------------------------------------------------

@pytest.mark.parametrize('function_id, expected', [
    (FUNCTION, True), (FUNCTION.upper(), True), (FUNCTION_HEX, True),
    (REGION, False), ('nonsense', False), ('', False)])
def test_matches_function(function_id, expected):
    meta = bitstream.parse(properties())
    assert bitstream.matches_function(meta, function_id) is expected


@pytest.mark.parametrize('region, expected', [
    (REGION, True), (REGION_HEX.upper(), True), (FUNCTION, False),
    ('nonsense', False)])
def test_fits_region(region, expected):
    meta = bitstream.parse(properties(region_uuid=REGION))
    assert bitstream.fits_region(meta, region) is expected


def test_without_region_uuid_fits_no_region():
    meta = bitstream.parse(properties())
    assert not bitstream.fits_region(meta, REGION)


def test_function_trait():
    trait = bitstream.function_trait('Intel', FUNCTION)
    assert trait == ('CUSTOM_FPGA_FUNCTION_ID_INTEL_'
                     'D8424DC4A4A3C413F89E433683F9040B')
    assert resource_names.is_valid_trait(trait)
    assert bitstream.function_trait('intel', FUNCTION_HEX) == trait
    assert resource_names.is_valid_trait(
        bitstream.function_trait('Some-Vendor.Inc', FUNCTION))


def test_function_trait_needs_an_identifier():
    with pytest.raises(exception.InvalidBitstreamMetadata, match='3AFB'):
        bitstream.function_trait('intel', '3AFB')


def test_canonical_id():
    assert bitstream.canonical_id(FUNCTION.upper()) == FUNCTION_HEX
    assert bitstream.canonical_id(None) is None
    assert bitstream.canonical_id('3AFB') is None
