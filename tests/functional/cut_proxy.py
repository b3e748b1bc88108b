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

"""A TCP proxy on the loopback that a test can take down (tests only).

::

    with CutProxy(postgres.port) as proxy:
        url = postgres.url_for(name).replace(str(postgres.port),
                                             str(proxy.port))
        ...
        proxy.down()   # every connection cut, new ones refused
        proxy.up()     # new connections forwarded again, same port

To its clients the server behind a proxy that is down looks like one
that crashed or failed over: connections reset, nothing listening. The
server itself keeps running (other tests of the session use it).
"""

from __future__ import annotations

import socket
import threading

from tests.functional import servers
from tests.functional import tcp_proxy


class CutProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port`` while
    up."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = servers.free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    # Up and down ----------------------------------------------------------

    def up(self) -> None:
        """Listen (again) on :attr:`port` and forward what connects."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # The port was ours a moment ago: its closed connections may
            # linger in TIME_WAIT.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((servers.LOOPBACK, self.port))
            listener.listen(128)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True,
                         name='cut-proxy-%d' % self.port).start()

    def down(self) -> None:
        """Stop listening and reset every forwarded connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        if listener is not None:
            listener.close()
        for sock in sockets:
            _close(sock)

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    # Forwarding -----------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                upstream = socket.create_connection(
                    (servers.LOOPBACK, self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:
                    # Went down while this one connected.
                    _close(client)
                    _close(upstream)
                    return
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink),
                                 daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            tcp_proxy.pump(source, sink)
        finally:
            with self._lock:
                for sock in (source, sink):
                    if sock in self._sockets:
                        self._sockets.remove(sock)
                        sock.close()

    def __enter__(self) -> CutProxy:
        self.up()
        return self

    def __exit__(self, *exc_info) -> None:
        self.down()


def _close(sock: socket.socket) -> None:
    """Cut ``sock``: the peer sees the connection fail at once."""
    try:
        # SO_LINGER 0: the connection is reset, not closed in order.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        b'\x01\x00\x00\x00\x00\x00\x00\x00')
    except OSError:
        pass
    try:
        # Before close(): a pump thread blocked in recv() on this socket
        # keeps it open after close() alone, and the peer (a database
        # backend holding row locks, a client waiting for an answer)
        # would never hear of it.
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
