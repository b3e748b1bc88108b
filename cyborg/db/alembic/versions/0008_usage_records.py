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

"""Usage records of bound accelerator requests: extended_accelerator_requests
.bound_at, arq_usage, usage_audits, usage_records

ARQs already Bound get the time of their last change as ``bound_at``
(the best the database knows: their move to Bound was their last
state change).

Revision ID: 0008_usage_records
Revises: 0007_device_health_since
Create Date: 2026-11-28 00:30:00
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0008_usage_records'
down_revision = '0007_device_health_since'
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
        batch_op.add_column(sa.Column('bound_at', DateTime, nullable=True))
    arqs = sa.table('extended_accelerator_requests',
                    sa.column('state', sa.String), sa.column('bound_at'),
                    sa.column('updated_at'), sa.column('created_at'))
    op.execute(arqs.update().where(arqs.c.state == 'Bound').values(
        bound_at=sa.func.coalesce(arqs.c.updated_at, arqs.c.created_at)))
    op.create_table(
        'arq_usage',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('arq_uuid', sa.String(36), nullable=False),
        sa.Column('project_id', sa.String(255), nullable=True),
        sa.Column('instance_uuid', sa.String(36), nullable=True),
        sa.Column('device_profile_name', sa.String(255), nullable=True),
        sa.Column('resource_class', sa.String(255), nullable=True),
        sa.Column('vendor', sa.String(255), nullable=True),
        sa.Column('model', sa.String(255), nullable=True),
        sa.Column('host', sa.String(255), nullable=True),
        sa.Column('device_uuid', sa.String(36), nullable=True),
        sa.Column('bound_at', DateTime, nullable=False),
        sa.Column('unbound_at', DateTime, nullable=False),
        sa.Index('arq_usage_unbound_at_idx', 'unbound_at'),
        sa.Index('arq_usage_arq_uuid_idx', 'arq_uuid'),
        **TABLE_ARGS)
    op.create_table(
        'usage_audits',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('period_start', DateTime, nullable=False),
        sa.Column('period_end', DateTime, nullable=False),
        sa.Column('audited_by', sa.String(255), nullable=True),
        sa.Column('records', sa.Integer, nullable=False,
                  server_default='0'),
        sa.UniqueConstraint('period_start',
                            name='uniq_usage_audits0period_start'),
        **TABLE_ARGS)
    op.create_table(
        'usage_records',
        sa.Column('id', sa.Integer, primary_key=True),
        *_timestamps(),
        sa.Column('arq_uuid', sa.String(36), nullable=False),
        sa.Column('period_start', DateTime, nullable=False),
        sa.Column('period_end', DateTime, nullable=False),
        sa.Column('payload', sa.Text, nullable=False),
        sa.Column('claimed_by', sa.String(255), nullable=True),
        sa.Column('claimed_until', DateTime, nullable=True),
        sa.Column('sent_at', DateTime, nullable=True),
        sa.Column('attempts', sa.Integer, nullable=False,
                  server_default='0'),
        sa.UniqueConstraint('arq_uuid', 'period_start',
                            name='uniq_usage_records0arq_uuid0period_start'),
        sa.Index('usage_records_unsent_idx', 'sent_at', 'claimed_until'),
        **TABLE_ARGS)
