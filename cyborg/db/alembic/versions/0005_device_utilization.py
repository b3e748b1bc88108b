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

"""The latest utilization agents reported per device: devices.utilization

A nullable JSON text (metrics and the time they were reported); existing
devices have none until their agent reports it.

Revision ID: 0005_device_utilization
Revises: 0004_deployable_preparation
Create Date: 2026-11-26 00:30:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0005_device_utilization'
down_revision = '0004_deployable_preparation'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('utilization', sa.Text, nullable=True))
