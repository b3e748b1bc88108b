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

"""A TCP proxy on the loopback that can stop forwarding (tests only).

::

    with HoldingProxy(rabbitmq.port) as proxy:
        url = 'rabbit://guest:guest@127.0.0.1:%d/' % proxy.port
        ...
        proxy.hold()     # what clients send from now on is kept here
        proxy.held       # bytes kept so far

Once held, nothing a client sends reaches the server any more (what the
server sends still reaches the clients): a publisher waiting for its
broker's confirmation then waits for good, at a point the test knows.
"""

from collections.abc import Callable
import socket
import threading

from tests.functional import servers


def pump(source: socket.socket, sink: socket.socket,
         drop: Callable[[bytes], bool] | None = None) -> None:
    """Copy ``source`` to ``sink`` until either side is gone, then shut
    both down (one side gone: so is the other). ``drop(data)`` true:
    that data is not forwarded."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            if drop is not None and drop(data):
                continue
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HoldingProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = servers.free_port()
        self.held = 0
        self._holding = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        # Per connection: set once it is held.
        self._connections: list[threading.Event] = []
        self._listener = socket.create_server((servers.LOOPBACK, self.port))
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name='holding-proxy')

    def hold(self) -> None:
        """Forward nothing more from the clients connected now, for good,
        nor from those that connect until :meth:`release`."""
        self._holding.set()
        with self._lock:
            for held in self._connections:
                held.set()

    def release(self) -> None:
        """Forward what clients that connect from now on send (those held
        stay held: what they sent is never forwarded)."""
        self._holding.clear()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _address = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(
                (servers.LOOPBACK, self.target_port))
            held = threading.Event()
            if self._holding.is_set():
                held.set()
            with self._lock:
                self._sockets += [client, upstream]
                self._connections.append(held)
            for source, sink, outgoing in ((client, upstream, held),
                                           (upstream, client, None)):
                threading.Thread(target=self._pump,
                                 args=(source, sink, outgoing),
                                 daemon=True).start()

    def _pump(self, source, sink, held: threading.Event | None) -> None:
        """Copy ``source`` to ``sink``; with ``held`` (client to server)
        drop instead once it is set (and drop what was held when either
        side goes)."""
        def drop(data: bytes) -> bool:
            if held is None or not held.is_set():
                return False
            with self._lock:
                self.held += len(data)
            return True
        pump(source, sink, drop)

    def __enter__(self) -> 'HoldingProxy':
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
