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

"""Taking over from an upstream OpenStack Cyborg database

* ``upstream_imports``: one row per import of an upstream database (its
  alembic revision, when it ran, what it copied), so a second import is
  refused with the first one's details;
* ``deployables.retained``: a deployable its device's reports no longer
  carry, kept only because an attach handle of it is in use (an imported
  deployable our driver models differently, until its ARQs are released);
* ``placement_providers.adopted``: a resource provider taken over as is
  from the upstream service (its name, parent and traits may still be
  upstream's until it holds no allocation).

Revision ID: 0006_upstream_import
Revises: 0005_device_utilization
Create Date: 2026-11-27 18:00:00
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

revision = '0006_upstream_import'
down_revision = '0005_device_utilization'
branch_labels = None
depends_on = None

DateTime = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql',
                                      'mariadb')


def upgrade() -> None:
    op.create_table(
        'upstream_imports',
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('created_at', DateTime, nullable=True),
        sa.Column('updated_at', DateTime, nullable=True),
        sa.Column('source_revision', sa.String(64), nullable=False),
        sa.Column('started_at', DateTime, nullable=False),
        sa.Column('finished_at', DateTime, nullable=True),
        sa.Column('counts', sa.Text, nullable=True),
        mysql_engine='InnoDB', mysql_charset='utf8mb4')
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.add_column(sa.Column('retained', sa.Boolean,
                                      nullable=False,
                                      server_default=sa.false()))
    with op.batch_alter_table('placement_providers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('adopted', sa.Boolean,
                                      nullable=False,
                                      server_default=sa.false()))
