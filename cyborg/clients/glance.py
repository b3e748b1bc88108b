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

"""A client of the Glance image API (v2) for FPGA bitstreams.

Built on openstacksdk's image proxy over a keystoneauth1 session loaded
from the ``[glance]`` options (as the Nova and Placement clients; no
clouds.yaml). Three calls:

* :meth:`GlanceClient.get`: one image by id;
* :meth:`GlanceClient.find_bitstreams`: the active images tagged ``FPGA``
  whose bitstream metadata (:mod:`cyborg.domain.bitstream`) have the
  given values, filtered by Glance itself;
* :meth:`GlanceClient.download`: an image's data, streamed to a
  temporary file beside the destination and verified against the image's
  ``os_hash_algo``/``os_hash_value`` (its md5 ``checksum`` only when the
  image has no multihash) before it is renamed into place. An image
  without either, or whose data do not match, raises
  :class:`~cyborg.common.exception.BitstreamChecksumMismatch` and leaves
  nothing behind.

Glance failures become typed errors: 404
:class:`~cyborg.common.exception.BitstreamNotFound`; connection refused,
timeouts and 5xx :class:`~cyborg.common.exception.GlanceUnavailable`;
other refusals :class:`~cyborg.common.exception.GlanceRequestFailed`.
"""

from __future__ import annotations

from collections.abc import Iterator
import hashlib
import os
import re
import tempfile
from typing import TYPE_CHECKING
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_log import log as logging

from cyborg.clients import ksa
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.domain import bitstream

# openstacksdk is imported when Glance is first asked, not with this
# module: the agent and the conductor import it at start, the SDK is
# about a fifth of their start-up CPU (0.3-0.4 s), and only FPGA
# programming uses Glance.
if TYPE_CHECKING:
    from openstack import connection as sdk_connection
    from openstack.image.v2.image import Image

LOG = logging.getLogger(__name__)

CONF_GROUP = 'glance'
SERVICE_TYPE = 'image'
ACTIVE = 'active'
#: Hash algorithms a multihash may name (Glance's default is sha512).
HASH_ALGORITHMS = ('sha256', 'sha384', 'sha512', 'sha3_256', 'sha3_384',
                   'sha3_512', 'blake2b', 'blake2s')
CHUNK_SIZE = 1024 * 1024
# What an image id may hold: it becomes part of a URL path.
_IMAGE_ID = re.compile(r'^[A-Za-z0-9._-]{1,255}$')


def _connection(session: ks_session.Session, conf=None,
                endpoint: str | None = None, status_code_retries: int = 0
                ) -> sdk_connection.Connection:
    from openstack import connection as sdk_connection
    if conf is not None:
        # The [glance] adapter options (endpoint_override, region_name,
        # valid_interfaces, status_code_retries...) as Nova reads them.
        return sdk_connection.Connection(
            session=session, oslo_conf=conf, service_types={SERVICE_TYPE})
    return sdk_connection.Connection(
        session=session, image_endpoint_override=endpoint,
        image_api_version='2',
        image_status_code_retries=status_code_retries)


class GlanceClient:
    """Bitstream lookups and downloads over an openstacksdk Connection."""

    def __init__(self, connection: sdk_connection.Connection):
        self._conn = connection

    @classmethod
    def from_conf(cls, conf) -> GlanceClient:
        """A client configured by the ``[glance]`` group of ``conf``.

        The group must have been registered with
        :func:`cyborg.conf.glance.register_opts`. Raises
        :class:`~cyborg.common.exception.GlanceNotConfigured` if it has
        neither an ``auth_type`` nor an ``endpoint_override``.
        """
        auth = ksa.load_auth(conf, CONF_GROUP)
        if auth is None and not conf[CONF_GROUP].endpoint_override:
            raise exception.GlanceNotConfigured()
        session = ks_loading.load_session_from_conf_options(
            conf, CONF_GROUP, auth=auth)
        return cls(_connection(ksa.read_environment_once(session), conf=conf))

    @classmethod
    def for_endpoint(cls, url: str, token: str = 'admin',
                     timeout: float | None = 10.0,
                     status_code_retries: int = 0) -> GlanceClient:
        """A client of the Glance at ``url`` (e.g.
        ``http://127.0.0.1:9292``) sending ``X-Auth-Token: <token>``,
        without keystone; a 503 is retried ``status_code_retries``
        times."""
        url = url.rstrip('/')
        session = ks_session.Session(auth=token_endpoint.Token(url, token),
                                     timeout=timeout)
        return cls(_connection(ksa.read_environment_once(session),
                               endpoint=url,
                               status_code_retries=status_code_retries))

    # Lookups ---------------------------------------------------------------

    def get(self, image_id: str) -> Image:
        """The image ``image_id``; BitstreamNotFound if Glance has none
        (or ``image_id`` cannot be an image id)."""
        if not isinstance(image_id, str) or not _IMAGE_ID.match(image_id):
            raise exception.BitstreamNotFound(image=repr(image_id))
        with _glance_errors('image %s' % image_id, image_id):
            return self._conn.image.get_image(image_id)

    def find_bitstreams(self, **metadata: str) -> list[Image]:
        """The active bitstream images (tagged ``FPGA``) whose metadata
        have these values, e.g. ``find_bitstreams(function_uuid=ID,
        region_uuid=RID)``.

        Keys are those of :data:`cyborg.domain.bitstream.KEYS`, written
        with ``_`` for ``-`` (``bs_uuid`` for ``bs-uuid``). Identifier
        values are sent in canonical form (32 lower-case hex digits): the
        form bitstream images must be registered with for a lookup to
        find them. Raises ValueError for an unknown key.
        """
        query = {'status': ACTIVE, 'tag': bitstream.IMAGE_TAG}
        query.update(_property_filters(metadata))
        with _glance_errors('the image list', None):
            return [_image(self._conn, record)
                    for record in self._list(query)
                    if record.get('status') == ACTIVE]

    def _list(self, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        # openstacksdk's images() drops the query parameters it does not
        # know, custom properties among them: ask Glance directly.
        from openstack import exceptions as sdk_exc
        url: str | None = '/images'
        params: dict[str, str] | None = query
        while url:
            response = self._conn.image.get(url, params=params,
                                            raise_exc=False)
            sdk_exc.raise_from_response(response)
            page = response.json()
            yield from page.get('images', [])
            url = _next_page(page.get('next'))
            params = None

    # Download --------------------------------------------------------------

    def download(self, image: Image | str, dest_path: str) -> None:
        """Write the data of ``image`` (an Image or an id) to
        ``dest_path``, verified; see the module docstring.

        The data go to a temporary file in the destination's directory,
        which is renamed to ``dest_path`` only once verified and synced;
        on any error it is removed and ``dest_path`` is left untouched.
        """
        if isinstance(image, str):
            image = self.get(image)
        algo, expected = expected_hash(image)
        directory = os.path.dirname(os.path.abspath(dest_path))
        fd, temp = tempfile.mkstemp(dir=directory, prefix='.download-')
        try:
            with os.fdopen(fd, 'wb') as out:
                actual = self._stream(image, out, algo)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            if actual != expected.lower():
                raise exception.BitstreamChecksumMismatch(
                    image=image.id, reason='its %s is %s, Glance says %s'
                    % (algo, actual, expected))
            os.replace(temp, dest_path)
        except BaseException:
            metrics.glance_download(False)
            _remove(temp)
            raise
        metrics.glance_download(True, size)

    def _stream(self, image: Image, out, algo: str) -> str:
        from openstack import exceptions as sdk_exc
        hasher = hashlib.new(algo)
        with _glance_errors('the data of image %s' % image.id, image.id):
            response = self._conn.image.download_image(image, stream=True)
            try:
                # Older openstacksdk releases return an error response.
                sdk_exc.raise_from_response(response)
                for chunk in _chunks(response):
                    hasher.update(chunk)
                    out.write(chunk)
            finally:
                response.close()
        return hasher.hexdigest()


def metadata(image: Image) -> bitstream.BitstreamMetadata:
    """The bitstream metadata of ``image``; InvalidBitstreamMetadata
    naming the key when they break the spec."""
    return bitstream.parse(image.properties or {})


def expected_hash(image: Image) -> tuple[str, str]:
    """(algorithm, hex digest) the data of ``image`` must have: its
    multihash, else its md5 ``checksum``. BitstreamChecksumMismatch if it
    has neither or names an algorithm this client does not accept."""
    algo = getattr(image, 'hash_algo', None)
    value = getattr(image, 'hash_value', None)
    if algo and value:
        if algo not in HASH_ALGORITHMS:
            raise exception.BitstreamChecksumMismatch(
                image=image.id, reason='unsupported os_hash_algo %r' % algo)
        return algo, value
    if image.checksum:
        return 'md5', image.checksum
    raise exception.BitstreamChecksumMismatch(
        image=image.id, reason='Glance has no os_hash_value or checksum '
                               'for it, so its data cannot be verified')


def _property_filters(metadata: dict[str, str]) -> dict[str, str]:
    query = {}
    for name, value in metadata.items():
        key = name.replace('_', '-') if name.startswith('bs_') else name
        if key not in bitstream.KEYS:
            raise ValueError('%s is not a bitstream metadata key (one of '
                             '%s)' % (name, ', '.join(bitstream.KEYS)))
        if key in bitstream.ID_KEYS:
            value = bitstream.canonical_id(value) or value
        query[key] = value
    return query


def _image(conn, record: dict[str, Any]) -> Image:
    from openstack.image.v2 import image as sdk_image
    record = dict(record)
    record.pop('self', None)  # a link; no attribute of the resource
    return sdk_image.Image.existing(connection=conn, **record)


def _next_page(link: str | None) -> str | None:
    """The ``next`` link of a list page relative to the v2 endpoint."""
    if not link:
        return None
    return link[len('/v2'):] if link.startswith('/v2/') else link


def _chunks(response) -> Iterator[bytes]:
    try:
        yield from response.iter_content(chunk_size=CHUNK_SIZE)
    except Exception as e:  # requests' errors while streaming the body
        raise exception.GlanceUnavailable(
            reason='the download broke off: %s' % e) from e


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _glance_errors:
    """Turns openstacksdk and keystoneauth errors into cyborg's."""

    def __init__(self, what: str, image_id: str | None):
        self._what = what
        self._image_id = image_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or isinstance(error, exception.CyborgException):
            return False
        mapped = self._map(error)
        if mapped is None:
            return False
        raise mapped from error

    def _map(self, error: BaseException) -> Exception | None:
        from openstack import exceptions as sdk_exc
        if isinstance(error, sdk_exc.NotFoundException) or (
                isinstance(error, sdk_exc.ResourceNotFound)):
            return exception.BitstreamNotFound(image=self._image_id
                                               or self._what)
        if isinstance(error, sdk_exc.HttpException):
            status = error.status_code or 0
            reason = 'HTTP %s %s' % (status, _short(error.details or error))
            if status >= 500 or status in (408, 429):
                return exception.GlanceUnavailable(
                    reason='%s: %s' % (self._what, reason))
            return exception.GlanceRequestFailed(what=self._what,
                                                 reason=reason)
        if isinstance(error, (ks_exc.AuthorizationFailure,
                              ks_exc.Unauthorized)):
            return exception.GlanceRequestFailed(what=self._what,
                                                 reason=_short(error))
        if isinstance(error, (ks_exc.ConnectFailure, ks_exc.ConnectionError,
                              ks_exc.DiscoveryFailure,
                              ks_exc.EndpointNotFound)):
            return exception.GlanceUnavailable(
                reason='%s: %s' % (self._what, _short(error)))
        if isinstance(error, ks_exc.ClientException):
            return exception.GlanceUnavailable(
                reason='%s: %s' % (self._what, _short(error)))
        if isinstance(error, sdk_exc.SDKException):
            return exception.GlanceUnavailable(
                reason='%s: %s' % (self._what, _short(error)))
        return None


def _short(error: Any, limit: int = 300) -> str:
    text = ' '.join(str(error).split())
    return text[:limit]
