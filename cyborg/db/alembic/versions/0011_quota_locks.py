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

"""One row per project whose accelerator requests are limited: what a
creation locks while it checks the project's limits (quota_locks)

Revision ID: 0011_quota_locks
Revises: 0010_profile_updates_quotas
Create Date: 2026-11-28 04:10:00
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0011_quota_locks'
down_revision = '0010_profile_updates_quotas'
branch_labels = None
depends_on = None

DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql',
                                      'mariadb')
TABLE_ARGS = dict(mysql_engine='InnoDB', mysql_charset='utf8mb4')


def upgrade() -> None:
    op.create_table(
        'quota_locks',
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('created_at', DateTime, nullable=True),
        sa.Column('updated_at', DateTime, nullable=True),
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.UniqueConstraint('project_id', name='uniq_quota_locks0project_id'),
        **TABLE_ARGS)
