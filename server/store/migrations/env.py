"""Alembic's environment for paigraph's own migrations.

`server.store.migrate` hands over an open connection and owns the transaction; driven any other
way, the URL comes from the config, else $PAIGRAPH_DB. How to draft a new revision:
docs/storage.md.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

import server.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from server.store.db import create_store_engine

config = context.config
target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters by copying tables
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_store_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("paigraph's migrations run against a database; offline mode is not offered")
run_migrations_online()
