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

import hashlib
import json

import pytest
import requests
import webob

from cyborg.allinone import local_images
from cyborg.clients import glance
from cyborg.common import exception

FUNCTION = '9f8e7d6c5b4a49388271605f4e3d2c1b'
PROPERTIES = {
    'bs-name': 'gzip', 'bs-uuid': '1c2d3e4f5a6b47c8a9b0c1d2e3f4a5b6',
    'vendor': 'intel', 'board': 'n3000', 'version': '1.0',
    'driver_ver': '1.0', 'driver_path': '/usr/lib/opae',
    'function_uuid': FUNCTION, 'function_name': 'gzip',
}


def _write(directory, name, data, **spec):
    (directory / (name + '.gbs')).write_bytes(data)
    spec.setdefault('file', name + '.gbs')
    spec.setdefault('properties', PROPERTIES)
    (directory / (name + '.json')).write_text(json.dumps(spec))


@pytest.fixture
def server(tmp_path):
    _write(tmp_path, 'gzip', b'gzip bits')
    _write(tmp_path, 'other', b'other bits', id='img-other',
           properties=dict(PROPERTIES, function_uuid='0' * 32))
    (tmp_path / 'notes.txt').write_text('not an image')
    with local_images.ImageServer() as server:
        server.load_directory(str(tmp_path))
        yield server


def test_images_of_a_directory_are_served_with_glances_hashes(server):
    client = glance.GlanceClient.for_endpoint(server.url)
    [found] = client.find_bitstreams(function_uuid=FUNCTION)
    assert found.name == 'gzip'
    assert glance.expected_hash(found) == (
        'sha512', hashlib.sha512(b'gzip bits').hexdigest())
    assert glance.metadata(found).function_name == 'gzip'
    assert client.get('img-other').name == 'other'


def test_a_download_is_verified(server, tmp_path):
    client = glance.GlanceClient.for_endpoint(server.url)
    [found] = client.find_bitstreams(function_uuid=FUNCTION)
    dest = tmp_path / 'out'
    client.download(found.id, str(dest))
    assert dest.read_bytes() == b'gzip bits'


def test_ids_are_the_same_at_every_start(tmp_path):
    _write(tmp_path, 'gzip', b'gzip bits')
    ids = []
    for _ in range(2):
        with local_images.ImageServer() as server:
            ids.append(server.load_directory(str(tmp_path)))
    assert ids[0] == ids[1] and len(ids[0]) == 1


def test_pages_follow_next_links(server):
    server.page_size = 1
    client = glance.GlanceClient.for_endpoint(server.url)
    assert len(client.find_bitstreams()) == 2


def test_requests_without_a_token_or_to_unknown_paths(server):
    assert requests.get(server.url + '/v2/images').status_code == 401
    token = {'X-Auth-Token': 'any'}
    assert requests.get(server.url + '/v2/nothing',
                        headers=token).status_code == 404
    assert requests.get(server.url + '/v2/images/none',
                        headers=token).status_code == 404
    assert requests.post(server.url + '/v2/images',
                         headers=token).status_code == 405
    assert requests.get(server.url + '/').status_code == 300


@pytest.mark.parametrize('spec, why', [
    ('[]', 'expected an object with "file"'),
    ('{"file": "missing.gbs"}', 'No such file'),
    ('{"file": "x.gbs", "properties": []}', '"properties" must be'),
    ('{', 'Expecting'),
])
def test_an_unreadable_image_is_a_clear_error(tmp_path, spec, why):
    (tmp_path / 'x.gbs').write_bytes(b'x')
    (tmp_path / 'bad.json').write_text(spec)
    server = local_images.ImageServer()
    with pytest.raises(exception.ConfigInvalid) as error:
        server.load_directory(str(tmp_path))
    assert 'bad.json' in str(error.value) and why in str(error.value)



def _api(environ, start_response):
    start_response('200 OK', [('Content-Type', 'application/json')])
    return [b'{"api": true}']


def _get(app, path):
    return webob.Request.blank(path).get_response(app)


def test_image_paths_beside_the_api_are_the_images(server):
    """The all-in-one's API port answers Glance's image paths too, with
    no token (a CLI without Keystone sends none)."""
    app = local_images.ImagePaths(_api, server)
    assert sorted(image['name'] for image in _get(
        app, '/v2/images').json['images']) == ['gzip', 'other']
    assert _get(app, '/v2/images/img-other').json['name'] == 'other'
    assert _get(app, '/v2/images/img-other/file').body == b'other bits'
    assert _get(app, '/v2/images/no-such-image').status_int == 404


@pytest.mark.parametrize('path', ['/v2/imagesx', '/v2', '/',
                                  '/v2/deployables', '/images'])
def test_other_paths_beside_the_images_are_the_apis(server, path):
    app = local_images.ImagePaths(_api, server)
    assert _get(app, path).json == {'api': True}
