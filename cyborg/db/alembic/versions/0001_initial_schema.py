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

"""Initial schema: every cyborg table

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-22 05:05:51.690979
"""

from alembic import op
import sqlalchemy as sa

revision = '0001_initial'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'device_profiles',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('profile_json', sa.Text(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
        sa.UniqueConstraint('uuid', name='uniq_device_profiles0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    op.create_table(
        'devices',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('type', sa.String(length=30), nullable=False),
        sa.Column('vendor', sa.String(length=255), nullable=False),
        sa.Column('model', sa.String(length=255), nullable=False),
        sa.Column('std_board_info', sa.Text(), nullable=True),
        sa.Column('vendor_board_info', sa.Text(), nullable=True),
        sa.Column('hostname', sa.String(length=255), nullable=False),
        sa.Column('address', sa.String(length=255), nullable=False),
        sa.Column(
            'status',
            sa.String(length=32),
            server_default='enabled',
            nullable=False,
        ),
        sa.Column(
            'health',
            sa.String(length=32),
            server_default='healthy',
            nullable=False,
        ),
        sa.Column('driver', sa.String(length=100), nullable=True),
        sa.Column(
            'missing', sa.Boolean(), server_default=sa.false(), nullable=False
        ),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'hostname', 'address', name='uniq_devices0hostname0address'
        ),
        sa.UniqueConstraint('uuid', name='uniq_devices0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    op.create_table(
        'nova_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('arq_uuid', sa.String(length=36), nullable=False),
        sa.Column('instance_uuid', sa.String(length=36), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column(
            'attempts', sa.Integer(), server_default='0', nullable=False
        ),
        sa.Column('next_attempt_at', sa.DateTime(), nullable=False),
        sa.Column('claimed_by', sa.String(length=255), nullable=True),
        sa.Column('claimed_until', sa.DateTime(), nullable=True),
        sa.Column('sent_at', sa.DateTime(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    with op.batch_alter_table('nova_events', schema=None) as batch_op:
        batch_op.create_index(
            'nova_events_pending_idx',
            ['sent_at', 'next_attempt_at'],
            unique=False,
        )

    op.create_table(
        'placement_providers',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('parent_uuid', sa.String(length=36), nullable=False),
        sa.Column('generation', sa.Integer(), nullable=True),
        sa.Column('inventory_hash', sa.String(length=64), nullable=True),
        sa.Column('traits_hash', sa.String(length=64), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid', name='uniq_placement_providers0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    with op.batch_alter_table('placement_providers', schema=None) as batch_op:
        batch_op.create_index(
            'placement_providers_host_idx', ['host'], unique=False
        )

    op.create_table(
        'services',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('binary', sa.String(length=255), nullable=False),
        sa.Column('last_seen_up', sa.DateTime(), nullable=True),
        sa.Column('report_hash', sa.String(length=64), nullable=True),
        sa.Column('rp_name', sa.String(length=255), nullable=True),
        sa.Column('compute_rp_uuid', sa.String(length=36), nullable=True),
        sa.Column(
            'sync_requested', sa.Integer(), server_default='0', nullable=False
        ),
        sa.Column(
            'sync_done', sa.Integer(), server_default='0', nullable=False
        ),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'host', 'binary', name='uniq_services0host0binary'
        ),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    op.create_table(
        'controlpath_ids',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('cpid_type', sa.String(length=32), nullable=False),
        sa.Column('cpid_info', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['device_id'],
            ['devices.id'],
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'device_id',
            'cpid_info',
            name='uniq_controlpath_ids0device_id0cpid_info',
        ),
        sa.UniqueConstraint('uuid', name='uniq_controlpath_ids0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    op.create_table(
        'deployables',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('parent_id', sa.Integer(), nullable=True),
        sa.Column('root_id', sa.Integer(), nullable=True),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('num_accelerators', sa.Integer(), nullable=False),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('rp_uuid', sa.String(length=36), nullable=True),
        sa.Column('driver_name', sa.String(length=100), nullable=True),
        sa.Column('bitstream_id', sa.String(length=36), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['device_id'],
            ['devices.id'],
        ),
        sa.ForeignKeyConstraint(
            ['parent_id'],
            ['deployables.id'],
        ),
        sa.ForeignKeyConstraint(
            ['root_id'],
            ['deployables.id'],
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'device_id', 'name', name='uniq_deployables0device_id0name'
        ),
        sa.UniqueConstraint('uuid', name='uniq_deployables0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.create_index(
            'deployables_rp_uuid_idx', ['rp_uuid'], unique=False
        )

    op.create_table(
        'attach_handles',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('cpid_id', sa.Integer(), nullable=False),
        sa.Column(
            'in_use', sa.Boolean(), server_default=sa.false(), nullable=False
        ),
        sa.Column('attach_type', sa.String(length=32), nullable=False),
        sa.Column('attach_info', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['cpid_id'],
            ['controlpath_ids.id'],
        ),
        sa.ForeignKeyConstraint(
            ['deployable_id'],
            ['deployables.id'],
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'deployable_id',
            'attach_info',
            name='uniq_attach_handles0deployable_id0info',
        ),
        sa.UniqueConstraint('uuid', name='uniq_attach_handles0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    with op.batch_alter_table('attach_handles', schema=None) as batch_op:
        batch_op.create_index(
            'attach_handles_cpid_id_idx', ['cpid_id'], unique=False
        )

    op.create_table(
        'attributes',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(length=255), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['deployable_id'],
            ['deployables.id'],
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'deployable_id', 'key', name='uniq_attributes0deployable_id0key'
        ),
        sa.UniqueConstraint('uuid', name='uniq_attributes0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    op.create_table(
        'extended_accelerator_requests',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('project_id', sa.String(length=255), nullable=True),
        sa.Column('state', sa.String(length=32), nullable=False),
        sa.Column('device_profile_id', sa.Integer(), nullable=False),
        sa.Column(
            'device_profile_group_id',
            sa.Integer(),
            server_default='0',
            nullable=False,
        ),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('device_rp_uuid', sa.String(length=36), nullable=True),
        sa.Column('instance_uuid', sa.String(length=36), nullable=True),
        sa.Column('attach_handle_id', sa.Integer(), nullable=True),
        sa.Column('deployable_id', sa.Integer(), nullable=True),
        sa.Column('bind_owner', sa.String(length=255), nullable=True),
        sa.Column('bind_started_at', sa.DateTime(), nullable=True),
        sa.Column('bind_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['attach_handle_id'],
            ['attach_handles.id'],
        ),
        sa.ForeignKeyConstraint(
            ['deployable_id'],
            ['deployables.id'],
        ),
        sa.ForeignKeyConstraint(
            ['device_profile_id'],
            ['device_profiles.id'],
        ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint(
            'attach_handle_id', name='uniq_extArqs0attach_handle_id'
        ),
        sa.UniqueConstraint('uuid', name='uniq_extArqs0uuid'),
        mysql_charset='utf8mb4',
        mysql_engine='InnoDB',
    )
    with op.batch_alter_table(
        'extended_accelerator_requests', schema=None
    ) as batch_op:
        batch_op.create_index(
            'extArqs_device_profile_id_idx',
            ['device_profile_id'],
            unique=False,
        )
        batch_op.create_index(
            'extArqs_device_rp_uuid_idx', ['device_rp_uuid'], unique=False
        )
        batch_op.create_index(
            'extArqs_instance_uuid_idx', ['instance_uuid'], unique=False
        )
        batch_op.create_index(
            'extArqs_project_id_idx', ['project_id'], unique=False
        )
        batch_op.create_index('extArqs_state_idx', ['state'], unique=False)
