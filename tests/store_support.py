"""Real databases for the store tests: a SQLite file, or a fresh PostgreSQL database per test.

PostgreSQL cases need PAIGRAPH_TEST_PG (a URL whose role may CREATE DATABASE; scripts/test sets
it from scripts/start-postgres) and skip with that reason when it is not set. Each gets its own
empty database `paigraph_t_<worker>_<random>` (the worker as tests.worker_support names it),
dropped afterwards.

Making and dropping a database take the server a second or more each (it writes and syncs the
files of a whole database), which a test would otherwise wait for twice: `SCRATCH` makes the next
test's database while the current test runs, and drops a used one while the next runs. The drops
still happen, in order, and the session waits for the last of them (`ScratchDatabases.finish`).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

from backends.base import EventKind, InstanceEvent
from server.jobs import JobMachine, job_policy
from server.protocol import parse_job
from server.protocol.model import JobSpec
from server.shapes.values import Job
from server.store import Store
from server.store.scratch import drop_database
from tests.jobs import as_yaml, v2
from tests.worker_support import worker_name

PG_ENV = "PAIGRAPH_TEST_PG"
KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def postgres_server_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(
            f"{PG_ENV} is not set (scripts/test sets it; scripts/start-postgres prints one)"
        )
    return url


def _admin_url(server_url: str) -> str:
    """`server_url` as psycopg takes it (no SQLAlchemy driver suffix such as +psycopg)."""
    return make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _create_database(server_url: str) -> str:
    """A new, empty database on the server of `server_url`: its URL, spelled as `server_url`."""
    name = f"paigraph_t_{worker_name()}_{secrets.token_hex(6)}"
    with psycopg.connect(_admin_url(server_url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def _drop_database(server_url: str, url: str) -> None:
    """Drop the database of `url` through a connection to the server's own `server_url`."""
    database = make_url(url).database
    assert database is not None
    drop_database(_admin_url(server_url), database)


class ScratchDatabases:
    """This worker's empty PostgreSQL databases: each made one test ahead and dropped behind,
    in threads of their own, so that no test waits for either."""

    def __init__(self) -> None:
        self._makers = ThreadPoolExecutor(1, thread_name_prefix="scratch-make")
        self._droppers = ThreadPoolExecutor(1, thread_name_prefix="scratch-drop")
        self._lock = threading.RLock()  # a done callback may run in the thread holding it
        self._ahead: tuple[str, Future[str]] | None = None  # (server URL, the database's URL)
        self._drops: list[Future[None]] = []

    def take(self, server_url: str) -> str:
        """An empty database no one has used, on the server of `server_url`; the next one is
        started meanwhile."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
            if ahead is not None and ahead[0] != server_url:  # another server: not of use
                self._drop_when_made(*ahead)
                ahead = None
            made = ahead[1] if ahead else self._makers.submit(_create_database, server_url)
            self._ahead = (server_url, self._makers.submit(_create_database, server_url))
        return made.result()

    def give_back(self, server_url: str, url: str) -> None:
        """Drop `url` (a database `take` gave for `server_url`) in the background."""
        with self._lock:
            self._drops.append(self._droppers.submit(_drop_database, server_url, url))

    def _drop_when_made(self, server_url: str, made: Future[str]) -> None:
        made.add_done_callback(
            lambda done: done.exception() or self.give_back(server_url, done.result())
        )

    def finish(self) -> None:
        """Drop the database made ahead and wait for every drop; the first that failed is
        raised, so that a database left behind does not go unnoticed."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self.give_back(ahead[0], ahead[1].result())
        self._makers.shutdown(wait=True)
        with self._lock:
            drops, self._drops = self._drops, []
        for drop in drops:
            drop.result()


SCRATCH = ScratchDatabases()


@contextmanager
def fresh_database(kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of `kind`, removed when the block ends (a PostgreSQL one in
    the background, see `SCRATCH`)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'paigraph.db'}"
        return
    server_url = postgres_server_url()
    url = SCRATCH.take(server_url)
    try:
        yield url
    finally:
        SCRATCH.give_back(server_url, url)


class StatementLog:
    """Counts the SQL statements an engine sends (BEGIN/COMMIT left out)."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []
        self._engine = engine
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.split(None, 1)[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
            self.statements.append(statement)

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._seen)


def job_spec(name: str = "tf_dist", **changes: Any) -> JobSpec:
    """The two-role ps/worker job of tests.jobs (ps x1, worker x2), named and changed."""
    doc = v2(name=name, **changes)
    spec = parse_job(as_yaml(doc)).spec
    assert spec is not None
    return spec


def submit(
    store: Store,
    owner_id: int,
    name: str,
    at: datetime,
    *,
    vc: str = "default",
    job_id: str | None = None,
) -> tuple[Job, JobMachine]:
    """Store a new job the way the service will: a fresh machine, then create_job."""
    spec = job_spec(name)
    machine = JobMachine(job_policy(spec), job_id or f"{name}-{secrets.token_hex(4)}", at=at)
    job, _ = store.create_job(spec, machine.snapshot(), owner_id=owner_id, virtual_cluster=vc)
    return job, machine


def feed(
    machine: JobMachine, kind: EventKind, role: str, index: int, at: datetime, **kw: Any
) -> None:
    """Apply one backend event of the machine's current attempt."""
    machine.apply(
        InstanceEvent(
            job_id=machine.job_id,
            attempt=machine.attempt,
            kind=kind,
            role=role,
            index=index,
            at=at,
            **kw,
        )
    )
