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

"""Each ARQ keeps the request group it was created from
(extended_accelerator_requests.group_json), filled in for existing ARQs
from their device profile

Revision ID: 0012_arq_request_groups
Revises: 0011_quota_locks
Create Date: 2026-11-28 07:00:00
"""

import json

from alembic import op
import sqlalchemy as sa

revision = '0012_arq_request_groups'
down_revision = '0011_quota_locks'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('extended_accelerator_requests',
                              schema=None) as batch_op:
        batch_op.add_column(sa.Column('group_json', sa.Text(),
                                      nullable=True))
    _fill_groups()


def _fill_groups() -> None:
    """Existing ARQs get their profile's group as it is now: one UPDATE
    per (profile, group), whatever the number of ARQs."""
    connection = op.get_bind()
    arqs = sa.table('extended_accelerator_requests',
                    sa.column('device_profile_id', sa.Integer),
                    sa.column('device_profile_group_id', sa.Integer),
                    sa.column('group_json', sa.Text))
    profiles = sa.table('device_profiles', sa.column('id', sa.Integer),
                        sa.column('profile_json', sa.Text))
    used = connection.execute(
        sa.select(profiles.c.id, profiles.c.profile_json).where(
            profiles.c.id.in_(sa.select(arqs.c.device_profile_id)
                              .distinct()))).all()
    for profile_id, profile_json in used:
        for index, group in enumerate(json.loads(profile_json)['groups']):
            connection.execute(
                sa.update(arqs).where(
                    arqs.c.device_profile_id == profile_id,
                    arqs.c.device_profile_group_id == index,
                    arqs.c.group_json.is_(None))
                .values(group_json=json.dumps(group, sort_keys=True)))
