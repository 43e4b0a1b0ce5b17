"""Idle GPU notebooks: an allocation's idle limit, the activity the service last saw for its
server, and the warning (with its promised stop time) shown before the server is stopped.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = (
    ("idle_timeout", sa.Float),
    ("last_activity", sa.Float),
    ("idle_stop_at", sa.Float),
    ("idle_warning", sa.Text),
)


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        for name, _type in reversed(COLUMNS):
            batch.drop_column(name)
