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

"""RPC transports, clients and servers.

Two transports share one interface:

* oslo.messaging (``rabbit://...``) between processes;
* :class:`LocalTransport` (``inproc://``) for the all-in-one, which calls
  the endpoint directly in the caller's thread (casts run on a thread
  pool). Arguments and the context are copied through their wire form, so
  an endpoint sees exactly what it would see over RabbitMQ.
"""

from concurrent import futures
import contextlib
import copy
import functools
import threading
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_messaging import opts as messaging_opts
from oslo_messaging.rpc import dispatcher
from oslo_serialization import jsonutils

from cyborg import context as cyborg_context
from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import patches

LOG = logging.getLogger(__name__)

ALLOWED_EXMODS = [exception.__name__]


# Keys of RequestContext.to_dict() that from_dict() does not read
# (derived from others), and those it reads back as the same value when
# absent: left out of messages, which oslo.messaging packs key by key,
# copies and unpacks on every call.
_CONTEXT_UNREAD = frozenset(('project', 'user_identity'))
_CONTEXT_DEFAULTS = {
    'system_scope': None, 'domain': None, 'user_domain': None,
    'project_domain': None, 'read_only': False, 'show_deleted': False,
    'auth_token': None, 'global_request_id': None, 'resource_uuid': None,
    'is_admin_project': True, 'service_user_id': None,
    'service_project_id': None}
# Lists that come back empty when absent.
_CONTEXT_LISTS = frozenset(('service_roles',))
_ABSENT = object()


def _restored(key: str, value: Any) -> bool:
    if key in _CONTEXT_LISTS:
        return not value
    return (key in _CONTEXT_UNREAD
            or _CONTEXT_DEFAULTS.get(key, _ABSENT) is value)


def context_to_wire(context) -> dict[str, Any]:
    """``context.to_dict()`` without what ``from_dict()`` restores by
    itself: ``RequestContext.from_dict()`` of the result equals
    ``context``."""
    return {key: value for key, value in context.to_dict().items()
            if not _restored(key, value)}


class RequestContextSerializer(messaging.Serializer):
    """Sends the request context as a dict (:func:`context_to_wire`);
    entities are plain JSON."""

    def serialize_entity(self, context, entity):
        return entity

    def deserialize_entity(self, context, entity):
        return entity

    def serialize_context(self, context):
        return context_to_wire(context)

    def deserialize_context(self, context):
        return cyborg_context.RequestContext.from_dict(context)


class LocalTransport:
    """In-process transport: endpoints registered by (topic, server)."""

    def __init__(self, max_workers: int = 16):
        self._endpoints: dict[tuple[str, str | None], object] = {}
        self._lock = threading.Lock()
        self._executor = futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix='inproc-rpc')

    def register(self, topic: str, server: str, endpoint: object) -> None:
        with self._lock:
            self._endpoints[(topic, server)] = endpoint
            self._endpoints.setdefault((topic, None), endpoint)

    def unregister(self, topic: str, server: str) -> None:
        with self._lock:
            endpoint = self._endpoints.pop((topic, server), None)
            if self._endpoints.get((topic, None)) is endpoint:
                del self._endpoints[(topic, None)]

    def lookup(self, topic: str, server: str | None) -> object:
        endpoint = self._endpoints.get((topic, server))
        if endpoint is None:
            raise messaging.MessagingTimeout(
                'No in-process RPC server for topic %s server %s'
                % (topic, server))
        return endpoint

    def submit(self, fn, *args, **kwargs):
        return self._executor.submit(fn, *args, **kwargs)

    def cleanup(self) -> None:
        self._executor.shutdown(wait=True)


@functools.cache
def _transport_url_opt() -> cfg.Opt:
    # list_opts() deep-copies every option of the library (about 10 ms);
    # the one option it yields here is the same each time.
    (opt,) = [opt for group, opts in messaging_opts.list_opts()
              if group is None for opt in opts if opt.name == 'transport_url']
    return opt


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register oslo.messaging's ``[DEFAULT] transport_url``, read before
    a transport exists (the library registers the rest with it)."""
    conf.register_opt(_transport_url_opt())
    messaging.set_transport_defaults(control_exchange='cyborg')


class _LocalClient:
    def __init__(self, transport: LocalTransport, topic: str,
                 server: str | None = None):
        self._transport = transport
        self._topic = topic
        self._server = server

    def prepare(self, server: str | None = None, **_ignored) -> '_LocalClient':
        """A client for ``server``; other options (timeout, version) do
        not apply to direct calls."""
        return _LocalClient(self._transport, self._topic,
                            server if server is not None else self._server)

    def can_send_version(self, version: str) -> bool:
        """Always: both ends are this process, of one release."""
        return True

    def _invoke(self, context, method: str, kwargs: dict[str, Any]):
        if method.startswith('_'):
            raise messaging.NoSuchMethod(method)
        endpoint = self._transport.lookup(self._topic, self._server)
        ctx = cyborg_context.RequestContext.from_dict(context.to_dict())
        handler = getattr(endpoint, method, None)
        if handler is None:
            raise messaging.NoSuchMethod(method)
        # Copy arguments and the result as the wire would, so neither side
        # can mutate the other's objects.
        try:
            result = handler(ctx, **_wire_copy(kwargs))
        except dispatcher.ExpectedException as e:
            # What @messaging.expected_exceptions wraps; the real
            # dispatcher hands the caller the original exception.
            raise e.exc_info[1] from None
        return _wire_copy(result)

    def call(self, context, method: str, **kwargs):
        return self._invoke(context, method, kwargs)

    def cast(self, context, method: str, **kwargs) -> None:
        future = self._transport.submit(self._invoke, context, method, kwargs)
        future.add_done_callback(_log_cast_failure(method))


def _log_cast_failure(method: str):
    def callback(future):
        error = future.exception()
        if error is not None:
            LOG.error('In-process RPC cast %s failed: %s', method, error,
                      exc_info=error)
    return callback


def _wire_copy(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        return jsonutils.loads(jsonutils.dumps(value))
    except (TypeError, ValueError):
        return copy.deepcopy(value)


class _LocalServer:
    def __init__(self, transport: LocalTransport, topic: str, server: str,
                 endpoint: object):
        self._transport = transport
        self._topic = topic
        self._server = server
        self._endpoint = endpoint

    def start(self) -> None:
        self._transport.register(self._topic, self._server, self._endpoint)

    def stop(self) -> None:
        self._transport.unregister(self._topic, self._server)

    def wait(self) -> None:
        pass


def get_transport(conf: cfg.ConfigOpts):
    """The transport ``[DEFAULT] transport_url`` names."""
    register_opts(conf)
    url = conf.transport_url
    if url and url.startswith(constants.INPROC_TRANSPORT_URL):
        return LocalTransport()
    patches.relax_amqp_idle_polling()
    patches.shorten_obsolete_reply_queue_memory()
    transport = messaging.get_rpc_transport(
        conf, allowed_remote_exmods=ALLOWED_EXMODS)
    _set_rabbit_defaults(conf)
    return transport


#: Cyborg's default of ``[oslo_messaging_rabbit] rabbit_interval_max``
#: (oslo.messaging's is 30): the longest wait between two attempts to
#: reconnect to RabbitMQ.
RABBIT_INTERVAL_MAX = 5


def _set_rabbit_defaults(conf: cfg.ConfigOpts) -> None:
    """Cyborg's defaults of the RabbitMQ driver's options, which the
    driver registers when the transport is made (its connections read
    them later). With oslo.messaging's backoff, a process that lost
    RabbitMQ for a minute waited up to 30 s more after the broker was
    back before it tried again; reconnecting every 5 s at most costs one
    TCP connection attempt per process and connection."""
    try:
        conf.set_default('rabbit_interval_max', RABBIT_INTERVAL_MAX,
                         group='oslo_messaging_rabbit')
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        pass  # another driver (fake://, a test double)


def get_client(transport, topic: str, version: str = '1.0',
               version_cap: str | None = None):
    """A client of the API on ``topic``; its messages carry ``version``
    unless prepared with another, never one above ``version_cap``. Its
    calls are measured (:class:`MeasuredClient`)."""
    if isinstance(transport, LocalTransport):
        return MeasuredClient(_LocalClient(transport, topic), topic)
    target = messaging.Target(topic=topic, version=version)
    return MeasuredClient(messaging.get_rpc_client(
        transport, target, version_cap=version_cap,
        serializer=RequestContextSerializer()), topic)


class MeasuredClient:
    """An RPC client whose calls count in the caller's metrics: the
    seconds a call waits for its answer, and the calls and casts that
    fail, by error class (:func:`metrics.rpc_call`)."""

    def __init__(self, client, topic: str):
        self._client = client
        self._topic = topic

    def prepare(self, **kwargs) -> 'MeasuredClient':
        return MeasuredClient(self._client.prepare(**kwargs), self._topic)

    def can_send_version(self, version: str) -> bool:
        return self._client.can_send_version(version)

    def call(self, context, method: str, **kwargs):
        with metrics.rpc_call(self._topic, method), _delivery(method):
            return self._client.call(context, method, **kwargs)

    def cast(self, context, method: str, **kwargs) -> None:
        with metrics.rpc_call(self._topic, method, timed=False), \
                _delivery(method):
            self._client.cast(context, method, **kwargs)


#: The libraries under oslo.messaging's RabbitMQ driver: what a client
#: prepared with ``retry`` raises, unwrapped, when it cannot open a new
#: connection to the broker (kombu turns socket errors into its
#: OperationalError).
_BROKER_LIBRARIES = ('kombu.', 'amqp.')


def _broker_error(error: Exception) -> bool:
    return (isinstance(error, ConnectionError)
            or type(error).__module__.startswith(_BROKER_LIBRARIES))


@contextlib.contextmanager
def _delivery(method: str):
    """A broker that cannot be reached raises MessageDeliveryFailure,
    as oslo.messaging does for a connection that broke while sending
    (the API answers 503 to either)."""
    try:
        yield
    except messaging.MessagingException:
        raise
    except Exception as e:
        if not _broker_error(e):
            raise
        raise messaging.MessageDeliveryFailure(
            'Cannot send %s: the broker cannot be reached (%s: %s)'
            % (method, type(e).__name__, e)) from e


class RPCVersionCapped(messaging.RPCVersionCapError):
    """A method needs a newer API version than ``[upgrade_levels]``
    allows sending."""

    def __init__(self, topic: str, method: str, version: str,
                 version_cap: str | None, option: str):
        super().__init__(version, version_cap)
        self.method = method
        self.option = option
        self.msg = (
            '%s needs version %s of the %s RPC API, above [upgrade_levels] '
            '%s = %s: finish upgrading the %s services, then raise or '
            'unset the cap' % (method, version, topic, option, version_cap,
                               option))
        self.args = (self.msg,)

    def __str__(self) -> str:
        return self.msg


def client_for(client, topic: str, method: str, version: str,
               base_version: str, version_cap: str | None, option: str):
    """``client`` prepared for ``method``, which needs API ``version``.

    A method of the base version goes with the client's own target,
    which carries that version; a newer one is checked against the cap
    first (:class:`RPCVersionCapped`), then prepared with its version.
    """
    if version == base_version:
        return client
    if not client.can_send_version(version):
        raise RPCVersionCapped(topic, method, version, version_cap, option)
    return client.prepare(version=version)


def get_server(transport, topic: str, server: str, endpoint: object):
    if isinstance(transport, LocalTransport):
        return _LocalServer(transport, topic, server, endpoint)
    target = messaging.Target(topic=topic, server=server)
    return messaging.get_rpc_server(
        transport, target, [endpoint], executor='threading',
        serializer=RequestContextSerializer(),
        access_policy=dispatcher.DefaultRPCAccessPolicy)


def cleanup(transport) -> None:
    transport.cleanup()
