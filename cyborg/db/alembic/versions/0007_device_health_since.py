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

"""Why a device has its health, and since when: devices.health_reason,
devices.health_since

Both nullable: devices that exist before this revision get them from the
next change of their health (NULL reads as "not recorded").

Revision ID: 0007_device_health_since
Revises: 0006_upstream_import
Create Date: 2026-11-28 00:10:00
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0007_device_health_since'
down_revision = '0006_upstream_import'
branch_labels = None
depends_on = None

# Microsecond precision on MySQL/MariaDB, as every date column since
# 0003_datetime_precision.
DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql',
                                      'mariadb')


def upgrade() -> None:
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('health_reason', sa.String(255),
                                      nullable=True))
        batch_op.add_column(sa.Column('health_since', DateTime,
                                      nullable=True))
