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

"""Device taints and taint rules, ARQs marked by a NoExecute taint, and
utilization summed per ARQ and audit period: device_taint_rules,
device_taints, extended_accelerator_requests.taint_marked_at/_by,
arq_utilization

Revision ID: 0009_device_taints
Revises: 0008_usage_records
Create Date: 2026-11-28 03:10:00
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0009_device_taints'
down_revision = '0008_usage_records'
branch_labels = None
depends_on = None

# Microsecond precision on MySQL/MariaDB, as every date column since
# 0003_datetime_precision.
DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql',
                                      'mariadb')
TABLE_ARGS = dict(mysql_engine='InnoDB', mysql_charset='utf8mb4')


def _timestamps() -> list[sa.Column]:
    return [sa.Column('created_at', DateTime, nullable=True),
            sa.Column('updated_at', DateTime, nullable=True)]


def upgrade() -> None:
    with op.batch_alter_table('extended_accelerator_requests',
                              schema=None) as batch_op:
        batch_op.add_column(sa.Column('taint_marked_at', DateTime,
                                      nullable=True))
        batch_op.add_column(sa.Column('taint_marked_by', sa.String(255),
                                      nullable=True))
    op.create_table(
        'device_taint_rules',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=True),
        sa.Column('description', sa.Text, nullable=True),
        sa.Column('selector', sa.Text, nullable=False),
        sa.Column('key', sa.String(63), nullable=False),
        sa.Column('value', sa.String(255), nullable=False,
                  server_default=''),
        sa.Column('effect', sa.String(16), nullable=False),
        sa.Column('reason', sa.String(255), nullable=True),
        sa.UniqueConstraint('uuid', name='uniq_device_taint_rules0uuid'),
        **TABLE_ARGS)
    op.create_table(
        'device_taints',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('device_id', sa.Integer, sa.ForeignKey('devices.id'),
                  nullable=False),
        sa.Column('key', sa.String(63), nullable=False),
        sa.Column('value', sa.String(255), nullable=False,
                  server_default=''),
        sa.Column('effect', sa.String(16), nullable=False),
        sa.Column('source', sa.String(16), nullable=False),
        sa.Column('origin', sa.String(36), nullable=False),
        sa.Column('rule_id', sa.Integer,
                  sa.ForeignKey('device_taint_rules.id'), nullable=True),
        sa.Column('reason', sa.String(255), nullable=True),
        sa.UniqueConstraint('device_id', 'key', 'origin',
                            name='uniq_device_taints0device_id0key0origin'),
        sa.Index('device_taints_key_idx', 'key'),
        **TABLE_ARGS)
    op.create_table(
        'arq_utilization',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('arq_uuid', sa.String(36), nullable=False),
        sa.Column('period_start', DateTime, nullable=False),
        sa.Column('busy_sum', sa.Float, nullable=False, server_default='0'),
        sa.Column('samples', sa.Integer, nullable=False,
                  server_default='0'),
        sa.UniqueConstraint('arq_uuid', 'period_start',
                            name='uniq_arq_utilization0arq_uuid0period_start'),
        **TABLE_ARGS)
