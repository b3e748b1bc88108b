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

"""A fake Glance serving the part of the image API v2 bitstreams need:
:class:`cyborg.allinone.local_images.ImageServer` with faults to inject.

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

import threading
import time
import urllib.parse
import uuid

import pytest

from cyborg.allinone import local_images

LOOPBACK = local_images.LOOPBACK


class FakeGlance(local_images.ImageServer):
    """See the module docstring. ``requests`` lists ``(method, path,
    query)`` of every request received, in arrival order."""

    def __init__(self, port: int = 0):
        super().__init__(port)
        self._faults = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.delay = 0.0
        #: The one token accepted when set; any other gets 401.
        self.token: str | None = None
        self._answer_503 = False

    def down(self, refuse: bool = False) -> None:
        """Answer 503 from now on, or (``refuse``) refuse connections."""
        with self._faults:
            self._answer_503 = not refuse
        if refuse:
            self.stop()

    def up(self) -> None:
        with self._faults:
            self._answer_503 = False
        self.start()

    def add_image(self, data: bytes | None, properties: dict[str, str],
                  *, tags: tuple[str, ...] = ('FPGA',),
                  status: str = 'active', hashes: str = 'multihash',
                  served: bytes | None = None, name: str = 'bitstream',
                  image_id: str | None = None) -> str:
        """Add an image; its id. ``hashes``: ``'multihash'`` (sha512 and
        md5), ``'md5'`` or ``'none'``; ``served``: other data to serve
        than ``data`` (a corrupt transfer)."""
        record = local_images.image_record(
            image_id or str(uuid.uuid4()), data, properties, name=name,
            tags=tags, status=status)
        if hashes != 'multihash':
            record.update(os_hash_algo=None, os_hash_value=None)
        if hashes == 'none':
            record['checksum'] = None
        record.update(properties)
        return self.add(record, data if served is None else served)

    def downloads(self, image_id: str) -> int:
        """How many times the data of ``image_id`` were asked for."""
        path = '/v2/images/%s/file' % image_id
        with self._faults:
            return sum(1 for r in self.requests if r[1] == path)

    def respond(self, environ) -> local_images.Response:
        if self.delay:
            time.sleep(self.delay)
        query = urllib.parse.parse_qs(
            environ.get('QUERY_STRING', ''))
        with self._faults:
            self.requests.append((environ['REQUEST_METHOD'],
                                  environ['PATH_INFO'], query))
            answer_503 = self._answer_503
        if answer_503:
            return local_images.json_response(
                503, {'message': 'Glance is down (fake)'})
        token = environ.get('HTTP_X_AUTH_TOKEN')
        if (self.token is not None and token and token != self.token
                and environ['PATH_INFO'].rstrip('/') not in ('', '/v2')):
            return local_images.json_response(401, {'message': 'bad token'})
        return super().respond(environ)


@pytest.fixture
def fake_glance():
    """A started :class:`FakeGlance`, stopped after the test."""
    with FakeGlance() as glance:
        yield glance
