"""Job tokens still to be revoked (``pending_revocations``): an ended attempt's token is
stored here before its end is reported and deleted once the hub has revoked it, so a
restart between the two still revokes it (scheduler/service/hub/revocations.py).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_revocations",
        sa.Column("token_id", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_revocations")
