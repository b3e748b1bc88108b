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

"""The preparation each deployable's driver declares:
deployables.preparation

Existing deployables get what the conductor derived before drivers
declared it: ``mdev`` for those with MDEV attach handles, ``none`` for
the others.

Revision ID: 0004_deployable_preparation
Revises: 0003_datetime_precision
Create Date: 2026-11-25 22:10:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0004_deployable_preparation'
down_revision = '0003_datetime_precision'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preparation', sa.String(32),
                                      nullable=False, server_default='none'))
    deployables = sa.table('deployables', sa.column('id', sa.Integer),
                           sa.column('preparation', sa.String))
    handles = sa.table('attach_handles',
                       sa.column('deployable_id', sa.Integer),
                       sa.column('attach_type', sa.String))
    op.execute(sa.update(deployables).where(deployables.c.id.in_(
        sa.select(handles.c.deployable_id).where(
            handles.c.attach_type == 'MDEV'))).values(preparation='mdev'))
