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


def _probe(answers, calls):
    def probe(candidates):
        calls.append(candidates)
        return [answers[str(c)] for c in candidates]
    return probe


def test_chosen_alternatives_probe_only_what_is_not_cached():
    cache = profile_cache.ProfileCache(ttl=5, probe_ttl=1)
    calls = []
    probe = _probe({"['a']": 1, "['b']": 0}, calls)
    with mock.patch('time.monotonic', return_value=100.0):
        assert cache.chosen_alternatives({'ka': ['a']}, probe) == {'ka': 1}
        # One probe for every group not cached, in their order.
        assert cache.chosen_alternatives({'ka': ['a'], 'kb': ['b']},
                                         probe) == {'ka': 1, 'kb': 0}
    assert calls == [[['a']], [['b']]]
    with mock.patch('time.monotonic', return_value=101.5):
        cache.chosen_alternatives({'ka': ['a']}, probe)
    assert calls[-1] == [['a']]


def test_chosen_alternatives_without_a_probe_ttl_probe_every_time():
    cache = profile_cache.ProfileCache(ttl=5)
    calls = []
    probe = _probe({"['a']": 1}, calls)
    for _ in range(2):
        assert cache.chosen_alternatives({'ka': ['a']}, probe) == {'ka': 1}
    assert len(calls) == 2


def test_chosen_alternatives_are_bounded():
    cache = profile_cache.ProfileCache(ttl=5, max_entries=2, probe_ttl=60)
    calls = []
    probe = _probe({"['a']": 0, "['b']": 0, "['c']": 0}, calls)
    for key in 'abc':
        cache.chosen_alternatives({key: [key]}, probe)
    cache.chosen_alternatives({'c': ['c']}, probe)
    assert len(calls) == 3
    cache.chosen_alternatives({'a': ['a']}, probe)
    assert len(calls) == 4


class _Spawned:
    """Background work kept to run when the test says."""

    def __init__(self):
        self.work = []

    def __call__(self, work):
        self.work.append(work)

    def run(self):
        work, self.work = self.work, []
        for item in work:
            item()


def test_stale_choices_are_answered_and_probed_in_the_background():
    spawned = _Spawned()
    cache = profile_cache.ProfileCache(ttl=5, probe_ttl=1, probe_max_stale=10,
                                       spawn=spawned)
    answers = {"['a']": 1}
    calls = []
    probe = _probe(answers, calls)
    with mock.patch('time.monotonic', return_value=100.0):
        assert cache.chosen_alternatives({'ka': ['a']}, probe) == {'ka': 1}
    answers["['a']"] = 0
    with mock.patch('time.monotonic', return_value=105.0):
        # Stale: answered as it was, one probe started for any number of
        # reads while it runs.
        for _ in range(3):
            assert cache.chosen_alternatives({'ka': ['a']},
                                             probe) == {'ka': 1}
        assert len(spawned.work) == 1 and len(calls) == 1
        spawned.run()
        assert calls[-1] == [['a']]
        assert cache.chosen_alternatives({'ka': ['a']}, probe) == {'ka': 0}
        assert spawned.work == []
    answers["['a']"] = 1
    with mock.patch('time.monotonic', return_value=115.5):
        # Older than probe_max_stale: the read waits for its probe.
        assert cache.chosen_alternatives({'ka': ['a']}, probe) == {'ka': 1}
    assert spawned.work == [] and len(calls) == 3


def test_a_failed_background_probe_keeps_the_stale_choice():
    spawned = _Spawned()
    cache = profile_cache.ProfileCache(ttl=5, probe_ttl=1, probe_max_stale=10,
                                       spawn=spawned)
    with mock.patch('time.monotonic', return_value=100.0):
        cache.chosen_alternatives({'ka': ['a']}, lambda c: [1])

    def failing(candidates):
        raise RuntimeError('no conductor')
    with mock.patch('time.monotonic', return_value=102.0):
        assert cache.chosen_alternatives({'ka': ['a']}, failing) == {'ka': 1}
        spawned.run()
        # The next read starts a new one.
        assert cache.chosen_alternatives({'ka': ['a']}, failing) == {'ka': 1}
        assert len(spawned.work) == 1


def test_max_stale_is_never_below_the_probe_ttl():
    spawned = _Spawned()
    cache = profile_cache.ProfileCache(ttl=5, probe_ttl=2, spawn=spawned)
    calls = []
    probe = _probe({"['a']": 1}, calls)
    with mock.patch('time.monotonic', return_value=100.0):
        cache.chosen_alternatives({'ka': ['a']}, probe)
    with mock.patch('time.monotonic', return_value=101.5):
        cache.chosen_alternatives({'ka': ['a']}, probe)
    with mock.patch('time.monotonic', return_value=102.5):
        cache.chosen_alternatives({'ka': ['a']}, probe)
    assert len(calls) == 2 and spawned.work == []
