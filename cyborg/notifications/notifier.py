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
"""

from typing import Any

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import rpc

LOG = logging.getLogger(__name__)

#: Priorities a notification may have (oslo.messaging's names).
INFO = 'info'
ERROR = 'error'

#: Times a notification that could not be sent is tried again (each
#: after [oslo_messaging_rabbit] rabbit_retry_interval and its backoff)
#: before it is dropped.
SEND_RETRIES = 0


class Notifier:
    """Emits event_type notifications with a versioned payload."""

    def __init__(self, notifier: messaging.Notifier | None):
        """``notifier``: oslo.messaging's, or None to send nothing."""
        self._notifier = notifier

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, publisher_id: str
                  ) -> 'Notifier':
        """As ``[notifications]`` says; ``publisher_id`` is
        ``<binary>:<host>`` (Nova's convention)."""
        group = conf.notifications
        if group.driver == 'noop':
            return cls(None)
        transport = messaging.get_notification_transport(
            conf, url=group.transport_url)
        return cls(messaging.Notifier(
            transport, publisher_id=publisher_id, driver=group.driver,
            topics=group.topics, serializer=rpc.RequestContextSerializer(),
            # Bounded: oslo.messaging's default retries for ever, which
            # would hang the operation while the broker is away.
            retry=SEND_RETRIES))

    @property
    def enabled(self) -> bool:
        """Whether notifications are sent (payloads need not be built
        otherwise)."""
        return self._notifier is not None

    def emit(self, context, event_type: str, payload: dict[str, Any],
             priority: str = INFO) -> bool:
        """Send one notification; whether it was handed to the
        transport. Never raises."""
        if self._notifier is None:
            return False
        try:
            getattr(self._notifier, priority)(context, event_type, payload)
        except Exception:
            # A notification is never worth failing the operation for.
            LOG.exception('Could not send the %s notification', event_type)
            return False
        return True
