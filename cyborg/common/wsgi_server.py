"""A small threaded WSGI server for the standalone API and the all-in-one.

Production deployments run cyborg.wsgi.api:application under uWSGI,
gunicorn or mod_wsgi instead.
"""

import socketserver
import threading
from wsgiref import simple_server

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


class _QuietHandler(simple_server.WSGIRequestHandler):
    """One request per connection (HTTP/1.0), logged at debug level."""

    def log_message(self, format, *args):
        LOG.debug('%s - %s', self.address_string(), format % args)


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class WSGIServer:
    """Serves ``app`` on ``host``:``port`` in a background thread."""

    def __init__(self, app, host: str, port: int):
        self._server = simple_server.make_server(
            host, port, app, server_class=_ThreadingServer,
            handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name='wsgi-server', daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
