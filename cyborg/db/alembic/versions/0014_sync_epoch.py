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

"""Placement syncs of one host by several conductors: services.sync_epoch

Counts the syncs that recorded a write to the host's providers, so a
sync that another one's write overlapped knows it at its end (see
cyborg.db.providers.save_sync). Zero for every existing host.

Revision ID: 0014_sync_epoch
Revises: 0013_device_partitions
Create Date: 2026-11-28 12:30:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0014_sync_epoch'
down_revision = '0013_device_partitions'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('services', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sync_epoch', sa.Integer(),
                                      server_default='0', nullable=False))
