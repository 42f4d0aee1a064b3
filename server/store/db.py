"""Which database, how to connect to it, and how a unit of work opens and ends.

One place decides the URL and gives each database the settings it needs (SQLite: WAL, a busy
timeout, foreign keys and paigraph's own BEGIN IMMEDIATE for writes), and turns problems into a
`DatabaseError` a user can act on (docs/storage.md).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from server.shapes.store_errors import DatabaseError

ENV_VAR = "PAIGRAPH_DB"
BUSY_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_S = 5
_IMMEDIATE = "paigraph_immediate"  # execution option: open the SQLite transaction for writing


def data_dir() -> Path:
    """The per-user data directory: $XDG_DATA_HOME/paigraph or ~/.local/share/paigraph."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "paigraph"


def default_url() -> str:
    """The SQLite file in the user's data directory, which is created when missing."""
    directory = data_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(
            f"cannot create the data directory {directory}: {exc.strerror or exc}; "
            f"set {ENV_VAR} to a database URL"
        ) from None
    return f"sqlite:///{directory / 'paigraph.db'}"


def database_url(url: str | None = None) -> str:
    """The URL to use: `url`, else $PAIGRAPH_DB, else the default SQLite file."""
    chosen = url or os.environ.get(ENV_VAR) or ""
    return chosen.strip() or default_url()


def normalize_url(url: str) -> URL:
    """Parse a URL and pick the driver (psycopg 3 for PostgreSQL)."""
    try:
        parsed = make_url(url.strip())
    except ArgumentError:
        raise DatabaseError(
            f"{url!r} is not a database URL; use sqlite:///PATH or "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return parsed.set(drivername="sqlite+pysqlite")
    raise DatabaseError(
        f"unsupported database URL scheme {parsed.drivername!r} in {_shown(parsed)}; "
        "paigraph stores its data in SQLite (sqlite:///PATH) or PostgreSQL "
        "(postgresql://USER:PASSWORD@HOST:PORT/DATABASE, driven by psycopg 3)"
    )


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def create_store_engine(url: str | None = None, *, check: bool = True) -> Engine:
    """An engine for `url` (see `database_url`); with `check`, connect once to prove it works."""
    parsed = normalize_url(database_url(url))
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(parsed)
        else:
            engine = _postgres_engine(parsed)
    except NoSuchModuleError as exc:  # pragma: no cover - the drivers are dependencies
        raise DatabaseError(f"no driver for {_shown(parsed)}: {exc}") from None
    if check:
        try:
            with engine.connect():
                pass
        except DBAPIError as exc:
            engine.dispose()
            raise DatabaseError(f"cannot open the database {_shown(parsed)}: {_why(exc)}") from None
    return engine


def _sqlite_engine(url: URL) -> Engine:
    memory = url.database in (None, "", ":memory:")
    if not memory:
        path = Path(url.database or "")
        if not path.parent.is_dir():
            raise DatabaseError(
                f"cannot open the SQLite database {path}: the directory {path.parent} does not "
                "exist"
            )
        _create_private(path)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        **({"poolclass": StaticPool} if memory else {}),
    )
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _create_private(path: Path) -> None:
    """Create a missing database file readable by its owner only (0600): it holds token
    hashes and every job's config. SQLite gives its -wal and -shm files the main file's mode.
    An existing file keeps the mode its owner chose."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise DatabaseError(
            f"cannot create the SQLite database {path}: {exc.strerror or exc}"
        ) from None


def _sqlite_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    # The driver would otherwise open transactions lazily, only before writes; `_sqlite_begin`
    # issues BEGIN itself so reads and writes of a unit see one snapshot.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable enough with WAL, much faster
    finally:
        cursor.close()


def _use_wal(cursor: sqlite3.Cursor) -> None:
    """Switch the file to WAL once (it stays so). Several processes opening a new database at
    the same moment can find the switch locked, where SQLite does not wait: retry a while."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_begin(connection: Any) -> None:
    immediate = connection.get_execution_options().get(_IMMEDIATE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


class Repository:
    """Base of the store's query classes: an engine, and units of work on it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _read(self) -> AbstractContextManager[Session]:
        return session_scope(self.engine)

    def _write(self) -> AbstractContextManager[Session]:
        return session_scope(self.engine, write=True)


@contextmanager
def session_scope(engine: Engine, *, write: bool = False) -> Iterator[Session]:
    """One unit of work: committed when the block ends, rolled back when it raises.

    `write=True` marks a unit that reads and then writes rows others may write concurrently; on
    SQLite it takes the write lock at BEGIN (PostgreSQL callers lock rows with FOR UPDATE).
    """
    with Session(engine, expire_on_commit=False) as session:
        if write and is_sqlite(engine):
            session.connection(execution_options={_IMMEDIATE: True})  # begins the transaction
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()


def _shown(url: URL) -> str:
    """The URL as the user would write it, password hidden."""
    backend = url.get_backend_name()
    return url.set(drivername=backend).render_as_string(hide_password=True)


def _why(exc: DBAPIError) -> str:
    """The driver's own first line, which names the cause (refused, no such database, ...)."""
    text = str(exc.orig) if exc.orig is not None else str(exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc.orig or exc).__name__
