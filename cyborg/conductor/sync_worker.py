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

"""Placement syncs off the RPC threads: the conductor answers first.

A write that changes a host's providers (an inventory report, a device's
status, an attribute that shapes Placement, a programmed region) records
a sync request in its own transaction (``services.sync_requested``, see
:mod:`cyborg.db.services`). Once that transaction has committed, the
writer hands the host to :meth:`SyncWorker.request`, which runs the sync
on a small thread pool (ironic's ``spawn_after`` discipline: the slow
work starts after the state it acts on is durable, and the caller does
not wait for it). The request is in the database, so a conductor that
stops between its answer and the sync loses nothing: the periodic
``conductor-placement-sync`` task of any conductor syncs every host left
pending (:meth:`SyncWorker.sync_pending_hosts`).

Requests for a host already waiting for a worker are folded into the
waiting one; a request that arrives while the host's sync runs queues
one more, so that the later change is synced too.
"""

from collections.abc import Callable
from concurrent import futures
import threading
import time

from oslo_log import log as logging

from cyborg import context as cyborg_context
from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.db import providers as providers_db
from cyborg.db import services as services_db

LOG = logging.getLogger(__name__)


class SyncWorker:
    """Syncs hosts' providers to Placement, now or on its pool.

    ``sync`` is None where the conductor has no Placement: every host
    then stays pending. ``executor`` runs the requested syncs (by
    default a pool of ``workers`` threads).
    """

    def __init__(self, sync: placement_sync.PlacementSync | None,
                 workers: int = 1,
                 executor: futures.Executor | None = None,
                 context_factory: Callable[[], object] =
                 cyborg_context.get_admin_context):
        self._sync = sync
        self._executor = executor or futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='placement-sync')
        self._context_factory = context_factory
        # host -> the future of its sync waiting for a worker.
        self._waiting: dict[str, futures.Future] = {}
        # Every sync requested and not finished.
        self._work: set[futures.Future] = set()
        # Reentrant: a synchronous executor runs the sync (which takes
        # it) inside request().
        self._lock = threading.RLock()

    def sync_host(self, context, host: str) -> bool:
        """Sync one host's providers now; False if anything is left to
        do (the host stays pending)."""
        if self._sync is None:
            return False
        try:
            return self._sync.sync_host(context, host)
        except placement_client.PlacementUnavailable as e:
            LOG.warning('Placement is unavailable (%s); the providers of %s '
                        'are synced when it is back', e, host)
            return False

    def request(self, host: str) -> futures.Future:
        """Sync ``host`` on the pool; its future answers what
        :meth:`sync_host` does (already done with a synchronous
        executor). Call it after the sync request has committed."""
        with self._lock:
            future = self._waiting.get(host)
            if future is not None:
                return future
            try:
                future = self._executor.submit(self._run, host)
            except RuntimeError:
                # Stopping: the host stays pending in the database.
                future = futures.Future()
                future.set_result(False)
                return future
            if not future.done():
                self._waiting[host] = future
                self._work.add(future)
        # Called at once when the future is done already.
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: futures.Future) -> None:
        with self._lock:
            self._work.discard(future)

    def _run(self, host: str) -> bool:
        with self._lock:
            # A request from now on is for a change this run may miss.
            self._waiting.pop(host, None)
        try:
            return self.sync_host(self._context_factory(), host)
        except Exception:
            LOG.exception('Syncing the providers of %s failed; the periodic '
                          'sync tries again', host)
            return False

    def sync_pending_hosts(self, context) -> None:
        """Retry every host whose providers are not yet in Placement."""
        for host in services_db.hosts_pending_sync(context):
            self.sync_host(context, host)

    def sync_adopted_hosts(self, context) -> None:
        """Sync every host with a provider taken over from upstream that
        waits for its allocations to go ([conductor] adoption_interval)."""
        for host in providers_db.hosts_with_adopted(context):
            self.sync_host(context, host)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the requested syncs;
        whether none is left."""
        with self._lock:
            pending = list(self._work)
        _done, left = futures.wait(pending, timeout=timeout)
        return not left

    def stop(self) -> None:
        """Start no more syncs (those waiting are dropped: the database
        keeps their hosts pending); the one in flight finishes."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def wait_synced(context, host: str, timeout: float,
                interval: float = 0.05) -> bool:
    """Wait up to ``timeout`` seconds for ``host``'s providers to be all
    in Placement (by any conductor); whether they are. For a caller that
    must see them after a report, as the all-in-one before it opens its
    API."""
    deadline = time.monotonic() + timeout
    while services_db.sync_pending(context, host):
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
