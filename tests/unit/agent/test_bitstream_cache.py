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

"""Unit tests of cyborg.agent.bitstream_cache and its [agent] options."""

from __future__ import annotations

import hashlib
import os
import threading
import time

from oslo_config import cfg
import pytest

from cyborg.agent import bitstream_cache
from cyborg.common import exception
from cyborg.conf import bitstream_cache as cache_conf
from cyborg.conf import default as default_conf

A, B, C, D = ('aaaaaaaa-0000-4000-8000-00000000000a',
              'bbbbbbbb-0000-4000-8000-00000000000b',
              'cccccccc-0000-4000-8000-00000000000c',
              'dddddddd-0000-4000-8000-00000000000d')


class Source:
    """A fetch function per image, counting its calls."""

    def __init__(self, size: int = 100):
        self.data = {image: image.encode()[:1] * size
                     for image in (A, B, C, D)}
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self.delay = 0.0
        self.fail: Exception | None = None
        self.wrong = False

    def sha512(self, image: str) -> str:
        return hashlib.sha512(self.data[image]).hexdigest()

    def fetch(self, image: str):
        def fetch(dest: str) -> None:
            with self._lock:
                self.calls.append(image)
            time.sleep(self.delay)
            with open(dest, 'wb') as f:
                f.write(self.data[image][:50])
                if self.fail is not None:
                    raise self.fail
                f.write(b'x' if self.wrong else self.data[image][50:])
        return fetch

    def args(self, image: str):
        return image, 'sha512', self.sha512(image), self.fetch(image)


@pytest.fixture
def source():
    return Source()


def make(tmp_path, limit: int = 250) -> bitstream_cache.BitstreamCache:
    return bitstream_cache.BitstreamCache(str(tmp_path / 'cache'), limit)


def files(cache) -> list[str]:
    return sorted(os.listdir(cache.directory))


def test_miss_fetches_and_hit_does_not(tmp_path, source):
    cache = make(tmp_path)
    path = cache.path_for(*source.args(A))
    assert path == os.path.join(cache.directory, A)
    with open(path, 'rb') as f:
        assert f.read() == source.data[A]
    assert cache.path_for(*source.args(A)) == path
    assert source.calls == [A]
    assert files(cache) == [A]
    assert cache.size() == 100


def test_use_yields_the_verified_path(tmp_path, source):
    cache = make(tmp_path)
    with cache.use(*source.args(A)) as path:
        assert bitstream_cache.file_hash(path, 'sha512') == source.sha512(A)


def test_md5_expected_hash(tmp_path, source):
    cache = make(tmp_path)
    md5 = hashlib.md5(source.data[A]).hexdigest().upper()
    cache.path_for(A, 'md5', md5, source.fetch(A))
    cache.path_for(A, 'md5', md5, source.fetch(A))
    assert source.calls == [A]


def test_eviction_is_least_recently_used(tmp_path, source):
    cache = make(tmp_path)
    cache.path_for(*source.args(A))
    cache.path_for(*source.args(B))
    cache.path_for(*source.args(A))  # B is now the least recently used
    cache.path_for(*source.args(C))
    assert files(cache) == sorted([A, C])
    assert cache.cached() == [A, C]
    cache.path_for(*source.args(B))
    assert cache.cached() == [C, B]
    assert source.calls == [A, B, C, B]


def test_in_use_is_not_evicted(tmp_path, source):
    cache = make(tmp_path)
    with cache.use(*source.args(A)):
        cache.path_for(*source.args(B))
        cache.path_for(*source.args(C))  # evicts B, not A
        assert sorted(cache.cached()) == sorted([A, C])
        assert os.path.exists(os.path.join(cache.directory, A))


def test_full_of_files_in_use(tmp_path, source):
    cache = make(tmp_path)
    with cache.use(*source.args(A)), cache.use(*source.args(B)):
        with pytest.raises(exception.BitstreamCacheFull) as info:
            cache.path_for(*source.args(C))
        assert '200 of its 250 bytes' in str(info.value)
    assert files(cache) == sorted([A, B])
    cache.path_for(*source.args(C))
    assert files(cache) == sorted([B, C])


def test_image_larger_than_the_cache(tmp_path, source):
    cache = make(tmp_path, limit=99)
    with pytest.raises(exception.BitstreamCacheTooSmall) as info:
        cache.path_for(*source.args(A))
    assert str(info.value) == (
        'Bitstream image %s (100 bytes) does not fit in the bitstream '
        'cache (99 bytes, [agent] bitstream_cache_size_mb)' % A)
    assert files(cache) == []


def test_corrupt_cached_file_is_fetched_again(tmp_path, source, caplog):
    cache = make(tmp_path)
    path = cache.path_for(*source.args(A))
    with open(path, 'r+b') as f:
        f.write(b'Z')
    assert cache.path_for(*source.args(A)) == path
    with open(path, 'rb') as f:
        assert f.read() == source.data[A]
    assert source.calls == [A, A]
    assert 'does not match its sha512' in caplog.text


def test_removed_cached_file_is_fetched_again(tmp_path, source):
    cache = make(tmp_path)
    os.unlink(cache.path_for(*source.args(A)))
    cache.path_for(*source.args(A))
    assert source.calls == [A, A]
    assert cache.cached() == [A]


def test_concurrent_requests_fetch_once(tmp_path, source):
    cache = make(tmp_path)
    source.delay = 0.2
    paths, errors = [], []

    def worker():
        try:
            with cache.use(*source.args(A)) as path:
                paths.append(path)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert len(paths) == 8 and len(set(paths)) == 1
    assert source.calls == [A]


def test_concurrent_fetches_of_several_images_keep_the_limit(tmp_path,
                                                             source):
    cache = make(tmp_path)
    source.delay = 0.3
    results: list[str] = []
    release = threading.Event()

    def worker(image):
        try:
            with cache.use(*source.args(image)):
                results.append('ok')
                release.wait(10)
        except exception.BitstreamCacheFull:
            results.append('full')

    threads = [threading.Thread(target=worker, args=(image,))
               for image in (A, B, C)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(results) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert sorted(results) == ['full', 'ok', 'ok']
        assert cache.size() == 200
        assert len(files(cache)) == 2
    finally:
        release.set()
        for thread in threads:
            thread.join(10)


def test_other_images_are_not_blocked_by_a_fetch(tmp_path, source):
    cache = make(tmp_path)
    source.delay = 3.0
    slow = threading.Thread(target=cache.path_for, args=source.args(A))
    slow.start()
    time.sleep(0.1)
    source.delay = 0
    started = time.monotonic()
    cache.path_for(*source.args(B))
    # Not after the slow fetch (3 s): far from it, for a busy machine.
    assert time.monotonic() - started < 2.5
    slow.join(10)
    assert sorted(cache.cached()) == sorted([A, B])


def test_fetch_failure_leaves_nothing(tmp_path, source):
    cache = make(tmp_path)
    source.fail = exception.GlanceUnavailable(reason='boom')
    with pytest.raises(exception.GlanceUnavailable):
        cache.path_for(*source.args(A))
    assert files(cache) == []
    assert cache.cached() == []
    source.fail = None
    cache.path_for(*source.args(A))
    assert files(cache) == [A]


def test_wrong_data_leave_nothing(tmp_path, source):
    cache = make(tmp_path)
    source.wrong = True
    with pytest.raises(exception.BitstreamChecksumMismatch, match=A):
        cache.path_for(*source.args(A))
    assert files(cache) == []


def test_unknown_hash_algorithm(tmp_path, source):
    cache = make(tmp_path)
    with pytest.raises(exception.BitstreamChecksumMismatch, match='crc'):
        cache.path_for(A, 'crc', '00', source.fetch(A))
    assert source.calls == []


@pytest.mark.parametrize('image_id',
                         ['../etc', '.hidden', 'a/b', '', 'x' * 300])
def test_image_ids_that_are_no_file_names(tmp_path, source, image_id):
    cache = make(tmp_path)
    with pytest.raises(exception.InvalidParameterValue):
        cache.path_for(image_id, 'sha512', '00', source.fetch(A))
    assert files(cache) == []


def test_restart_keeps_files_and_order_and_drops_temporaries(tmp_path,
                                                             source):
    cache = make(tmp_path)
    cache.path_for(*source.args(A))
    cache.path_for(*source.args(B))
    os.utime(os.path.join(cache.directory, A), (time.time() + 5,) * 2)
    for name in (bitstream_cache.TEMP_PREFIX + 'x', '.download-y'):
        open(os.path.join(cache.directory, name), 'wb').close()
    again = make(tmp_path)
    assert again.cached() == [B, A]
    assert files(again) == sorted([A, B])
    again.path_for(*source.args(C))  # evicts B
    assert files(again) == sorted([A, C])
    assert source.calls == [A, B, C]


def test_size_limit_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        make(tmp_path, limit=0)


def test_options(tmp_path):
    conf = cfg.ConfigOpts()
    default_conf.register_opts(conf)
    cache_conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    assert conf.agent.bitstream_cache_dir == '/var/lib/cyborg/bitstreams'
    assert conf.agent.bitstream_cache_size_mb == 4096
    conf.set_override('state_path', str(tmp_path))
    conf.set_override('bitstream_cache_size_mb', 2, group='agent')
    cache = bitstream_cache.BitstreamCache.from_conf(conf)
    assert cache.directory == str(tmp_path / 'bitstreams')
    assert cache.size_limit == 2 * 1024 * 1024
    ((group, opts),) = cache_conf.list_opts().items()
    assert group.name == 'agent'
    assert [o.name for o in opts] == ['bitstream_cache_dir',
                                      'bitstream_cache_size_mb']


def test_registered_on_the_global_config_and_listed():
    from cyborg import conf as cyborg_conf
    from cyborg.conf import opts

    assert 'bitstream_cache_dir' in cyborg_conf.CONF.agent
    assert 'endpoint_override' in cyborg_conf.CONF.glance
    listed = {getattr(group, 'name', group): [o.dest for o in group_opts]
              for group, group_opts in opts.list_opts()}
    assert {'enabled_drivers', 'bitstream_cache_dir',
            'bitstream_cache_size_mb'} <= set(listed['agent'])
    assert 'endpoint_override' in listed['glance']
    assert list(listed).count('agent') == 1
