"""Alembic environment: the store hands over its open connection in ``config.attributes``."""

from alembic import context

from scheduler.service.persistence.orm import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite can only change tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
