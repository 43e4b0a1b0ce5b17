"""Quotas per resource: each queue's deserved quota, limit and over-quota weight for CPUs
(milli-cores) and memory (MiB) beside its GPUs (docs/scheduling.md, rule 3b). Queues from
before have none (NULL): unlimited in CPUs and memory, as before.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = (
    ("deserved_cpu_milli", sa.BigInteger),
    ("limit_cpu_milli", sa.BigInteger),
    ("over_quota_weight_cpu", sa.Float),
    ("deserved_memory_mib", sa.BigInteger),
    ("limit_memory_mib", sa.BigInteger),
    ("over_quota_weight_memory", sa.Float),
)


def upgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        for name, _kind in reversed(COLUMNS):
            batch.drop_column(name)
