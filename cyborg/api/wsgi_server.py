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

"""A small threaded WSGI server for the standalone API and the all-in-one.

Production deployments run cyborg.wsgi.api:application under uWSGI,
gunicorn or mod_wsgi instead, behind a proxy that bounds slow clients.

Slow or hostile clients cannot hold this server: a connection must send
its request line and headers within ``client_timeout`` seconds (a client
trickling them byte by byte is cut off), its body within as long once
the application reads it, every read and write of the connection waits
at most as long, and at most
``max_connections`` connections are served at once (a thread each);
beyond that a new connection is answered 503 at once. No ``Server``
header names the software or its version.

What the server itself refuses (a request line or headers too long or
malformed, an HTTP version it does not speak, no free connection) is
answered as the API answers: the JSON fault body, a request id and the
version headers, with one INFO line in the log.

Why not cheroot (the server ironic runs): measured with cheroot 11.1.2,
``numthreads = max`` at the limit, the scenarios of
``tests/unit/api/test_wsgi_server.py`` and of
``tests/functional/test_slow_clients.py``, cheroot holds neither limit.
Its ``timeout`` bounds each read, not the whole head or body: a header
trickled at one byte per 0.1 s held a thread for the whole 10.5 s of the
trickle with a 0.6 s timeout (this server: cut off after 1.1 s, the
watchdog looking twice a second), and a body trickled so was read whole
after 10 s (this server: cut off after 1.0 s). Connections beyond its
threads wait in its queue or are closed without an answer: 60 half-sent
requests against 10 threads and a 1 s timeout got no 503 and the last
ended after 9.2 s (this server: 50 answered 503 at once, the other 10
cut off, the last after 1.0 s); with ``accepted_queue_size`` 1 five got
a 503 and the last ended after 27 s. Its own refusals are plain text,
with a ``Server: Cheroot/<version>`` header, and an unknown HTTP version
gets a 505. Holding these limits would take subclasses of its request
and connection classes, which are not its public API.
"""

import http
import http.client
import socket
import socketserver
import sys
import threading
import time
import uuid
from wsgiref import simple_server

from oslo_log import log as logging

from cyborg.api import errors
from cyborg.api import microversion
from cyborg.conf import api as api_conf

LOG = logging.getLogger(__name__)

#: The longest request line (method, target and version) read.
MAX_REQUEST_LINE = 65536


def fault_response(status: int, message: str,
                   extra_headers: tuple = ()) -> bytes:
    """A whole HTTP/1.0 response with the API's fault body, a request id
    and the version headers; the connection closes after it."""
    body = errors.fault_body(status, message)
    headers = [('Content-Type', errors.JSON),
               ('Content-Length', str(len(body))),
               ('Connection', 'close'),
               ('x-openstack-request-id', 'req-%s' % uuid.uuid4())]
    headers += microversion.response_headers(microversion.MIN_VERSION)
    headers += list(extra_headers)
    head = ['HTTP/1.0 %d %s' % (status, errors.reason(status))]
    head += ['%s: %s' % header for header in headers]
    return ('\r\n'.join(head) + '\r\n\r\n').encode('latin-1') + body


class _Watchdog:
    """Shuts connections whose request head is not in by its deadline."""

    def __init__(self, interval: float = 0.5):
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run,
                                        name='wsgi-watchdog', daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def watch(self, connection: socket.socket, seconds: float) -> None:
        with self._lock:
            self._deadlines[connection] = time.monotonic() + seconds

    def forget(self, connection: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(connection, None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = time.monotonic()
            with self._lock:
                late = [c for c, d in self._deadlines.items() if d <= now]
                for connection in late:
                    del self._deadlines[connection]
            for connection in late:
                LOG.debug('Closing a connection whose request took longer '
                          'than the client timeout to arrive')
                try:
                    # The handler's blocked read returns end of file.
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _TimedBody:
    """``wsgi.input``: the body must arrive within the client timeout,
    counted from the application's first read of it. A client trickling
    it, each byte within the timeout of a read, is cut off as one
    trickling its headers is; the application reads a short body."""

    def __init__(self, stream, watchdog: _Watchdog,
                 connection: socket.socket, seconds: float):
        self._stream = stream
        self._watchdog = watchdog
        self._connection = connection
        self._seconds = seconds
        self._deadline: float | None = None

    def _timed(self, method, *args):
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self._seconds
        self._watchdog.watch(self._connection, max(self._deadline - now, 0))
        try:
            return method(*args)
        finally:
            # Between reads the time is the application's.
            self._watchdog.forget(self._connection)

    def read(self, *args):
        return self._timed(self._stream.read, *args)

    def readline(self, *args):
        return self._timed(self._stream.readline, *args)

    def readlines(self, *args):
        return self._timed(self._stream.readlines, *args)

    def __iter__(self):
        return iter(self.readline, b'')


class _ServerHandler(simple_server.ServerHandler):
    # No Server header: it would name the software and its version.
    server_software = None


class _Handler(simple_server.WSGIRequestHandler):
    """One request per connection (HTTP/1.0), logged at debug level."""

    def setup(self):
        # StreamRequestHandler applies it to every read and write.
        self.timeout = self.server.client_timeout
        super().setup()

    def send_error(self, code, message=None, explain=None):
        """The server's own refusals (400, 414, 431, 505) in the API's
        format. An HTTP version this server does not speak is the
        client's error: 400, as every other malformed request."""
        code = int(code)
        if code >= 500 and code != 503:
            code = 400
        if code == http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            message = ('Request header fields too large (at most %d bytes '
                       'each, %d headers)' % (http.client._MAXLINE,
                                              http.client._MAXHEADERS))
        elif code == http.HTTPStatus.REQUEST_URI_TOO_LONG:
            message = 'Request line longer than %d bytes' % MAX_REQUEST_LINE
        message = (message or errors.reason(code))[:200]
        LOG.info('Refused a request from %s: %d %s', self.address_string(),
                 code, errors.loggable(message))
        self.close_connection = True
        # Even to a request without a version (HTTP/0.9): a status line.
        self.request_version = 'HTTP/1.0'
        try:
            self.wfile.write(fault_response(code, message))
        except OSError:
            pass

    def log_message(self, format, *args):
        LOG.debug('%s - %s', self.address_string(), format % args)

    def handle(self):
        watchdog = self.server.watchdog
        watchdog.watch(self.connection, self.server.client_timeout)
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline = self.request_version = self.command = ''
                self.send_error(414)
                return
            if not self.parse_request():
                return
        finally:
            # The application's time is not the client's.
            watchdog.forget(self.connection)
        body = _TimedBody(self.rfile, watchdog, self.connection,
                          self.server.client_timeout)
        handler = _ServerHandler(body, self.wfile, self.get_stderr(),
                                 self.get_environ(), multithread=False)
        handler.request_handler = self
        handler.run(self.server.get_app())


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler, client_timeout: float,
                 max_connections: int):
        self.client_timeout = client_timeout
        self.watchdog = _Watchdog()
        self._max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        # Connections being served, for drain().
        self._active = 0
        self._idle = threading.Condition()
        super().__init__(address, handler)

    def server_bind(self):
        super().server_bind()
        # SERVER_NAME, which the API's links are built from: the address
        # this server listens on, not the reverse lookup of it (nor the
        # client's Host header); a wildcard address gives this host's name.
        host = self.server_address[0]
        if host not in ('0.0.0.0', '::', ''):
            self.server_name = host
            self.setup_environ()

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            LOG.warning('Refusing a connection from %s: all %s connection '
                        'slots are in use', client_address[0],
                        self._max_connections)
            self._refuse(request)
            return
        self._count(1)
        try:
            super().process_request(request, client_address)
        except Exception:
            self._count(-1)
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._count(-1)
            self._slots.release()

    def _count(self, change: int) -> None:
        with self._idle:
            self._active += change
            if not self._active:
                self._idle.notify_all()

    def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the connections being
        served to end; how many are left."""
        with self._idle:
            self._idle.wait_for(lambda: not self._active, timeout)
            return self._active

    def _refuse(self, request) -> None:
        try:
            # A few hundred bytes: the socket buffer takes them at once.
            request.settimeout(1.0)
            request.sendall(fault_response(
                503, 'Too many connections; retry later.',
                (('Retry-After', '1'),)))
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], OSError):
            # A client that went away or was too slow: no server error.
            LOG.debug('Connection from %s ended early', client_address[0],
                      exc_info=True)
        else:
            LOG.exception('Error serving a connection from %s',
                          client_address[0])


class CannotListen(Exception):
    """The server cannot listen on its address (in use, not this
    host's, or a privileged port); the message names the address."""

    def __init__(self, host: str, port: int, error: OSError):
        self.host = host
        self.port = port
        address = '[%s]' % host if ':' in host else host
        super().__init__('cannot listen on %s:%d: %s' % (
            address, port, error.strerror or error))


class WSGIServer:
    """Serves ``app`` on ``host``:``port`` in a background thread.

    The socket is bound here, so that a command can claim its ports
    before it starts anything; ``app`` may then be given later
    (:meth:`set_app`), before :meth:`start`. Raises
    :class:`CannotListen` when the address cannot be bound.
    """

    def __init__(self, app, host: str, port: int,
                 client_timeout: float = api_conf.CLIENT_TIMEOUT,
                 max_connections: int = api_conf.MAX_CONNECTIONS):
        try:
            self._server = _ThreadingServer((host, port), _Handler,
                                            client_timeout, max_connections)
        except OSError as e:
            raise CannotListen(host, port, e) from e
        self._server.set_app(app)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name='wsgi-server', daemon=True)
        self._started = False

    def set_app(self, app) -> None:
        self._server.set_app(app)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._server.watchdog.start()
        self._thread.start()
        self._started = True

    def stop(self, timeout: float = 0.0) -> bool:
        """Stop accepting connections, then give the requests in flight
        up to ``timeout`` seconds; whether they all finished (those left
        end with the process). A server never started only closes its
        socket."""
        if not self._started:
            self._server.server_close()
            return True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        left = self._server.drain(timeout)
        self._server.watchdog.stop()
        if left:
            LOG.warning('%d connections in flight did not end within %ss',
                        left, timeout)
        return not left


class LoopbackApp:
    """A WSGI application of this process served on a loopback port (or
    ``port``) from a thread: the stand-ins for other services that
    cyborg and its tests start. Subclasses define
    ``_app(environ, start_response)``. The port is kept across
    :meth:`stop` and :meth:`start`.
    """

    host = '127.0.0.1'

    def __init__(self, port: int = 0):
        self._port = port
        self._server: WSGIServer | None = None

    @property
    def port(self) -> int:
        return self._port

    def _app(self, environ, start_response):
        raise NotImplementedError

    def start(self):
        """Listen (once); returns the instance."""
        if self._server is None:
            self._server = WSGIServer(self._app, self.host, self._port)
            self._port = self._server.port
            self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
