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

"""A local, read-only image service for bitstreams: the part of Glance's
image API v2 that cyborg reads, served from files on loopback.

``cyborg-all-in-one --bitstream-dir DIR`` serves the bitstreams of DIR
through it, so that FPGA programming (the conductor's lookups, the
agent's verified downloads) runs the same code as against a real Glance,
without one. Each image of DIR is a JSON file ``<name>.json``::

    {
        "file": "gzip.gbs",                       # the data, beside it
        "id": "6f2d0c1e-...",                     # optional
        "tags": ["FPGA"],                         # optional
        "properties": {"bitstream-format": "...", "function-id": "..."}
    }

the properties being the bitstream metadata of
``cyborg.domain.bitstream``. An image without an ``id`` gets one derived
from its name, the same at every start.

It serves:

* ``GET /`` and ``GET /v2``: the version document (one ``CURRENT``
  v2.16), for openstacksdk's version discovery;
* ``GET /v2/images``: the images, filtered as Glance filters them
  (``status``, ``tag``, ``name``, ``visibility``, any other key an exact
  match on a property), ``limit`` images a page with a ``next`` link;
* ``GET /v2/images/{id}`` and ``GET /v2/images/{id}/file`` (the data,
  with ``Content-MD5``).

Images carry the ``checksum`` (md5), ``os_hash_algo`` (sha512) and
``os_hash_value`` of their data, as Glance computes them at upload. Any
token is accepted: it listens on loopback only, for demos and tests.

:class:`ImagePaths` also answers the image paths on the all-in-one's API
port, where the ``openstack`` CLI looks for every service when it runs
with ``OS_AUTH_TYPE=none`` and ``OS_ENDPOINT`` (``openstack accelerator
deployable program`` looks the image up in Glance first).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any
import urllib.parse
import uuid

from cyborg.api import wsgi_server
from cyborg.common import exception

LOOPBACK = '127.0.0.1'
VERSION = '2.16'
TIMESTAMP = '2026-01-01T00:00:00Z'
# Ids of images a directory does not name: uuid5 of their name here.
_ID_NAMESPACE = uuid.UUID('5b0f4d0e-2a43-4c5e-9c34-6f3f0b6d1a71')
# Glance's paths of images (and their data), below its version.
IMAGES_PATH = '/v2/images'
# Query parameters that are not property filters.
_LIST_PARAMS = ('limit', 'marker', 'sort_key', 'sort_dir', 'sort',
                'member_status', 'os_hidden')
_REASONS = {200: 'OK', 204: 'No Content', 300: 'Multiple Choices',
            401: 'Unauthorized', 404: 'Not Found',
            405: 'Method Not Allowed', 503: 'Service Unavailable'}

Response = tuple[int, list[tuple[str, str]], bytes]


def image_record(image_id: str, data: bytes | None,
                 properties: dict[str, Any], *, name: str,
                 tags: tuple[str, ...] = ('FPGA',),
                 status: str = 'active') -> dict[str, Any]:
    """An image as Glance v2 shows it, with the hashes of ``data``."""
    record: dict[str, Any] = {
        'id': image_id, 'name': name, 'status': status,
        'tags': list(tags), 'visibility': 'public',
        'protected': False, 'container_format': 'bare',
        'disk_format': 'raw', 'min_disk': 0, 'min_ram': 0,
        'owner': None, 'size': None, 'virtual_size': None,
        'checksum': None, 'os_hash_algo': None, 'os_hash_value': None,
        'os_hidden': False, 'created_at': TIMESTAMP,
        'updated_at': TIMESTAMP, 'self': '/v2/images/' + image_id,
        'file': '/v2/images/%s/file' % image_id,
        'schema': '/v2/schemas/image',
    }
    if data is not None:
        record.update(size=len(data),
                      checksum=hashlib.md5(data).hexdigest(),
                      os_hash_algo='sha512',
                      os_hash_value=hashlib.sha512(data).hexdigest())
    record.update(properties)
    return record


class ImageServer(wsgi_server.LoopbackApp):
    """Serves the images it is given (see the module docstring) on a
    free loopback port (or ``port``) from a thread of this process."""

    def __init__(self, port: int = 0):
        super().__init__(port)
        self._lock = threading.Lock()
        self.images: dict[str, dict[str, Any]] = {}
        self.data: dict[str, bytes] = {}
        #: Images per page of the list (None: all on one page).
        self.page_size: int | None = None

    @property
    def url(self) -> str:
        """The endpoint, e.g. ``http://127.0.0.1:PORT`` (no version)."""
        return 'http://%s:%d' % (LOOPBACK, self._port)

    def add(self, record: dict[str, Any], data: bytes | None) -> str:
        """Serve the image ``record`` (see :func:`image_record`) with
        ``data``; its id."""
        with self._lock:
            self.images[record['id']] = record
            if data is not None:
                self.data[record['id']] = data
        return record['id']

    def load_directory(self, directory: str) -> list[str]:
        """Serve the images described in ``directory``; their ids.

        :class:`~cyborg.common.exception.ConfigInvalid` names the file
        of an image that cannot be read."""
        ids = []
        for entry in sorted(os.listdir(directory)):
            if entry.endswith('.json'):
                record, data = _read_image(directory, entry)
                ids.append(self.add(record, data))
        return ids

    # The WSGI application ---------------------------------------------------

    def _app(self, environ, start_response):
        return self.wsgi(environ, start_response)

    def wsgi(self, environ, start_response):
        """The image service, as a WSGI application."""
        status, headers, body = self.respond(environ)
        headers = [('Content-Length', str(len(body)))] + headers
        start_response('%d %s' % (status, _REASONS.get(status, 'Status')),
                       headers)
        return [body]

    def respond(self, environ) -> Response:
        """The answer to the request of ``environ``."""
        path = environ['PATH_INFO']
        query = urllib.parse.parse_qs(environ.get('QUERY_STRING', ''))
        if environ['REQUEST_METHOD'] != 'GET':
            return json_response(405, {'message': 'method not allowed'})
        if path.rstrip('/') in ('', '/v2') and path != '/v2/images':
            return self._versions(environ)
        if not environ.get('HTTP_X_AUTH_TOKEN'):
            return json_response(401, {'message': 'no token'})
        parts = path.strip('/').split('/')
        if '/' + '/'.join(parts[:2]) != IMAGES_PATH:
            return json_response(404, {'message': 'no such path: %s'
                                                  % path})
        if len(parts) == 2:
            return json_response(200, self._page(query))
        with self._lock:
            image = self.images.get(parts[2])
            data = self.data.get(parts[2])
        if image is None or len(parts) > 4 or (
                len(parts) == 4 and parts[3] != 'file'):
            return json_response(404, {'message': 'No image found with ID '
                                                  '%s' % parts[2]})
        if len(parts) == 3:
            return json_response(200, image)
        if data is None:
            return 204, [], b''
        headers = [('Content-Type', 'application/octet-stream')]
        if image['checksum']:
            headers.append(('Content-MD5', image['checksum']))
        return 200, headers, data

    def _versions(self, environ) -> Response:
        host = environ.get('HTTP_HOST') or '%s:%d' % (LOOPBACK, self._port)
        version = {'id': 'v' + VERSION, 'status': 'CURRENT',
                   'links': [{'rel': 'self',
                              'href': 'http://%s/v2/' % host}]}
        if environ['PATH_INFO'].rstrip('/') == '/v2':
            return json_response(200, {'version': version})
        return json_response(300, {'versions': [version]})

    def _page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """One page of the list: at most ``limit`` (or ``page_size``)
        images after ``marker``, with a ``next`` link when more follow
        (as Glance)."""
        images = self._list(query)
        marker = query.get('marker', [None])[0]
        ids = [image['id'] for image in images]
        start = ids.index(marker) + 1 if marker in ids else 0
        size = self.page_size or _limit(query) or len(images) or 1
        page = images[start:start + size]
        body = {'images': page, 'first': '/v2/images',
                'schema': '/v2/schemas/images'}
        if start + size < len(images):
            rest = {k: v for k, v in query.items() if k != 'marker'}
            rest['marker'] = [page[-1]['id']]
            body['next'] = '/v2/images?' + urllib.parse.urlencode(
                rest, doseq=True)
        return body

    def _list(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        with self._lock:
            images = list(self.images.values())
        return [image for image in images
                if all(_matches(image, key, values)
                       for key, values in query.items()
                       if key not in _LIST_PARAMS)]


def _limit(query: dict[str, list[str]]) -> int | None:
    value = query.get('limit', [''])[0]
    return int(value) if value.isdigit() and int(value) > 0 else None


def _matches(image: dict[str, Any], key: str, values: list[str]) -> bool:
    if key == 'tag':
        return all(value in image['tags'] for value in values)
    return all(str(image.get(key)) == value for value in values)


def json_response(status: int, body: Any) -> Response:
    return status, [('Content-Type', 'application/json')], (
        json.dumps(body).encode())


def _read_image(directory: str, entry: str
                ) -> tuple[dict[str, Any], bytes]:
    """The image described by ``directory/entry`` and its data."""
    path = os.path.join(directory, entry)
    try:
        with open(path) as f:
            spec = json.load(f)
        if not isinstance(spec, dict) or not isinstance(
                spec.get('file'), str):
            raise ValueError('expected an object with "file"')
        properties = spec.get('properties', {})
        if not isinstance(properties, dict):
            raise ValueError('"properties" must be an object')
        with open(os.path.join(directory, spec['file']), 'rb') as f:
            data = f.read()
    except (OSError, ValueError) as e:
        raise exception.ConfigInvalid(
            reason="bitstream image %s cannot be read: %s" % (path, e))
    name = spec.get('name') or entry[:-len('.json')]
    image_id = str(spec.get('id') or uuid.uuid5(_ID_NAMESPACE, name))
    tags = tuple(spec.get('tags', ('FPGA',)))
    return image_record(image_id, data, properties, name=name,
                        tags=tags), data


class ImagePaths:
    """A WSGI application (the all-in-one's API) whose requests for
    Glance's image paths (:data:`IMAGES_PATH` and below) ``images``
    answers instead.

    A client without a service catalog (``OS_AUTH_TYPE=none``) sends
    every service's requests to its one endpoint: the image lookups of
    the ``openstack`` CLI then reach the local Glance, as its lookups of
    accelerator resources reach the API. The API has no such path. Like
    the API beside them in the all-in-one (``noauth``), these paths need
    no token.
    """

    def __init__(self, app, images: ImageServer):
        self._app = app
        self._images = images

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        if path == IMAGES_PATH or path.startswith(IMAGES_PATH + '/'):
            environ.setdefault('HTTP_X_AUTH_TOKEN', 'noauth')
            return self._images.wsgi(environ, start_response)
        return self._app(environ, start_response)
