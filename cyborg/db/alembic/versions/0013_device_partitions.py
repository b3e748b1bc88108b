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

"""A device's partitions as its agent reports them: devices.partitions

Nullable: a device that exists before this revision, or that its driver
does not partition, has none; the next report of a partitioned GPU
fills it.

Revision ID: 0013_device_partitions
Revises: 0012_arq_request_groups
Create Date: 2026-11-28 07:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0013_device_partitions'
down_revision = '0012_arq_request_groups'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('partitions', sa.Text, nullable=True))
