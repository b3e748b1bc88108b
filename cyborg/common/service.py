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

"""Running the RPC services: start, periodic tasks, stop gracefully.

Periodic tasks run on futurist's periodics: each :class:`PeriodicTask` is
a ``futurist.periodics.PeriodicWorker`` holding one ``@periodic``
callable, with futurist's default synchronous executor. The worker, and
so each run, is in a daemon thread named after the task
(``agent-discovery``, ``conductor-heartbeat``: the names a Guru Meditation
report shows). A daemon thread, not a futurist thread pool: the pool's
threads are joined at interpreter exit, so a run stuck in an RPC call
would hold a stopped process for as long as the call waits.

What futurist does not offer is kept here, small:

* a run may return a number of seconds after which the next run starts
  instead of the interval (to retry sooner): a schedule strategy that
  :class:`_Worker` adds to ``BUILT_IN_STRATEGIES``, the public table
  futurist's ``schedule_strategy`` argument selects from;
* ``first_run_done``, set once the first run has finished whatever its
  outcome (the all-in-one opens its API after the agent's first report).

The signals that stop the services are handled in
:mod:`cyborg.common.signals`.
"""

from collections.abc import Callable
from collections.abc import Iterable
import threading
from typing import Any

from futurist import periodics
from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg.common import rpc

LOG = logging.getLogger(__name__)

#: The strategy of :class:`_Worker` that schedules the next run.
_STRATEGY = 'cyborg_requested_delay'


def _next_run(cb: Any, started_at: float, finished_at: float,
              metrics: dict) -> float:
    """The next run: the delay the task asked for, after the last run
    finished (futurist's ``last_finished`` with a variable spacing)."""
    return finished_at + cb.cyborg_task.next_delay


def _first_run(cb: Any, now: float) -> float:
    """The first run of a task that does not run at once."""
    return now + cb.cyborg_task.interval


class _Worker(periodics.PeriodicWorker):
    """futurist's worker, with the schedule strategy of PeriodicTask."""

    BUILT_IN_STRATEGIES = dict(periodics.PeriodicWorker.BUILT_IN_STRATEGIES,
                               **{_STRATEGY: (_next_run, _first_run)})


class PeriodicTask:
    """Runs ``fn`` every ``interval`` seconds (see the module).

    The first run happens at once when ``run_immediately`` is true. A
    failing run is logged and does not stop later runs. A run that returns
    a number of seconds is followed by the next one after that delay
    instead (e.g. to retry sooner). ``first_run_done`` is set once the
    first run has finished, whatever its outcome.
    """

    def __init__(self, name: str, fn: Callable[[], Any], interval: float,
                 run_immediately: bool = True):
        self.name = name
        self.interval = interval
        #: Seconds from the end of the last run to the next one.
        self.next_delay = interval
        self.first_run_done = threading.Event()
        self._fn = fn

        @periodics.periodic(interval, run_immediately=run_immediately)
        def run():
            return self._run()

        # What the schedule strategy reads (futurist hands it ``run``).
        run.cyborg_task = self
        self._worker = _Worker([(run, None, None)],
                               schedule_strategy=_STRATEGY,
                               on_failure=self._on_failure)
        self._thread = threading.Thread(target=self._worker.start,
                                        name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No run starts any more; the run in flight goes on, and this
        does not wait for it.

        futurist's worker holds its lock while a run is in flight in its
        thread (the synchronous executor), and ``PeriodicWorker.stop``
        takes that lock: it is called from a thread of its own.
        """
        threading.Thread(target=self._worker.stop, daemon=True,
                         name='%s-stop' % self.name).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the run in flight after
        :meth:`stop`; whether none is left."""
        if self._thread.ident is None:
            return True  # never started
        return self._worker.wait(timeout)

    def _run(self) -> Any:
        self.next_delay = self.interval
        try:
            result = self._fn()
        finally:
            self.first_run_done.set()
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            self.next_delay = result
        return result

    def _on_failure(self, cb, kind, spacing, exc_info, traceback=None):
        LOG.error('Periodic task %s failed', self.name, exc_info=exc_info)


class RPCService:
    """An RPC server for one endpoint plus the periodic tasks beside it.

    ``on_stop`` receives the seconds left of the grace period (None: no
    limit) and answers whether its work in flight finished (None: yes).
    """

    def __init__(self, transport, topic: str, host: str, endpoint: object,
                 periodic_tasks: Iterable[PeriodicTask] = (),
                 on_start: Callable[[], None] | None = None,
                 on_stop: Callable[[float | None], bool | None]
                 | None = None):
        self.topic = topic
        self.host = host
        self._server = rpc.get_server(transport, topic, host, endpoint)
        self._tasks = list(periodic_tasks)
        self._on_start = on_start
        self._on_stop = on_stop

    def start(self) -> None:
        if self._on_start is not None:
            self._on_start()
        self._server.start()
        for task in self._tasks:
            task.start()
        LOG.info('Started %s on host %s', self.topic, self.host)

    def wait_first_runs(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every periodic task's first
        run to finish; whether they all did."""
        deadline = _deadline(timeout)
        return all(task.first_run_done.wait(_left(deadline))
                   for task in self._tasks)

    def stop(self, timeout: float | None = None) -> bool:
        """Take no more requests, finish those in flight and the periodic
        tasks' runs, then ``on_stop``'s work, within ``timeout`` seconds
        (None: no limit); whether everything finished in time."""
        deadline = _deadline(timeout)
        for task in self._tasks:
            task.stop()
        self._server.stop()
        # Requests being handled finish (an agent's preparation of an
        # attach handle, a conductor's bind call).
        self._server.wait()
        for task in self._tasks:
            task.wait(timeout=_left(deadline, 10))
        finished = True
        if self._on_stop is not None:
            finished = self._on_stop(_left(deadline)) is not False
        LOG.info('Stopped %s on host %s', self.topic, self.host)
        return finished


def _deadline(timeout: float | None) -> timeutils.StopWatch:
    """A running stop watch of ``timeout`` seconds (None: no limit)."""
    return timeutils.StopWatch(duration=timeout).start()


def _left(deadline: timeutils.StopWatch, cap: float | None = None
          ) -> float | None:
    """Seconds left (never below 0), at most ``cap``; None: no limit."""
    left = deadline.leftover(return_none=True)
    if left is None:
        return cap
    return left if cap is None else min(left, cap)
