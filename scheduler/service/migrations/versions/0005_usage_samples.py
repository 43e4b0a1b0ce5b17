"""Usage samples: each project's GPUs in use, quota, fair share and queue lengths at regular
moments, for the panel's history charts.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("project", sa.String(255), nullable=False),
        sa.Column("allocated_gpus", sa.Float, nullable=False),
        sa.Column("deserved_gpus", sa.Float, nullable=False),
        sa.Column("fair_share_gpus", sa.Float, nullable=False),
        sa.Column("running", sa.Integer, nullable=False),
        sa.Column("pending", sa.Integer, nullable=False),
        sa.Column("cluster_gpus", sa.Float, nullable=False),
    )
    op.create_index("ix_usage_samples_time", "usage_samples", ["time"])
    op.create_index("ix_usage_samples_project", "usage_samples", ["project"])


def downgrade() -> None:
    op.drop_index("ix_usage_samples_project", "usage_samples")
    op.drop_index("ix_usage_samples_time", "usage_samples")
    op.drop_table("usage_samples")
