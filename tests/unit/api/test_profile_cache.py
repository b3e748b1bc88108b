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

from unittest import mock

from cyborg.api import profile_cache


def test_entries_expire():
    cache = profile_cache.ProfileCache(ttl=2)
    with mock.patch('time.monotonic', return_value=100.0):
        cache.put({'name': 'a'})
        assert cache.get('a') == {'name': 'a'}
    with mock.patch('time.monotonic', return_value=102.5):
        assert cache.get('a') is None


def test_clear_and_disabled():
    cache = profile_cache.ProfileCache(ttl=5)
    cache.put({'name': 'a'})
    cache.clear()
    assert cache.get('a') is None
    disabled = profile_cache.ProfileCache(ttl=0)
    disabled.put({'name': 'a'})
    assert disabled.get('a') is None


def test_size_is_bounded():
    cache = profile_cache.ProfileCache(ttl=5, max_entries=2)
    for name in 'abc':
        cache.put({'name': name})
    assert cache.get('c') == {'name': 'c'}
    assert cache.get('a') is None
