"""Checkpoints: a job's declared checkpoint interval and its last reported
checkpoint, so the engine counts the work an eviction would destroy from the last save.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("checkpoint_interval", sa.Float, nullable=True))
        batch.add_column(sa.Column("checkpointed_at", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("checkpointed_at")
        batch.drop_column("checkpoint_interval")
