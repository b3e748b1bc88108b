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

"""Device profiles that can be disabled, and what quotas count of each
ARQ: device_profiles.enabled, extended_accelerator_requests.resources and
.alternative

Revision ID: 0010_profile_updates_quotas
Revises: 0009_device_taints
Create Date: 2026-11-28 04:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = '0010_profile_updates_quotas'
down_revision = '0009_device_taints'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('device_profiles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('enabled', sa.Boolean(),
                                      nullable=False,
                                      server_default=sa.true()))
    with op.batch_alter_table('extended_accelerator_requests',
                              schema=None) as batch_op:
        batch_op.add_column(sa.Column('resources', sa.Text(),
                                      nullable=True))
        batch_op.add_column(sa.Column('alternative', sa.Integer(),
                                      nullable=True))
