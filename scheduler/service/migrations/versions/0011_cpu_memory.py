"""CPU and memory per replica of a workload (``cpu_milli``, ``memory_mib``; 0: none asked),
the CPU and memory a usage interval held (``cpu``, ``memory_gib``), for CPU-hours and
memory-hours, and each usage sample's (``allocated_cpu``, ``allocated_memory_gib``), for the
history. Rows from before hold 0: nothing was asked then.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("cpu_milli", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("memory_mib", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("cpu", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("memory_gib", sa.Float(), nullable=False, server_default="0"))
    with op.batch_alter_table("usage_samples") as batch:
        for column in ("allocated_cpu", "allocated_memory_gib"):
            batch.add_column(sa.Column(column, sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage_samples") as batch:
        batch.drop_column("allocated_memory_gib")
        batch.drop_column("allocated_cpu")
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("memory_gib")
        batch.drop_column("cpu")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("memory_mib")
        batch.drop_column("cpu_milli")
