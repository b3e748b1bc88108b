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

"""The usage audit: ``accelerator_request.exists`` once per period.

Every conductor runs it periodically; the database decides who does
what (see :mod:`cyborg.db.usage`):

1. each ended period not audited yet (:func:`cyborg.domain.usage.
   periods_to_audit`) gets its records in one transaction, which only
   one conductor's commits; they are leased to it;
2. it sends them, marking each sent once the transport took it;
3. records left unsent (their conductor died, or the transport failed)
   are leased again by the next run of any conductor once their lease
   has expired, and sent.

So each ARQ gets exactly one record per period, sent at least once.
"""

from collections.abc import Callable
import datetime
import json

from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg.db import usage as usage_db
from cyborg.domain import usage
from cyborg.notifications import usage as usage_payload

LOG = logging.getLogger(__name__)

#: Seconds a conductor holds the records it sends before another may.
LEASE_SECONDS = 300
#: Records leased at once when sending those left unsent.
BATCH = 100


class UsageAuditor:
    """Audits ended periods and sends their records.

    ``notifier`` is a :class:`cyborg.notifications.notifier.Notifier`;
    ``clock`` gives the current naive UTC time (a collaborator, so that
    an audit can be run for a given time and tests control it).
    """

    def __init__(self, host: str, period: int, notifier,
                 clock: Callable[[], datetime.datetime] | None = None,
                 lease_seconds: float = LEASE_SECONDS):
        """``clock``: by default oslo's ``timeutils.utcnow``, the clock
        every row of the database is stamped with."""
        self.host = host
        self.period = period
        self._notifier = notifier
        self._clock = clock or (lambda: timeutils.utcnow())
        self._lease = datetime.timedelta(seconds=lease_seconds)

    def run(self, context) -> int:
        """Audit what has ended and send what is unsent; the number of
        records sent."""
        now = self._clock()
        sent = 0
        last_end = usage_db.last_audited_end(context)
        periods = usage.periods_to_audit(last_end, now, self.period)
        if periods and last_end is not None and periods[0][0] > last_end:
            LOG.warning('Usage periods from %s to %s are not audited: '
                        'only the latest %d ended periods are',
                        last_end, periods[0][0], usage.MAX_CATCH_UP)
        for start, end in periods:
            leased = usage_db.audit_period(context, start, end, now,
                                           self.host, now + self._lease)
            if leased is None:  # audited by another conductor
                continue
            LOG.info('Usage audit of %s to %s: %d records to send', start,
                     end, len(leased))
            done = self._send(context, leased)
            sent += done
            if done < len(leased):
                return sent  # the transport fails: the rest waits
        while True:
            now = self._clock()
            leased = usage_db.claim_unsent(context, self.host, now,
                                           now + self._lease, BATCH)
            if not leased:
                return sent
            done = self._send(context, leased)
            sent += done
            if done < len(leased):
                return sent

    def _send(self, context, records) -> int:
        """Send ``records`` in order until one fails; how many were
        sent. The lease of those not sent is dropped."""
        for index, record in enumerate(records):
            payload = usage_payload.envelope(json.loads(record['payload']))
            if not self._notifier.emit(context, usage.EVENT_TYPE, payload):
                LOG.warning('Could not send the usage record of ARQ %s for '
                            '%s; %d records wait for the next audit run',
                            record['arq_uuid'], record['period_start'],
                            len(records) - index)
                usage_db.release(context, [r['id'] for r in records[index:]],
                                 self._clock(), attempted=record['id'])
                return index
            usage_db.mark_sent(context, record['id'], self._clock())
        return len(records)
