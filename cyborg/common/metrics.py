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

"""Process metrics (Prometheus) and where they are served.

Every metric a process of the service counts is defined here, in
:data:`REGISTRY`, and the rest of the code only calls the small helpers
below (one line at each call site). ``tests/unit/metrics_golden.json``
pins the families' names, types and label names.

Where they are served:

* the conductor and the agent serve ``/metrics`` on an address of their
  own (``[metrics] listen_host`` and ``conductor_port``/``agent_port``,
  :func:`serve`), never on the RPC or API address: a scraper needs no
  credentials there, so it belongs on a management network;
* the API serves ``/metrics`` on its own address only with
  ``[metrics] api_enabled``, behind the ``cyborg:metrics:get`` policy
  rule (:func:`exposition`).

Several processes of one service: the API under uWSGI or gunicorn runs
several worker processes, and one scrape must see them all. With the
environment variable ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
own; it must be set before the process starts, in the WSGI server's
environment) every process writes its metrics to files in that
directory and a scrape of any of them adds up the files
(prometheus_client's multiprocess mode). Without it (the all-in-one, the
standalone ``cyborg-api``, the conductor, the agent, the tests) each
process serves its own metrics from memory.
"""

from collections.abc import Iterable
from collections.abc import Iterator
import contextlib
import errno
import fcntl
import glob
import gzip
import os
import re
import socket
import socketserver
import threading
import time
from typing import Protocol
from wsgiref import simple_server

from oslo_config import cfg
from oslo_log import log as logging
import prometheus_client
from prometheus_client import multiprocess
from prometheus_client import registry as prometheus_registry

LOG = logging.getLogger(__name__)

#: The environment variable naming the multiprocess directory.
MULTIPROC_ENV = 'PROMETHEUS_MULTIPROC_DIR'

#: The content type of the text exposition format.
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

#: Every process metric; a scrape reads it through :func:`registry`.
REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

# No ``_created`` series beside each counter and histogram (the
# multiprocess mode has none either): one series per label set.
prometheus_client.disable_created_metrics()

# Buckets (seconds). An API request answers in milliseconds; an RPC call
# waits up to a minute (oslo.messaging's rpc_response_timeout); a bind
# job may program an FPGA for minutes ([conductor] bind_timeout).
_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
         30.0)
_RPC = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        30.0, 60.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
         300.0, 600.0)

API_REQUESTS = prometheus_client.Counter(
    'cyborg_api_requests_total',
    'API requests answered, by method, route template and status.',
    ['method', 'route', 'status'], registry=REGISTRY)
API_REQUEST_DURATION = prometheus_client.Histogram(
    'cyborg_api_request_duration_seconds',
    'Seconds the API took to start its answer, by method and route '
    'template.', ['method', 'route'], buckets=_FAST, registry=REGISTRY)
RPC_CALL_DURATION = prometheus_client.Histogram(
    'cyborg_rpc_call_duration_seconds',
    'Seconds of RPC calls (the caller waiting for the answer), by topic '
    'and method.', ['topic', 'method'], buckets=_RPC, registry=REGISTRY)
RPC_CALL_ERRORS = prometheus_client.Counter(
    'cyborg_rpc_call_errors_total',
    'RPC calls and casts that failed on the caller\'s side, by topic, '
    'method and error class (MessagingTimeout: nobody answered).',
    ['topic', 'method', 'error'], registry=REGISTRY)
BIND_JOB_DURATION = prometheus_client.Histogram(
    'cyborg_bind_job_duration_seconds',
    'Seconds of the conductor\'s bind jobs from their start to their '
    'outcome: bound, failed, or handed_back (to another conductor, '
    'at a stop).', ['outcome'], buckets=_SLOW, registry=REGISTRY)
NOVA_EVENTS_SENT = prometheus_client.Counter(
    'cyborg_nova_events_sent_total',
    'accelerator-request-bound events sent to Nova, by event status '
    '(completed, failed) and result: accepted, refused (Nova answered '
    'that it will not take it) or error (no answer; sent again).',
    ['status', 'result'], registry=REGISTRY)
PLACEMENT_REQUESTS = prometheus_client.Counter(
    'cyborg_placement_requests_total',
    'Requests to Placement, by method and status (error: no answer).',
    ['method', 'status'], registry=REGISTRY)
PLACEMENT_REQUEST_DURATION = prometheus_client.Histogram(
    'cyborg_placement_request_duration_seconds',
    'Seconds of requests to Placement, by method.', ['method'],
    buckets=_FAST, registry=REGISTRY)
GLANCE_DOWNLOADS = prometheus_client.Counter(
    'cyborg_glance_downloads_total',
    'Bitstream downloads from Glance, by result (ok, failed).',
    ['result'], registry=REGISTRY)
GLANCE_DOWNLOAD_BYTES = prometheus_client.Counter(
    'cyborg_glance_download_bytes_total',
    'Bytes of bitstreams downloaded from Glance.', registry=REGISTRY)
VENDOR_TOOL_RUNS = prometheus_client.Counter(
    'cyborg_vendor_tool_runs_total',
    'Runs of vendor tools by the drivers, by tool and result (ok, '
    'failed, timeout).', ['tool', 'result'], registry=REGISTRY)
VENDOR_TOOL_DURATION = prometheus_client.Histogram(
    'cyborg_vendor_tool_duration_seconds',
    'Seconds of vendor tool runs, by tool.', ['tool'], buckets=_SLOW,
    registry=REGISTRY)

#: The route label of a request no route matched (bounded cardinality:
#: never the path a client sent).
UNMATCHED_ROUTE = 'unmatched'
#: The method label of a method no route knows.
OTHER_METHOD = 'other'
_METHODS = frozenset(('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE',
                      'OPTIONS'))


# Recording (one call at each call site) -----------------------------------


def method_label(method: str | None) -> str:
    """``method`` when it is an HTTP method, else ``other`` (a client
    chooses the method: it must not choose label values)."""
    return method if method in _METHODS else OTHER_METHOD


def api_request(method: str | None, route: str, status: int | str,
                seconds: float) -> None:
    method = method_label(method)
    API_REQUESTS.labels(method, route, status).inc()
    API_REQUEST_DURATION.labels(method, route).observe(seconds)


@contextlib.contextmanager
def rpc_call(topic: str, method: str, timed: bool = True) -> Iterator[None]:
    """Counts an error raised inside by its class; times the block when
    ``timed`` (a call waiting for its answer, not a cast)."""
    started = time.monotonic()
    try:
        yield
    except Exception as e:
        RPC_CALL_ERRORS.labels(topic, method, type(e).__name__).inc()
        raise
    finally:
        if timed:
            RPC_CALL_DURATION.labels(topic, method).observe(
                time.monotonic() - started)


def bind_job(outcome: str, seconds: float) -> None:
    """``outcome``: bound, failed or handed_back."""
    BIND_JOB_DURATION.labels(outcome).observe(seconds)


def nova_event(status: str, result: str, count: int = 1) -> None:
    """``result``: accepted, refused or error."""
    if count:
        NOVA_EVENTS_SENT.labels(status, result).inc(count)


def placement_request(method: str, status: int | str,
                      seconds: float) -> None:
    """``status``: the HTTP status, or ``error`` where none came."""
    method = method_label(method)
    PLACEMENT_REQUESTS.labels(method, status).inc()
    PLACEMENT_REQUEST_DURATION.labels(method).observe(seconds)


def glance_download(ok: bool, size: int = 0) -> None:
    GLANCE_DOWNLOADS.labels('ok' if ok else 'failed').inc()
    if size:
        GLANCE_DOWNLOAD_BYTES.inc(size)


def vendor_tool(tool: str, result: str, seconds: float) -> None:
    """``tool``: the program's name (no path, no arguments); ``result``:
    ok, failed or timeout."""
    tool = os.path.basename(tool)
    VENDOR_TOOL_RUNS.labels(tool, result).inc()
    VENDOR_TOOL_DURATION.labels(tool).observe(seconds)


# Reading -------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    """The multiprocess directory, None in single-process mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class _ProcessMetrics(prometheus_registry.Collector):
    """The process metrics: this process's, or, in multiprocess mode,
    the sum over every process writing to the directory."""

    def collect(self):
        directory = multiprocess_dir()
        if directory is None:
            return REGISTRY.collect()
        return multiprocess.MultiProcessCollector(None, directory).collect()

    def describe(self):
        # The registry need not collect to learn the names.
        return []


def registry(collectors: Iterable[prometheus_registry.Collector] = ()
             ) -> prometheus_client.CollectorRegistry:
    """A registry of the process metrics and ``collectors``."""
    result = prometheus_client.CollectorRegistry()
    result.register(_ProcessMetrics())
    for collector in collectors:
        result.register(collector)
    return result


def exposition(collectors: Iterable[prometheus_registry.Collector] = ()
               ) -> bytes:
    """The text exposition of the process metrics and ``collectors``."""
    return prometheus_client.generate_latest(registry(collectors))


# The multiprocess directory --------------------------------------------------

# The name of a file a process writes: <kind>_<pid>.db, or live_<pid>.
_PID = re.compile(r'_(\d+)(\.db)?$')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


def prepare_multiprocess_dir() -> None:
    """Empty the multiprocess directory at the start of a service and
    mark this process alive in it (nothing in single-process mode).

    A service starts when no other process writing to the directory is
    alive: then every file is a leftover of an earlier run (its counters
    would add to this run's) and goes. A worker starting beside live
    ones (uWSGI ``lazy-apps``, a worker replaced after ``max-requests``)
    keeps their files, and the files of workers that died in this run:
    their counts stay in the totals, which never go down. The check runs
    under a lock on the directory, so workers starting together agree.
    """
    directory = multiprocess_dir()
    if directory is None:
        return
    os.makedirs(directory, exist_ok=True)
    own = os.getpid()
    with open(os.path.join(directory, '.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        files = [path for path in glob.glob(os.path.join(directory, '*'))
                 if _PID.search(path)]
        pids = {int(_PID.search(path).group(1)) for path in files}
        if not any(_alive(pid) for pid in pids - {own}):
            for path in files:
                # This process's own files are open already (a metric
                # without labels has its value from the import).
                if int(_PID.search(path).group(1)) != own:
                    os.unlink(path)
            LOG.info('Emptied the metrics directory %s', directory)
        open(os.path.join(directory, 'live_%d' % own), 'w').close()


# The listener of the conductor and the agent -------------------------------


class Server:
    """A ``/metrics`` listener in a daemon thread (or none: ``port`` is
    None); :meth:`stop` stops it."""

    def __init__(self, httpd=None, thread: threading.Thread | None = None):
        self._httpd = httpd
        self._thread = thread

    @property
    def port(self) -> int | None:
        return self._httpd.server_port if self._httpd else None

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._httpd = None


class TextSource(Protocol):
    """Metrics rendered elsewhere (the conductor's fleet metrics): text
    exposition lines, plain and as a gzip member, that a ``/metrics``
    answer appends to the process metrics."""

    def exposition(self) -> tuple[bytes, bytes]:
        """(text, the same text gzip-compressed)."""


def _gzip(data: bytes) -> bytes:
    # Level 1: the fleet text compresses 10 to 1 at a fraction of the
    # default level's time.
    return gzip.compress(data, compresslevel=1, mtime=0)


def wsgi_app(sources: Iterable[TextSource] = ()):
    """The WSGI application of a ``/metrics`` listener (any path): the
    process metrics, then each of ``sources``.

    Always the text format 0.0.4 (Prometheus asks for OpenMetrics and
    accepts it). Gzip when the scraper accepts it (Prometheus does):
    the answer is a gzip member per part, which a gzip reader reads as
    one stream (RFC 1952), so a source's compressed text, made once per
    computation, is never compressed again per scrape.
    """
    process = registry()
    sources = list(sources)

    def app(environ, start_response):
        if environ['REQUEST_METHOD'] not in ('GET', 'HEAD'):
            start_response('405 Method Not Allowed',
                           [('Allow', 'GET, HEAD')])
            return [b'']
        gzipped = 'gzip' in environ.get('HTTP_ACCEPT_ENCODING', '')
        head = prometheus_client.generate_latest(process)
        parts = [_gzip(head) if gzipped else head]
        for source in sources:
            text, compressed = source.exposition()
            parts.append(compressed if gzipped else text)
        headers = [('Content-Type', prometheus_client.CONTENT_TYPE_LATEST)]
        if gzipped:
            headers.append(('Content-Encoding', 'gzip'))
        start_response('200 OK', headers)
        return parts

    return app


class _QuietHandler(simple_server.WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format, *args):
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn,
                           simple_server.WSGIServer):
    daemon_threads = True


def serve(conf: cfg.ConfigOpts, port: int,
          sources: Iterable[TextSource] = ()) -> Server:
    """Serve the process metrics and ``sources`` at
    ``http://[metrics] listen_host:port/metrics`` (any path answers)
    when ``[metrics] enabled``.

    A port that cannot be listened on is logged as an error and the
    service runs on without metrics: metrics never stop a service.
    """
    if not conf.metrics.enabled:
        return Server()
    prepare_multiprocess_dir()
    host = conf.metrics.listen_host
    try:
        family, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE)[0][0::4]

        class Listening(_ThreadingWSGIServer):
            address_family = family

        httpd = simple_server.make_server(
            address[0], port, wsgi_app(sources), Listening,
            handler_class=_QuietHandler)
    except OSError as e:
        LOG.error('Cannot serve metrics on %s:%s: %s; change [metrics] '
                  'listen_host or the port', host, port, e)
        return Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True,
                              name='metrics-listener')
    thread.start()
    LOG.info('Serving metrics on http://%s:%s/metrics', host,
             httpd.server_port)
    return Server(httpd, thread)


class Listener:
    """The ``/metrics`` listener of a service on ``port``, for its
    ``on_start`` and ``on_stop`` (see :func:`serve`)."""

    def __init__(self, conf: cfg.ConfigOpts, port: int,
                 sources: Iterable[TextSource] = ()):
        self._conf = conf
        self._port = port
        self._sources = sources
        self.server = Server()

    def start(self) -> None:
        self.server = serve(self._conf, self._port, self._sources)

    def stop(self) -> None:
        self.server.stop()
