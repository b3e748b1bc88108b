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
:mod:`cyborg.domain.alternatives`) is cached keyed by the group's
options as probed (forbidden taint traits included). A choice probed
less than ``probe_ttl`` seconds ago is answered as it is: Nova reads the
profile several times for one boot, and a burst of boots costs one probe
of Placement per group every ``probe_ttl`` seconds rather than one per
read. A choice older than that but probed less than ``probe_max_stale``
seconds ago is answered at once too, and one probe of its group starts
in the background (one at a time per group) to replace it: the read of a
busy profile never waits for Placement, whose answer for a profile of
several alternatives at fleet size takes far longer than a read may
(``tools/bench/profile_alternatives.py``). Only a group not probed
within ``probe_max_stale`` seconds (the first read, or the first after a
quiet spell) waits for a probe. So a read answers a choice at most
``probe_max_stale`` seconds old, and, under a steady flow of reads, at
most ``probe_ttl`` plus one probe's duration old. Within that time a
read may name an alternative whose last free unit was just taken (the
boot then fails as a plain group would) or still name a later
alternative after an earlier one was freed (the boot gets the later
one); ``probe_ttl = probe_max_stale = 0`` probes at every read.
"""

from collections.abc import Callable
from collections.abc import Mapping
import threading
import time
from typing import Any

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# Probes the options of groups (a list of each group's options) and
# answers the index chosen for each, in their order.
Probe = Callable[[list[list[dict[str, Any]]]], list[int]]


def _start_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name='alternatives-probe',
                     daemon=True).start()


class ProfileCache:

    def __init__(self, ttl: float, max_entries: int = 1024,
                 probe_ttl: float = 0.0, probe_max_stale: float = 0.0,
                 spawn: Callable[[Callable[[], None]], None] = _start_thread):
        """``spawn(work)`` runs ``work`` in the background (a new daemon
        thread by default): the refresh of choices older than
        ``probe_ttl``."""
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}
        self._probe_ttl = probe_ttl
        # A stale choice is never kept longer than a fresh one.
        self._probe_max_stale = max(probe_max_stale, probe_ttl)
        self._spawn = spawn
        # Group key -> (when its probe began, the index it chose).
        self._chosen: dict[str, tuple[float, int]] = {}
        # Group keys whose background probe is under way.
        self._refreshing: set[str] = set()
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
            probe: Probe) -> dict[str, int]:
        """The alternative chosen for each group of ``options`` (its
        cache key -> its options as probed): as probed within the last
        ``probe_max_stale`` seconds (those probed more than ``probe_ttl``
        seconds ago probed again in the background), or what one
        ``probe`` of the others (a list of their options) answers now, in
        their order. ``probe`` may be called from another thread."""
        now = time.monotonic()
        chosen, stale, missing = {}, [], []
        for key in options:
            entry = self._chosen.get(key)
            age = None if entry is None else now - entry[0]
            if entry is None or age > self._probe_max_stale:
                missing.append(key)
                continue
            chosen[key] = entry[1]
            if age > self._probe_ttl:
                stale.append(key)
        if stale:
            self._refresh({key: options[key] for key in stale}, probe)
        if missing:
            chosen.update(self._probe(
                {key: options[key] for key in missing}, probe))
        return chosen

    def _probe(self, options: Mapping[str, list[dict[str, Any]]],
               probe: Probe) -> dict[str, int]:
        """One ``probe`` of ``options``; its answers, kept."""
        begun = time.monotonic()
        answers = dict(zip(options, probe(list(options.values())),
                           strict=True))
        if self._probe_max_stale > 0:
            with self._lock:
                if len(self._chosen) + len(answers) > self._max_entries:
                    self._chosen = {}
                for key, index in answers.items():
                    # Aged from when the probe began: Placement answered
                    # for a moment between then and now.
                    self._chosen[key] = (begun, index)
        return answers

    def _refresh(self, options: Mapping[str, list[dict[str, Any]]],
                 probe: Probe) -> None:
        """Probe ``options`` in the background, but none whose probe is
        already under way."""
        with self._lock:
            keys = [key for key in options if key not in self._refreshing]
            self._refreshing.update(keys)
        if not keys:
            return

        def work() -> None:
            try:
                self._probe({key: options[key] for key in keys}, probe)
            except Exception as e:
                # The stale choice stays until probe_max_stale, then a
                # read probes (and fails or logs) itself.
                LOG.debug('Background probe of alternatives failed: %s', e)
            finally:
                with self._lock:
                    self._refreshing.difference_update(keys)

        try:
            self._spawn(work)
        except Exception:
            with self._lock:
                self._refreshing.difference_update(keys)
            raise

    def clear(self) -> None:
        with self._lock:
            self._entries = {}
