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

"""Nova events repeated until Nova acts: nova_events.repeat_until, and
an index to find an ARQ's events

Revision ID: 0002_nova_event_repeat
Revises: 0001_initial
Create Date: 2026-11-25 03:10:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0002_nova_event_repeat'
down_revision = '0001_initial'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nova_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('repeat_until', sa.DateTime(),
                                      nullable=True))
        batch_op.create_index('nova_events_arq_idx', ['arq_uuid'],
                              unique=False)
