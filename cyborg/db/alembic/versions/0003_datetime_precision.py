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

"""Microsecond date/time columns on MySQL/MariaDB: DATETIME(6)

MySQL/MariaDB's plain DATETIME drops the fraction of a second, so
outbox leases and retry backoff, bind timeouts and ``created_at`` order
lost up to a second there. SQLite and PostgreSQL keep microseconds
already: nothing changes on them.

Revision ID: 0003_datetime_precision
Revises: 0002_nova_event_repeat
Create Date: 2026-11-25 03:40:00
"""

from alembic import op

revision = '0003_datetime_precision'
down_revision = '0002_nova_event_repeat'
branch_labels = None
depends_on = None

_TIMESTAMPS = ('created_at', 'updated_at')

# Every date/time column at 0002, with whether it accepts NULL.
_COLUMNS = {
    'services': _TIMESTAMPS + ('last_seen_up',),
    'devices': _TIMESTAMPS,
    'deployables': _TIMESTAMPS,
    'attributes': _TIMESTAMPS,
    'controlpath_ids': _TIMESTAMPS,
    'attach_handles': _TIMESTAMPS,
    'device_profiles': _TIMESTAMPS,
    'extended_accelerator_requests': _TIMESTAMPS + ('bind_started_at',),
    'placement_providers': _TIMESTAMPS,
    'nova_events': _TIMESTAMPS + ('next_attempt_at', 'claimed_until',
                                  'sent_at', 'repeat_until'),
}
_NOT_NULL = {('nova_events', 'next_attempt_at')}


def upgrade() -> None:
    if op.get_bind().dialect.name not in ('mysql', 'mariadb'):
        return
    # One ALTER TABLE per table: InnoDB rebuilds the table once for all
    # of its columns (DATETIME to DATETIME(6) is not an in-place change).
    # Existing values keep their whole seconds, with a zero fraction.
    for table, columns in _COLUMNS.items():
        op.execute('ALTER TABLE `%s` %s' % (table, ', '.join(
            'MODIFY `%s` DATETIME(6) %s' % (
                column,
                'NOT NULL' if (table, column) in _NOT_NULL else 'NULL')
            for column in columns)))
