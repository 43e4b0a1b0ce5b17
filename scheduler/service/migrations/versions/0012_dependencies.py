"""Job dependencies: the job a workload waits for (``after_id``) and whether it must have
succeeded (``after_ok``). Rows from before wait for nothing (NULL). And a project's
time limits (``default_time_limit``, ``max_time_limit``, seconds; NULL: none).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("after_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("after_ok", sa.Boolean, nullable=True))
    with op.batch_alter_table("queues") as batch:
        batch.add_column(sa.Column("default_time_limit", sa.Float, nullable=True))
        batch.add_column(sa.Column("max_time_limit", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("max_time_limit")
        batch.drop_column("default_time_limit")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("after_ok")
        batch.drop_column("after_id")
