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

"""Unit tests of cyborg.clients.glance and cyborg.conf.glance, against a
fake Glance on loopback (tests/functional/fake_glance.py): real HTTP,
openstacksdk's version discovery and image proxy included."""

from __future__ import annotations

import hashlib
import os
import socket

from oslo_config import cfg
import pytest

from cyborg.agent import bitstream_cache
from cyborg.clients import glance
from cyborg.common import exception
from cyborg.conf import glance as glance_conf
from tests.functional.fake_glance import FakeGlance

FUNCTION = 'd8424dc4a4a3c413f89e433683f9040b'
OTHER_FUNCTION = '00000000000000000000000000000001'
REGION = 'f3c99413-5081-4aad-bced-07eb84a6d0bb'
DATA = os.urandom(3 * 1024 * 1024 + 17)


def props(**extra) -> dict[str, str]:
    base = {'bs-name': 'gzip.gbs', 'bs-uuid': '1' * 32, 'vendor': 'intel',
            'board': 'PAC_ARRIA10', 'version': '1.0', 'driver_ver': '1.0',
            'driver_path': '/opt/drivers/gzip', 'function_uuid': FUNCTION,
            'region_uuid': REGION.replace('-', ''), 'function_name': 'gzip'}
    base.update(extra)
    return {key: value for key, value in base.items() if value is not None}


@pytest.fixture
def fake_glance():
    with FakeGlance() as server:
        yield server


@pytest.fixture
def client(fake_glance):
    return glance.GlanceClient.for_endpoint(fake_glance.url, timeout=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# Lookup --------------------------------------------------------------------

def test_get_returns_the_image_with_its_properties(fake_glance, client):
    image_id = fake_glance.add_image(DATA, props())
    image = client.get(image_id)
    assert image.id == image_id
    assert image.properties['function_uuid'] == FUNCTION
    assert image.hash_algo == 'sha512'
    assert image.hash_value == hashlib.sha512(DATA).hexdigest()


def test_get_missing_image(client):
    with pytest.raises(exception.BitstreamNotFound, match='nope'):
        client.get('nope')


@pytest.mark.parametrize('image_id', ['a/../b', '', '?x=1', 'a b'])
def test_get_impossible_image_ids(fake_glance, client, image_id):
    with pytest.raises(exception.BitstreamNotFound):
        client.get(image_id)
    assert fake_glance.requests == []


def test_find_by_function_sends_property_filters(fake_glance, client):
    wanted = fake_glance.add_image(DATA, props())
    fake_glance.add_image(DATA, props(function_uuid=OTHER_FUNCTION))
    found = client.find_bitstreams(function_uuid=FUNCTION.upper())
    assert [image.id for image in found] == [wanted]
    _, path, query = fake_glance.requests[-1]
    assert path == '/v2/images'
    assert query == {'status': ['active'], 'tag': ['FPGA'],
                     'function_uuid': [FUNCTION]}


def test_find_by_several_keys(fake_glance, client):
    wanted = fake_glance.add_image(DATA, props())
    fake_glance.add_image(DATA, props(vendor='xilinx'))
    fake_glance.add_image(DATA, props(region_uuid='2' * 32))
    found = client.find_bitstreams(function_name='gzip', vendor='intel',
                                   region_uuid=REGION, bs_name='gzip.gbs')
    assert [image.id for image in found] == [wanted]
    query = fake_glance.requests[-1][2]
    assert query['bs-name'] == ['gzip.gbs']
    assert query['region_uuid'] == [REGION.replace('-', '')]


def test_find_follows_the_pages(fake_glance, client):
    wanted = [fake_glance.add_image(DATA, props()) for _ in range(5)]
    fake_glance.add_image(DATA, props(vendor='xilinx'))
    fake_glance.page_size = 2
    found = client.find_bitstreams(vendor='intel')
    assert [image.id for image in found] == wanted
    lists = [r for r in fake_glance.requests if r[1] == '/v2/images']
    assert len(lists) == 3
    assert all(query['vendor'] == ['intel'] for _, _, query in lists)


def test_find_only_active_fpga_images(fake_glance, client):
    fake_glance.add_image(DATA, props(), status='queued')
    fake_glance.add_image(DATA, props(), tags=('other',))
    assert client.find_bitstreams(function_uuid=FUNCTION) == []


def test_find_rejects_unknown_keys(client):
    with pytest.raises(ValueError, match='colour'):
        client.find_bitstreams(colour='red')


def test_metadata_of_an_image(fake_glance, client):
    image = client.get(fake_glance.add_image(DATA, props()))
    meta = glance.metadata(image)
    assert meta.function_uuid == FUNCTION
    assert meta.region_uuid == REGION.replace('-', '')
    assert meta.bs_name == 'gzip.gbs'


def test_metadata_breaking_the_spec(fake_glance, client):
    image = client.get(fake_glance.add_image(DATA, props(vendor=None)))
    with pytest.raises(exception.InvalidBitstreamMetadata, match='vendor'):
        glance.metadata(image)


# Download ------------------------------------------------------------------

def test_download_verifies_and_writes(fake_glance, client, tmp_path):
    image_id = fake_glance.add_image(DATA, props())
    dest = tmp_path / 'bits'
    client.download(image_id, str(dest))
    assert dest.read_bytes() == DATA
    assert os.listdir(tmp_path) == ['bits']


def test_download_with_md5_only(fake_glance, client, tmp_path):
    image = client.get(fake_glance.add_image(DATA, props(), hashes='md5'))
    assert glance.expected_hash(image) == (
        'md5', hashlib.md5(DATA).hexdigest())
    client.download(image, str(tmp_path / 'bits'))
    assert (tmp_path / 'bits').read_bytes() == DATA


@pytest.mark.parametrize('hashes', ['multihash', 'md5'])
def test_download_wrong_checksum_leaves_nothing(fake_glance, client,
                                                tmp_path, hashes):
    corrupt = DATA[:-1] + bytes([DATA[-1] ^ 1])
    image_id = fake_glance.add_image(DATA, props(), hashes=hashes,
                                     served=corrupt)
    dest = tmp_path / 'bits'
    with pytest.raises(exception.BitstreamChecksumMismatch,
                       match=image_id):
        client.download(image_id, str(dest))
    assert os.listdir(tmp_path) == []


def test_download_keeps_an_existing_file_on_failure(fake_glance, client,
                                                    tmp_path):
    image_id = fake_glance.add_image(DATA, props(), served=b'short')
    dest = tmp_path / 'bits'
    dest.write_bytes(b'old')
    with pytest.raises(exception.BitstreamChecksumMismatch):
        client.download(image_id, str(dest))
    assert os.listdir(tmp_path) == ['bits']
    assert dest.read_bytes() == b'old'


def test_download_without_any_checksum_is_refused(fake_glance, client,
                                                  tmp_path):
    image_id = fake_glance.add_image(DATA, props(), hashes='none')
    with pytest.raises(exception.BitstreamChecksumMismatch,
                       match='no os_hash_value or checksum'):
        client.download(image_id, str(tmp_path / 'bits'))
    assert os.listdir(tmp_path) == []
    assert fake_glance.downloads(image_id) == 0


def test_download_unsupported_algorithm(fake_glance, client, tmp_path):
    image = client.get(fake_glance.add_image(DATA, props()))
    image.hash_algo = 'crc32'
    with pytest.raises(exception.BitstreamChecksumMismatch, match='crc32'):
        client.download(image, str(tmp_path / 'bits'))
    assert os.listdir(tmp_path) == []


def test_download_missing_image(client, tmp_path):
    with pytest.raises(exception.BitstreamNotFound):
        client.download('gone', str(tmp_path / 'bits'))
    assert os.listdir(tmp_path) == []


def test_download_image_deleted_meanwhile(fake_glance, client, tmp_path):
    image = client.get(fake_glance.add_image(DATA, props()))
    del fake_glance.images[image.id]
    with pytest.raises(exception.BitstreamNotFound):
        client.download(image, str(tmp_path / 'bits'))
    assert os.listdir(tmp_path) == []


def test_download_through_the_bitstream_cache(fake_glance, client,
                                              tmp_path):
    image = client.get(fake_glance.add_image(DATA, props()))
    cache = bitstream_cache.BitstreamCache(str(tmp_path / 'cache'),
                                           10 * 1024 * 1024)
    algo, value = glance.expected_hash(image)

    def fetch(dest: str) -> None:
        client.download(image, dest)

    for _ in range(2):
        with cache.use(image.id, algo, value, fetch) as path:
            with open(path, 'rb') as f:
                assert f.read() == DATA
    assert fake_glance.downloads(image.id) == 1
    assert os.listdir(tmp_path / 'cache') == [image.id]


# Glance down ---------------------------------------------------------------

def test_glance_answering_503(fake_glance, client):
    image_id = fake_glance.add_image(DATA, props())
    client.get(image_id)  # discovery done
    fake_glance.down()
    with pytest.raises(exception.GlanceUnavailable, match='503'):
        client.get(image_id)
    with pytest.raises(exception.GlanceUnavailable, match='503'):
        client.find_bitstreams(function_uuid=FUNCTION)


def test_glance_refusing_connections(tmp_path):
    client = glance.GlanceClient.for_endpoint(
        'http://127.0.0.1:%d' % free_port(), timeout=5)
    with pytest.raises(exception.GlanceUnavailable):
        client.get('any')
    with pytest.raises(exception.GlanceUnavailable):
        client.download('any', str(tmp_path / 'bits'))
    assert os.listdir(tmp_path) == []


def test_glance_going_away_after_discovery(client, fake_glance):
    image_id = fake_glance.add_image(DATA, props())
    client.get(image_id)
    fake_glance.down(refuse=True)
    with pytest.raises(exception.GlanceUnavailable, match='image'):
        client.find_bitstreams(vendor='intel')


def test_glance_timing_out(fake_glance):
    image_id = fake_glance.add_image(DATA, props())
    client = glance.GlanceClient.for_endpoint(fake_glance.url, timeout=0.3)
    client.get(image_id)
    fake_glance.delay = 1.0
    with pytest.raises(exception.GlanceUnavailable):
        client.get(image_id)
    fake_glance.delay = 0


def test_unauthorized_is_a_refusal(fake_glance):
    fake_glance.token = 'right'
    client = glance.GlanceClient.for_endpoint(fake_glance.url, token='wrong')
    with pytest.raises(exception.GlanceRequestFailed, match='401'):
        client.find_bitstreams()
    with pytest.raises(exception.GlanceRequestFailed, match='401'):
        client.get('any')


def test_no_token_is_a_refusal(fake_glance):
    client = glance.GlanceClient.for_endpoint(fake_glance.url, token='')
    with pytest.raises(exception.GlanceRequestFailed,
                       match='authentication'):
        client.find_bitstreams()


# Configuration ---------------------------------------------------------------

def make_conf(**overrides) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    glance_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    for name, value in overrides.items():
        conf.set_override(name, value, group='glance')
    return conf


def test_options_defaults():
    conf = make_conf()
    assert conf.glance.service_type == 'image'
    assert conf.glance.valid_interfaces == ['internal', 'public']
    assert conf.glance.timeout == glance_conf.DEFAULT_TIMEOUT
    names = {opt.dest for opt in glance_conf.list_opts()[glance_conf.group]}
    assert {'auth_type', 'endpoint_override', 'cafile', 'timeout',
            'region_name'} <= names


def test_from_conf_needs_auth_or_endpoint():
    with pytest.raises(exception.GlanceNotConfigured):
        glance.GlanceClient.from_conf(make_conf())


def test_from_conf_with_admin_token(fake_glance, tmp_path):
    path = tmp_path / 'cyborg.conf'
    path.write_text('[glance]\nauth_type = admin_token\ntoken = admin\n'
                    'endpoint = %s\nendpoint_override = %s\n'
                    % (fake_glance.url, fake_glance.url))
    conf = cfg.ConfigOpts()
    glance_conf.register_opts(conf)
    conf(['--config-file', str(path)], project='cyborg',
         default_config_files=[])
    fake_glance.token = 'admin'
    image_id = fake_glance.add_image(DATA, props())
    client = glance.GlanceClient.from_conf(conf)
    assert client.get(image_id).id == image_id
    assert [i.id for i in client.find_bitstreams(vendor='intel')] == [
        image_id]


def test_fake_glance_stops(tmp_path):
    glance_server = FakeGlance().start()
    port = glance_server.port
    glance_server.stop()
    with socket.socket() as s:
        assert s.connect_ex(('127.0.0.1', port)) != 0
