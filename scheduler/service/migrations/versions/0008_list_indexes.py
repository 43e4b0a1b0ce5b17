"""Indexes for the lists at 100,000 workloads: each filter of ``GET workloads`` (user,
project, state) together with the id, so that a page (newest first, after a cursor) is read
in order from the index instead of sorting every match; and the finish time the retention
pass looks for.

The user's and the project's indexes end with the state: a user's active work (the panel,
``frachub jobs``) and the envelope's count of it are read from the index alone, without
visiting the rows of the thousands of workloads that have finished. On SQLite an index ends
with the row id anyway, so there (user, id) reads as the old (user) did; PostgreSQL needs
the id spelled out to walk one user's or project's workloads in id order. The old
single-column indexes are dropped: the new ones serve the same lookups, and every index
costs each write.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_workloads_user_id_state": ("user", "id", "state"),
    "ix_workloads_project_id_state": ("project", "id", "state"),
    "ix_workloads_state_id": ("state", "id"),
}
"""Each replaces the single-column index (``ix_workloads_<column>``, from 0001) of the
column it starts with."""


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "workloads", list(columns))
        op.drop_index(f"ix_workloads_{columns[0]}", "workloads")
    op.create_index("ix_workloads_finished_at", "workloads", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_workloads_finished_at", "workloads")
    for name, columns in INDEXES.items():
        op.create_index(f"ix_workloads_{columns[0]}", "workloads", [columns[0]])
        op.drop_index(name, "workloads")
