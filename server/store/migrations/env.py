"""Alembic's environment for paigraph's own migrations.

`server.store.migrate` hands over an open connection (in `config.attributes["connection"]`) and
owns the transaction. Driven any other way (alembic's `command` functions on `alembic_config()`),
the URL comes from the config's `sqlalchemy.url`, else from $PAIGRAPH_DB as the server picks it.

A new revision: change `server/store/tables.py`, then let alembic draft the difference against
an up-to-date database and review what it wrote:

    from alembic import command
    from server.store.migrate import alembic_config
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", "sqlite:////tmp/paigraph-dev.db")
    command.revision(config, message="what changes", autogenerate=True, rev_id="0002")
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
