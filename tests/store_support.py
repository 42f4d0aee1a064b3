"""Real databases for the store tests: a SQLite file, or a fresh PostgreSQL database per test.

PostgreSQL cases need PAIGRAPH_TEST_PG (a URL whose role may CREATE DATABASE; scripts/test sets
it from scripts/start-postgres) and skip with that reason when it is not set. Each gets its own
database `paigraph_t_<worker>_<random>` (the worker as tests.worker_support names it), dropped
afterwards.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from backends.base import EventKind, InstanceEvent
from server.jobs import JobMachine, job_policy
from server.protocol import parse_job
from server.protocol.model import JobSpec
from server.shapes.values import Job
from server.store import Store
from server.store.scratch import scratch_database
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


@contextmanager
def fresh_database(kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of `kind`, removed when the block ends."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'paigraph.db'}"
        return
    with scratch_database(postgres_server_url(), f"paigraph_t_{worker_name()}") as url:
        yield url


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
