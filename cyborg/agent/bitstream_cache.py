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

"""The agent's cache of FPGA bitstreams downloaded from Glance.

One file per image in ``[agent] bitstream_cache_dir``, named by the image
id, at most ``[agent] bitstream_cache_size_mb`` of them in all::

    cache = BitstreamCache.from_conf(CONF)
    with cache.use(image.id, image.hash_algo, image.hash_value,
                   lambda dest: glance.download(image, dest)) as path:
        driver.program(controlpath, path)

* A file is checked against the expected hash before every use; a file
  that does not match (corrupt, truncated, replaced) is discarded and
  fetched again.
* ``fetch(dest)`` writes the image's data to ``dest``, a temporary file in
  the cache directory. The data are synced, verified and renamed into
  place: a file under its final name is always complete. A failed or
  wrong fetch leaves nothing behind.
* Concurrent requests for one image fetch it once: the first fetches, the
  others wait for it and then use its file.
* To make room, the least recently used files are removed, never one in
  use (inside :meth:`BitstreamCache.use`). A bitstream larger than the
  whole cache raises :class:`~cyborg.common.exception.BitstreamCacheTooSmall`;
  one that only fits once bitstreams in use are released raises
  :class:`~cyborg.common.exception.BitstreamCacheFull`.

The limit counts the files kept; a download in flight occupies disk space
beyond it until it is verified. Left-over temporary files (names starting
with a dot, of an agent that died while fetching) are removed when the
cache is created.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import hashlib
import os
import re
import tempfile
import threading
import time

from oslo_log import log as logging

from cyborg.common import exception

LOG = logging.getLogger(__name__)

MIB = 1024 * 1024
TEMP_PREFIX = '.fetch-'
_CHUNK = 1024 * 1024
# Image ids become file names: no separators, no leading dot.
_IMAGE_ID = re.compile(r'^[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}$')

Fetch = Callable[[str], None]


def file_hash(path: str, algo: str) -> str:
    """The hex digest of the file at ``path`` with ``algo`` (hashlib)."""
    hasher = hashlib.new(algo)
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(_CHUNK), b''):
            hasher.update(chunk)
    return hasher.hexdigest()


class BitstreamCache:
    """See the module docstring. Thread-safe; one per agent and
    directory."""

    def __init__(self, directory: str, size_limit: int):
        if size_limit < 1:
            raise ValueError('size_limit must be at least 1 byte')
        self.directory = os.path.abspath(directory)
        self.size_limit = size_limit
        self._lock = threading.Lock()
        # image id -> size, least recently used first.
        self._entries: collections.OrderedDict[str, int] = (
            collections.OrderedDict())
        self._in_use: collections.Counter[str] = collections.Counter()
        self._image_locks: dict[str, threading.Lock] = {}
        os.makedirs(self.directory, mode=0o750, exist_ok=True)
        self._load()

    @classmethod
    def from_conf(cls, conf) -> BitstreamCache:
        """The cache ``[agent] bitstream_cache_dir`` and
        ``bitstream_cache_size_mb`` of ``conf`` describe."""
        return cls(conf.agent.bitstream_cache_dir,
                   conf.agent.bitstream_cache_size_mb * MIB)

    # Public interface ------------------------------------------------------

    @contextlib.contextmanager
    def use(self, image_id: str, expected_hash_algo: str,
            expected_hash: str, fetch: Fetch) -> Iterator[str]:
        """The path of the verified bitstream ``image_id``, fetched if
        needed; it stays in the cache (is not evicted) until the block
        ends."""
        _check_image_id(image_id)
        self._pin(image_id)
        try:
            yield self._ensure(image_id, expected_hash_algo, expected_hash,
                               fetch)
        finally:
            self._unpin(image_id)

    def path_for(self, image_id: str, expected_hash_algo: str,
                 expected_hash: str, fetch: Fetch) -> str:
        """The path of the verified bitstream ``image_id``, fetched if
        needed. Not protected from eviction once returned: to program
        it, use :meth:`use`."""
        with self.use(image_id, expected_hash_algo, expected_hash,
                      fetch) as path:
            return path

    def cached(self) -> list[str]:
        """The image ids in the cache, least recently used first."""
        with self._lock:
            return list(self._entries)

    def size(self) -> int:
        """Bytes of the files in the cache."""
        with self._lock:
            return sum(self._entries.values())

    def path(self, image_id: str) -> str:
        _check_image_id(image_id)
        return os.path.join(self.directory, image_id)

    # Steps -----------------------------------------------------------------

    def _ensure(self, image_id: str, algo: str, expected: str,
                fetch: Fetch) -> str:
        _check_algo(image_id, algo)
        with self._image_lock(image_id):
            path = self.path(image_id)
            if self._verified(image_id, path, algo, expected):
                self._touch(image_id, path)
                return path
            self._fetch(image_id, path, algo, expected, fetch)
            return path

    def _verified(self, image_id: str, path: str, algo: str,
                  expected: str) -> bool:
        try:
            actual = file_hash(path, algo)
        except FileNotFoundError:
            self._forget(image_id)
            return False
        if actual == expected.lower():
            return True
        LOG.warning('Cached bitstream %s does not match its %s; fetching '
                    'it again', image_id, algo)
        self._discard(image_id, path)
        return False

    def _fetch(self, image_id: str, path: str, algo: str, expected: str,
               fetch: Fetch) -> None:
        fd, temp = tempfile.mkstemp(dir=self.directory,
                                    prefix=TEMP_PREFIX + image_id + '-')
        os.close(fd)
        try:
            fetch(temp)
            _sync(temp)
            actual = file_hash(temp, algo)
            if actual != expected.lower():
                raise exception.BitstreamChecksumMismatch(
                    image=image_id, reason='its %s is %s, expected %s'
                    % (algo, actual, expected))
            self._make_room(image_id, os.path.getsize(temp))
            os.replace(temp, path)
            _sync_directory(self.directory)
        except BaseException:
            _remove(temp)
            if not os.path.exists(path):
                self._forget(image_id)
            raise

    def _make_room(self, image_id: str, size: int) -> None:
        """Evict what must go for ``size`` more bytes, and count them."""
        if size > self.size_limit:
            raise exception.BitstreamCacheTooSmall(
                image=image_id, size=size, limit=self.size_limit)
        with self._lock:
            used = sum(s for i, s in self._entries.items() if i != image_id)
            victims = []
            for victim, victim_size in self._entries.items():
                if used + size <= self.size_limit:
                    break
                if victim != image_id and not self._in_use[victim]:
                    victims.append((victim, victim_size))
                    used -= victim_size
            if used + size > self.size_limit:
                raise exception.BitstreamCacheFull(
                    image=image_id, size=size, in_use=used,
                    limit=self.size_limit)
            for victim, _ in victims:
                del self._entries[victim]
            # Counted at once, so that concurrent fetches of other images
            # make room for it too.
            self._entries[image_id] = size
            self._entries.move_to_end(image_id)
        for victim, victim_size in victims:
            _remove(self.path(victim))
            LOG.info('Evicted bitstream %s (%d bytes) from the cache',
                     victim, victim_size)

    # Book-keeping ---------------------------------------------------------

    def _load(self) -> None:
        found = []
        for name in os.listdir(self.directory):
            full = os.path.join(self.directory, name)
            if name.startswith('.'):
                # A temporary file (ours, or a downloader's): image ids
                # never start with a dot.
                _remove(full)
            elif _IMAGE_ID.match(name) and os.path.isfile(full):
                stat = os.stat(full)
                found.append((stat.st_mtime, name, stat.st_size))
        for _, name, size in sorted(found):
            self._entries[name] = size

    def _image_lock(self, image_id: str) -> threading.Lock:
        with self._lock:
            return self._image_locks.setdefault(image_id, threading.Lock())

    def _pin(self, image_id: str) -> None:
        with self._lock:
            self._in_use[image_id] += 1

    def _unpin(self, image_id: str) -> None:
        with self._lock:
            self._in_use[image_id] -= 1
            if not self._in_use[image_id]:
                del self._in_use[image_id]
                # Locks of images nobody waits for are not kept.
                lock = self._image_locks.get(image_id)
                if lock is not None and not lock.locked():
                    del self._image_locks[image_id]

    def _touch(self, image_id: str, path: str) -> None:
        """Mark ``image_id`` used now (its mtime keeps the order across
        restarts)."""
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            os.utime(path, (now, now))
        with self._lock:
            if image_id not in self._entries:
                self._entries[image_id] = os.path.getsize(path)
            self._entries.move_to_end(image_id)

    def _forget(self, image_id: str) -> None:
        with self._lock:
            self._entries.pop(image_id, None)

    def _discard(self, image_id: str, path: str) -> None:
        self._forget(image_id)
        _remove(path)


def _check_image_id(image_id: str) -> None:
    if not isinstance(image_id, str) or not _IMAGE_ID.match(image_id):
        raise exception.InvalidParameterValue(
            err='%r is not a valid image id' % (image_id,))


def _check_algo(image_id: str, algo: str) -> None:
    if algo not in hashlib.algorithms_available:
        raise exception.BitstreamChecksumMismatch(
            image=image_id, reason='unknown hash algorithm %r' % (algo,))


def _sync(path: str) -> None:
    with open(path, 'rb') as f:
        os.fsync(f.fileno())


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
