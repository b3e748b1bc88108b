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

"""A short-lived cache of device profiles looked up by name.

Nova reads a profile by name for every instance it boots. A cached copy
may be outdated (the profile updated, disabled or deleted since): an
entry lives ``ttl`` seconds, only found profiles are cached (a newly
created profile is visible at once), and a create, update or delete
through this API process drops the whole cache. In a deployment with
several API processes, a profile changed or deleted through another
process may still be returned as it was for up to ``ttl`` seconds, the
same outcome as a read racing the change. ``ttl = 0`` disables the
cache.

The active scheduling taints (what the answer to Nova adds forbidden
traits for, see :mod:`cyborg.domain.tolerations`) are cached the same
way, as one entry: a new taint reaches the answers of an API process
within ``ttl`` seconds, and a profile read costs at most one query for
them.

The alternative each group with ordered alternatives resolves to (see
:mod:`cyborg.domain.alternatives`) is cached for ``probe_ttl`` seconds,
keyed by the group's options as probed (forbidden taint traits
included): Nova reads the profile several times for one boot, and a
burst of boots costs one probe of Placement per group every
``probe_ttl`` seconds rather than one per read. Within that time a read
may name an alternative whose last free unit was just taken (the boot
then fails as a plain group would); ``probe_ttl = 0`` probes at every
read.
"""

from collections.abc import Callable
from collections.abc import Mapping
import threading
import time
from typing import Any


class ProfileCache:

    def __init__(self, ttl: float, max_entries: int = 1024,
                 probe_ttl: float = 0.0):
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}
        self._probe_ttl = probe_ttl
        self._chosen: dict[str, tuple[float, int]] = {}
        self._taints: tuple[float, Any] | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    def get(self, name: str) -> dict[str, Any] | None:
        entry = self._entries.get(name)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, profile: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with self._lock:
            if len(self._entries) >= self._max_entries:
                self._entries = {}
            self._entries[profile['name']] = (time.monotonic() + self._ttl,
                                              profile)

    def active_taints(self, load: Callable[[], Any]) -> Any:
        """What ``load()`` (the active scheduling taints) answered within
        the last ``ttl`` seconds, or its answer now."""
        entry = self._taints
        if entry is not None and entry[0] >= time.monotonic():
            return entry[1]
        value = load()
        if self.enabled:
            self._taints = (time.monotonic() + self._ttl, value)
        return value

    def chosen_alternatives(
            self, options: Mapping[str, list[dict[str, Any]]],
            probe: Callable[[list[list[dict[str, Any]]]], list[int]]
    ) -> dict[str, int]:
        """The alternative chosen for each group of ``options`` (its
        cache key -> its options as probed): cached within the last
        ``probe_ttl`` seconds, or what one ``probe`` of those not cached
        (a list of their options) answers, in their order."""
        now = time.monotonic()
        chosen, missing = {}, []
        for key in options:
            entry = self._chosen.get(key)
            if entry is not None and entry[0] >= now:
                chosen[key] = entry[1]
            else:
                missing.append(key)
        if not missing:
            return chosen
        answers = probe([options[key] for key in missing])
        expires = time.monotonic() + self._probe_ttl
        with self._lock:
            if len(self._chosen) + len(missing) > self._max_entries:
                self._chosen = {}
            for key, index in zip(missing, answers, strict=True):
                chosen[key] = index
                if self._probe_ttl > 0:
                    self._chosen[key] = (expires, index)
        return chosen

    def clear(self) -> None:
        with self._lock:
            self._entries = {}
