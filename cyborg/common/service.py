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

"""Running the RPC services: start, heartbeat, stop on a signal."""

import signal
import threading
from collections.abc import Callable, Iterable

from oslo_log import log as logging

from cyborg.common import rpc

LOG = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``fn`` every ``interval`` seconds in a daemon thread.

    The first run happens at once when ``run_immediately`` is true. A
    failing run is logged and does not stop later runs. A run that returns
    a number of seconds is followed by the next one after that delay
    instead (e.g. to retry sooner).
    """

    def __init__(self, name: str, fn: Callable[[], None], interval: float,
                 run_immediately: bool = True):
        self.name = name
        self._fn = fn
        self._interval = interval
        self._run_immediately = run_immediately
        self._stop = threading.Event()
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
            if self._stop.wait(delay):
                return


class RPCService:
    """An RPC server for one endpoint plus the periodic tasks beside it."""

    def __init__(self, transport, topic: str, host: str, endpoint: object,
                 periodic_tasks: Iterable[PeriodicTask] = (),
                 on_start: Callable[[], None] | None = None,
                 on_stop: Callable[[], None] | None = None):
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

    def stop(self) -> None:
        for task in self._tasks:
            task.stop()
        self._server.stop()
        self._server.wait()
        for task in self._tasks:
            task.wait(timeout=10)
        if self._on_stop is not None:
            self._on_stop()
        LOG.info('Stopped %s on host %s', self.topic, self.host)


def wait_for_signal(signals=(signal.SIGTERM, signal.SIGINT)) -> int:
    """Block the main thread until one of ``signals`` arrives."""
    received = threading.Event()
    caught: list[int] = []

    def handler(signum, _frame):
        caught.append(signum)
        received.set()

    for signum in signals:
        signal.signal(signum, handler)
    while not received.wait(1.0):
        pass
    return caught[0]
