"""Bring a database's schema up to date with alembic, from code (no alembic.ini needed).

Safe to run on every start and from several processes at once: the upgrade runs in one
transaction that first takes a lock (an advisory lock on PostgreSQL, the write lock on SQLite),
so a second process waits and then finds nothing left to do.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from server.store.db import create_store_engine, is_sqlite, session_scope

log = logging.getLogger(__name__)

# How long a checkpoint waits for a reader of the log to finish before leaving the log to
# SQLite's own next checkpoint.
CHECKPOINT_TRIES = 50
CHECKPOINT_PAUSE_SECONDS = 0.1

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_LOCK_KEY = 0x70616967  # "paig": the advisory lock that serialises migrating processes


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate(url_or_engine: str | Engine | None = None) -> None:
    """Run `alembic upgrade head` on the database (see `db.database_url` for a str or None)."""
    engine = (
        url_or_engine if isinstance(url_or_engine, Engine) else create_store_engine(url_or_engine)
    )
    try:
        config = alembic_config()
        with session_scope(engine, write=True) as session:
            connection = session.connection()
            if not is_sqlite(engine):
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        if is_sqlite(engine):
            _checkpoint(engine)
    finally:
        if not isinstance(url_or_engine, Engine):
            engine.dispose()


def _checkpoint(engine: Engine) -> None:
    """Copy SQLite's write-ahead log into the database file and empty it, so that no text a
    migration replaced (a credential it scrubbed) stays behind in the log's old frames. A
    reader holding the log open makes SQLite answer busy: the checkpoint is tried again for a
    few seconds, then left to SQLite's own next checkpoint, saying so."""
    for _ in range(CHECKPOINT_TRIES):
        connection = engine.raw_connection()  # outside any transaction, which would block it
        try:
            busy, *_ = connection.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            connection.close()
        if not busy:
            return
        time.sleep(CHECKPOINT_PAUSE_SECONDS)
    log.warning(
        "the database's write-ahead log could not be emptied after migrating (a reader holds "
        "it); SQLite empties it at its next checkpoint"
    )
