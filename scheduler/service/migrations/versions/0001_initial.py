"""The first schema: workloads, their events, queues and GPU usage intervals.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("user", sa.String(255), nullable=False, index=True),
        sa.Column("project", sa.String(255), nullable=False, index=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("command", sa.JSON, nullable=True),
        sa.Column("working_dir", sa.Text, nullable=True),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("server_name", sa.String(255), nullable=True),
        sa.Column("gpus", sa.Float, nullable=True),
        sa.Column("gpu_memory_mib", sa.Integer, nullable=True),
        sa.Column("replicas", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("preemptible", sa.Boolean, nullable=False),
        sa.Column("min_runtime", sa.Float, nullable=False),
        sa.Column("max_runtime", sa.Float, nullable=True),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("start_seq", sa.Integer, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("placement", sa.JSON, nullable=False),
        sa.Column("handle", sa.JSON, nullable=True),
        sa.Column("restart_count", sa.Integer, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("stop_reason", sa.String(32), nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_id", sa.Integer, sa.ForeignKey("workloads.id"), index=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_table(
        "queues",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("parent", sa.String(255), nullable=True),
        sa.Column("deserved_gpus", sa.Float, nullable=True),
        sa.Column("over_quota_weight", sa.Float, nullable=False),
        sa.Column("limit_gpus", sa.Float, nullable=True),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("members", sa.JSON, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_table(
        "usage",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_id", sa.Integer, sa.ForeignKey("workloads.id"), index=True),
        sa.Column("user", sa.String(255), nullable=False, index=True),
        sa.Column("project", sa.String(255), nullable=False, index=True),
        sa.Column("gpus", sa.Float, nullable=False),
        sa.Column("start", sa.Float, nullable=False, index=True),
        sa.Column("end", sa.Float, nullable=True, index=True),
    )


def downgrade() -> None:
    for table in ("usage", "queues", "events", "workloads"):
        op.drop_table(table)
