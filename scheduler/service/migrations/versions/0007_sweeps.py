"""Sweeps: the sweep a job belongs to and how many of its members may run at once.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("sweep_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("sweep_parallel", sa.Integer, nullable=True))
        batch.create_index("ix_workloads_sweep_id", ["sweep_id"])


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_index("ix_workloads_sweep_id")
        batch.drop_column("sweep_parallel")
        batch.drop_column("sweep_id")
