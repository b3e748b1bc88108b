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

"""A fake Glance serving the part of the image API v2 bitstreams need.

A real HTTP server (threaded) on a free loopback port, started in this
process::

    with FakeGlance() as glance:
        image_id = glance.add_image(b'bits', {'function_uuid': ...})
        client = GlanceClient.for_endpoint(glance.url)

It serves:

* ``GET /``: the version document (300, one ``CURRENT`` v2.16), so that
  openstacksdk's version discovery works;
* ``GET /v2/images``: the images, filtered as Glance filters them:
  ``status``, ``tag`` (every one given), ``name``, ``visibility`` and
  any other key as an exact match on an image property; ``page_size``
  images a page, with a ``next`` link (``marker``) when more follow;
* ``GET /v2/images/{id}``: one image, 404 when there is none;
* ``GET /v2/images/{id}/file``: its data (204 when it has none), with
  ``Content-MD5``.

Images carry real ``checksum`` (md5), ``os_hash_algo`` (sha512) and
``os_hash_value`` of their data, unless :meth:`FakeGlance.add_image` is
told otherwise (``hashes='md5'`` keeps only the md5 ``checksum``,
``'none'`` none at all, and ``served=`` serves other data than those
hashed). Every request needs an ``X-Auth-Token`` (401 otherwise), and
the value of ``token`` when that is set.

:meth:`FakeGlance.down` makes it answer 503 (``refuse=True``: close the
listening socket) until :meth:`FakeGlance.up`; ``delay`` seconds are
slept before every answer.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
import uuid
from typing import Any

import pytest

from cyborg.common import wsgi_server

LOOPBACK = '127.0.0.1'
VERSION = '2.16'
TIMESTAMP = '2026-01-01T00:00:00Z'
# Query parameters that are not property filters.
_LIST_PARAMS = ('limit', 'marker', 'sort_key', 'sort_dir', 'sort',
                'member_status', 'os_hidden')
_REASONS = {200: 'OK', 204: 'No Content', 300: 'Multiple Choices',
            401: 'Unauthorized', 404: 'Not Found',
            405: 'Method Not Allowed', 503: 'Service Unavailable'}


class FakeGlance:
    """See the module docstring. ``requests`` lists ``(method, path,
    query)`` of every request received, in arrival order."""

    def __init__(self, port: int = 0):
        self._lock = threading.Lock()
        self.images: dict[str, dict[str, Any]] = {}
        self.data: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.delay = 0.0
        #: Images per page of the list (None: all on one page).
        self.page_size: int | None = None
        #: The one token accepted when set; any other gets 401.
        self.token: str | None = None
        self._answer_503 = False
        self._port = port
        self._server: wsgi_server.WSGIServer | None = None

    # Life cycle -------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """The endpoint, e.g. ``http://127.0.0.1:PORT`` (no version)."""
        return 'http://%s:%d' % (LOOPBACK, self._port)

    def start(self) -> FakeGlance:
        if self._server is None:
            self._server = wsgi_server.WSGIServer(self._app, LOOPBACK,
                                                  self._port)
            self._port = self._server.port
            self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def down(self, refuse: bool = False) -> None:
        """Answer 503 from now on, or (``refuse``) refuse connections."""
        with self._lock:
            self._answer_503 = not refuse
        if refuse:
            self.stop()

    def up(self) -> None:
        with self._lock:
            self._answer_503 = False
        self.start()

    def __enter__(self) -> FakeGlance:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # Images -----------------------------------------------------------------

    def add_image(self, data: bytes | None, properties: dict[str, str],
                  *, tags: tuple[str, ...] = ('FPGA',),
                  status: str = 'active', hashes: str = 'multihash',
                  served: bytes | None = None, name: str = 'bitstream',
                  image_id: str | None = None) -> str:
        """Add an image; its id. ``hashes``: ``'multihash'`` (sha512 and
        md5), ``'md5'`` or ``'none'``; ``served``: other data to serve
        than ``data`` (a corrupt transfer)."""
        image_id = image_id or str(uuid.uuid4())
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
            record['size'] = len(data)
            if hashes in ('multihash', 'md5'):
                record['checksum'] = hashlib.md5(data).hexdigest()
            if hashes == 'multihash':
                record['os_hash_algo'] = 'sha512'
                record['os_hash_value'] = hashlib.sha512(data).hexdigest()
        record.update(properties)
        with self._lock:
            self.images[image_id] = record
            if data is not None:
                self.data[image_id] = data if served is None else served
        return image_id

    def downloads(self, image_id: str) -> int:
        """How many times the data of ``image_id`` were asked for."""
        path = '/v2/images/%s/file' % image_id
        with self._lock:
            return sum(1 for r in self.requests if r[1] == path)

    # The WSGI application ----------------------------------------------------

    def _app(self, environ, start_response):
        if self.delay:
            time.sleep(self.delay)
        status, headers, body = self._handle(environ)
        headers = [('Content-Length', str(len(body)))] + headers
        start_response('%d %s' % (status, _REASONS.get(status, 'Status')),
                       headers)
        return [body]

    def _handle(self, environ) -> tuple[int, list, bytes]:
        path = environ['PATH_INFO']
        query = urllib.parse.parse_qs(environ.get('QUERY_STRING', ''))
        with self._lock:
            self.requests.append((environ['REQUEST_METHOD'], path, query))
            answer_503 = self._answer_503
        if answer_503:
            return _json(503, {'message': 'Glance is down (fake)'})
        if environ['REQUEST_METHOD'] != 'GET':
            return _json(405, {'message': 'method not allowed'})
        if path.rstrip('/') in ('', '/v2') and path != '/v2/images':
            return self._versions(environ)
        token = environ.get('HTTP_X_AUTH_TOKEN')
        if not token or (self.token is not None and token != self.token):
            return _json(401, {'message': 'no token'})
        parts = path.strip('/').split('/')
        if parts[:2] != ['v2', 'images']:
            return _json(404, {'message': 'no such path: %s' % path})
        if len(parts) == 2:
            return _json(200, self._page(query))
        with self._lock:
            image = self.images.get(parts[2])
            data = self.data.get(parts[2])
        if image is None or len(parts) > 4 or (
                len(parts) == 4 and parts[3] != 'file'):
            return _json(404, {'message': 'No image found with ID %s'
                                          % parts[2]})
        if len(parts) == 3:
            return _json(200, image)
        if data is None:
            return 204, [], b''
        headers = [('Content-Type', 'application/octet-stream')]
        if image['checksum']:
            headers.append(('Content-MD5', image['checksum']))
        return 200, headers, data

    def _versions(self, environ) -> tuple[int, list, bytes]:
        host = environ.get('HTTP_HOST') or '%s:%d' % (LOOPBACK, self._port)
        version = {'id': 'v' + VERSION, 'status': 'CURRENT',
                   'links': [{'rel': 'self',
                              'href': 'http://%s/v2/' % host}]}
        if environ['PATH_INFO'].rstrip('/') == '/v2':
            return _json(200, {'version': version})
        return _json(300, {'versions': [version]})

    def _page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """One page of the list: at most ``page_size`` images after
        ``marker``, with a ``next`` link when more follow (as Glance)."""
        images = self._list(query)
        marker = query.get('marker', [None])[0]
        ids = [image['id'] for image in images]
        start = ids.index(marker) + 1 if marker in ids else 0
        size = self.page_size or len(images) or 1
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
        found = []
        for image in images:
            if all(_matches(image, key, values)
                   for key, values in query.items()
                   if key not in _LIST_PARAMS):
                found.append(image)
        return found


def _matches(image: dict[str, Any], key: str, values: list[str]) -> bool:
    if key == 'tag':
        return all(value in image['tags'] for value in values)
    return all(str(image.get(key)) == value for value in values)


def _json(status: int, body: Any) -> tuple[int, list, bytes]:
    return status, [('Content-Type', 'application/json')], (
        json.dumps(body).encode())


@pytest.fixture
def fake_glance():
    """A started :class:`FakeGlance`, stopped after the test."""
    with FakeGlance() as glance:
        yield glance
