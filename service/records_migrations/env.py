"""Alembic's entry point: migrates the connection service.records passes in (no alembic.ini)."""
from alembic import context

from service.records import Base

context.configure(connection=context.config.attributes["connection"], target_metadata=Base.metadata,
                  render_as_batch=True)  # (SQLite alters a table by copying it: batch mode)
with context.begin_transaction():
    context.run_migrations()
