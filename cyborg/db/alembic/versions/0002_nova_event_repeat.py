"""Nova events repeated until Nova acts: nova_events.repeat_until, and
an index to find an ARQ's events

Revision ID: 0002_nova_event_repeat
Revises: 0001_initial
Create Date: 2026-11-25 03:10:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0002_nova_event_repeat'
down_revision = '0001_initial'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nova_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('repeat_until', sa.DateTime(),
                                      nullable=True))
        batch_op.create_index('nova_events_arq_idx', ['arq_uuid'],
                              unique=False)
