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

"""Sends versioned notifications, never failing the caller.

One :class:`Notifier` per process, built by the service that sends (the
conductor: every write goes through it) and handed to what needs it.
A notification that cannot be sent is logged and dropped: it never fails
the operation it describes.

Built by :meth:`Notifier.from_conf`, it sends from a thread of its own,
in the order the notifications were emitted: the operation never waits
for the broker (each send waits for the broker's confirmation), and a
broker that is away holds up only that thread; up to
:data:`QUEUE_SIZE` notifications wait for it, more are dropped.
"""

import queue
import threading
import time
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import constants
from cyborg.common import exception
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

#: Priorities a notification may have (oslo.messaging's names).
INFO = 'info'
ERROR = 'error'

#: Times a notification that could not be sent is tried again (each
#: after [oslo_messaging_rabbit] rabbit_retry_interval and its backoff)
#: before it is dropped.
SEND_RETRIES = 0

#: Notifications that may wait for the sending thread; more are dropped.
QUEUE_SIZE = 10000


def _transport_url(conf: cfg.ConfigOpts) -> str | None:
    """The notification transport's URL (None: the RPC transport's).

    The all-in-one's in-process RPC transport carries no notifications:
    there the ``log`` driver needs no transport (oslo.messaging's
    ``fake://`` stands in), and ``messagingv2`` needs ``transport_url``.
    """
    url = conf.notifications.transport_url
    if url or not str(conf.transport_url or '').startswith(
            constants.INPROC_TRANSPORT_URL):
        return url
    if conf.notifications.driver == 'log':
        return 'fake://'
    raise exception.ConfigInvalid(reason=(
        '[notifications] driver = %s needs [notifications] transport_url: '
        'the in-process transport carries no notifications'
        % conf.notifications.driver))


class Notifier:
    """Emits event_type notifications with a versioned payload."""

    def __init__(self, notifier: messaging.Notifier | None,
                 background: bool = False, queue_size: int = QUEUE_SIZE):
        """``notifier``: oslo.messaging's, or None to send nothing;
        ``background``: send from a thread of this notifier's (started
        on first use) instead of the caller's."""
        self._notifier = notifier
        self._queue: queue.Queue | None = (
            queue.Queue(queue_size) if background and notifier is not None
            else None)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, publisher_id: str
                  ) -> 'Notifier':
        """As ``[notifications]`` says; ``publisher_id`` is
        ``<binary>:<host>`` (Nova's convention)."""
        group = conf.notifications
        if group.driver == 'noop':
            return cls(None)
        transport = messaging.get_notification_transport(
            conf, url=_transport_url(conf))
        return cls(messaging.Notifier(
            transport, publisher_id=publisher_id, driver=group.driver,
            topics=group.topics, serializer=rpc.RequestContextSerializer(),
            # Bounded: oslo.messaging's default retries for ever, which
            # would hold up every notification after it while the broker
            # is away.
            retry=SEND_RETRIES), background=True)

    @property
    def enabled(self) -> bool:
        """Whether notifications are sent (payloads need not be built
        otherwise)."""
        return self._notifier is not None

    def emit(self, context, event_type: str, payload: dict[str, Any],
             priority: str = INFO) -> bool:
        """Send one notification (or queue it, in the background);
        whether it was handed to the transport (or queued). Never
        raises."""
        if self._notifier is None:
            return False
        if self._queue is None:
            return self._send(context, event_type, payload, priority)
        self._start()
        try:
            self._queue.put_nowait((context, event_type, payload, priority))
        except queue.Full:
            LOG.error('Dropped the %s notification: %d notifications wait '
                      'to be sent already', event_type, self._queue.maxsize)
            return False
        return True

    def send(self, context, event_type: str, payload: dict[str, Any],
             priority: str = INFO) -> bool:
        """Send one notification now, in the caller's thread, whatever
        the background sending; whether the transport took it (the broker
        confirmed it). Never raises. For what must be sent until it is
        (a usage record, marked sent only once this says so)."""
        if self._notifier is None:
            return False
        return self._send(context, event_type, payload, priority)

    def _send(self, context, event_type: str, payload: dict[str, Any],
              priority: str) -> bool:
        try:
            getattr(self._notifier, priority)(context, event_type, payload)
        except Exception:
            # A notification is never worth failing the operation for.
            LOG.exception('Could not send the %s notification', event_type)
            return False
        return True

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name='notifications')
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self._send(*item)
            finally:
                self._queue.task_done()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued notifications to
        be sent; whether none is left."""
        if self._queue is None:
            return True
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                LOG.warning('%d notifications were not sent before the '
                            'service stopped', self._queue.unfinished_tasks)
                return False
            time.sleep(0.05)
        return True
