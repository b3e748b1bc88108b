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

"""Running the RPC services: start, heartbeat, stop gracefully.

The signals that stop them are handled in :mod:`cyborg.common.signals`.
"""

import threading
import time
from collections.abc import Callable, Iterable

from oslo_log import log as logging

from cyborg.common import rpc

LOG = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``fn`` every ``interval`` seconds in a daemon thread.

    The first run happens at once when ``run_immediately`` is true. A
    failing run is logged and does not stop later runs. A run that returns
    a number of seconds is followed by the next one after that delay
    instead (e.g. to retry sooner). ``first_run_done`` is set once the
    first run has finished, whatever its outcome.
    """

    def __init__(self, name: str, fn: Callable[[], None], interval: float,
                 run_immediately: bool = True):
        self.name = name
        self._fn = fn
        self._interval = interval
        self._run_immediately = run_immediately
        self._stop = threading.Event()
        self.first_run_done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name,
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        if not self._run_immediately and self._stop.wait(self._interval):
            return
        while True:
            delay = self._interval
            try:
                result = self._fn()
            except Exception:
                LOG.exception('Periodic task %s failed', self.name)
            else:
                if isinstance(result, (int, float)) and not isinstance(
                        result, bool):
                    delay = result
            finally:
                self.first_run_done.set()
            if self._stop.wait(delay):
                return


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
        deadline = _Deadline(timeout)
        return all(task.first_run_done.wait(deadline.left())
                   for task in self._tasks)

    def stop(self, timeout: float | None = None) -> bool:
        """Take no more requests, finish those in flight and the periodic
        tasks' runs, then ``on_stop``'s work, within ``timeout`` seconds
        (None: no limit); whether everything finished in time."""
        deadline = _Deadline(timeout)
        for task in self._tasks:
            task.stop()
        self._server.stop()
        # Requests being handled finish (an agent's preparation of an
        # attach handle, a conductor's bind call).
        self._server.wait()
        for task in self._tasks:
            task.wait(timeout=deadline.left(10))
        finished = True
        if self._on_stop is not None:
            finished = self._on_stop(deadline.left()) is not False
        LOG.info('Stopped %s on host %s', self.topic, self.host)
        return finished


class _Deadline:
    """Seconds left until ``timeout`` seconds after its creation."""

    def __init__(self, timeout: float | None):
        self._end = None if timeout is None else time.monotonic() + timeout

    def left(self, cap: float | None = None) -> float | None:
        """Seconds left (never below 0), at most ``cap``; None: no limit."""
        if self._end is None:
            return cap
        left = max(0.0, self._end - time.monotonic())
        return left if cap is None else min(left, cap)
