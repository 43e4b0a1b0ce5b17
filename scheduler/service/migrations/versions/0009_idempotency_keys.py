"""Idempotent submission: the ``Idempotency-Key`` a job was submitted with, and a digest of
the body it came with, so that a retried submission finds the job it already made instead of
making a second one. One key per user: a unique index on (user, key). Rows from before have
no key (NULL), and NULLs never collide in a unique index, on SQLite or PostgreSQL.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(200), nullable=True))
        batch.add_column(sa.Column("request_digest", sa.String(64), nullable=True))
        batch.create_index(
            "ix_workloads_user_idempotency_key", ["user", "idempotency_key"], unique=True
        )


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_index("ix_workloads_user_idempotency_key")
        batch.drop_column("request_digest")
        batch.drop_column("idempotency_key")
