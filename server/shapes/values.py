"""What the store hands out and takes in: frozen dataclasses, never ORM rows.

Plain values keep sessions inside the store (nothing lazy-loads later, nothing expires) and are
cheap to build in bulk, which matters for list queries that map hundreds of rows per request.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from server.shapes.job_states import JobState

# Event types written for the machine's transitions; other types may be appended freely.
JOB_STATE = "JOB_STATE"
INSTANCE_STATE = "INSTANCE_STATE"


@dataclass(frozen=True, slots=True)
class User:
    id: int
    name: str
    admin: bool
    created_at: datetime
    removed_at: datetime | None = None  # removed users keep their name on jobs and items


@dataclass(frozen=True, slots=True)
class JobWarning:
    """A warning kept with a job: where in its config (path segments), a code, what it means."""

    path: tuple[str, ...]
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Job:
    """A job's row without its large documents (config, spec, machine: ask for them)."""

    id: str
    name: str
    owner_id: int
    owner: str  # the owner's user name
    virtual_cluster: str
    state: JobState
    state_reason: str
    submitted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    attempt: int
    retries: int
    last_sequence: int  # the sequence of the job's newest event
    # fields it was submitted with that have no effect here, as (path, code, message)
    warnings: tuple[JobWarning, ...] = ()

    @property
    def cursor(self) -> JobCursor:
        return JobCursor(self.submitted_at, self.id)


class Instance(NamedTuple):
    """A task instance's row. A named tuple rather than a frozen dataclass: list queries build
    hundreds per request, and a frozen dataclass pays a setattr call for every field.
    (`index` is the task index; it hides tuple.index, which nothing here uses.)"""

    job_id: str
    attempt: int
    role: str
    index: int  # type: ignore[assignment]  # hides tuple.index on purpose (see above)
    task_attempt: int
    state: JobState
    state_reason: str
    exit_code: int | None
    exit_reason: str | None
    node: str | None
    host_ip: str | None
    ports: dict[str, list[int]]
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Event:
    job_id: str
    sequence: int
    at: datetime
    type: str
    message: str | None
    state: JobState | None
    attempt: int | None
    role: str | None
    index: int | None


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append that is not a state change of the machine (e.g. a stop request)."""

    type: str
    at: datetime
    message: str | None = None
    state: JobState | None = None
    attempt: int | None = None
    role: str | None = None
    index: int | None = None


@dataclass(frozen=True, slots=True)
class JobCursor:
    """A position in the job list, which is ordered newest first by (submitted_at, id)."""

    submitted_at: datetime
    id: str

    def encode(self) -> str:
        raw = f"{self.submitted_at.isoformat()}|{self.id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> JobCursor:
        """Raise ValueError with a user-facing message when `text` is not a job cursor."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            when, sep, job_id = raw.partition("|")
            at = datetime.fromisoformat(when)
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise ValueError(f"{text!r} is not a job list cursor") from None
        if not sep or not job_id or at.tzinfo is None:
            raise ValueError(f"{text!r} is not a job list cursor")
        return cls(at, job_id)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs to list; every field given must match (exact values)."""

    states: Sequence[JobState] = ()  # any of these; empty: every state
    owner: str | None = None  # the owner's user name
    virtual_cluster: str | None = None
    name: str | None = None
    name_contains: str | None = None  # part of the name, in any case (a search box)
    owner_id: int | None = None  # only this user's jobs (who may read which: api.job_access)


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job] = field(default_factory=list)
    has_next: bool = False

    @property
    def end_cursor(self) -> JobCursor | None:
        return self.jobs[-1].cursor if self.jobs else None


class StoredUsage(NamedTuple):
    """A stored usage point of one instance: a sample (`step` the sampling interval in
    seconds) or a minute's mean (`step` 60). Network figures are totals since the start."""

    job_id: str
    attempt: int
    role: str
    index: int  # type: ignore[assignment]  # the task index, as on Instance
    at: datetime
    step: int
    cpu_cores: float
    memory_bytes: int
    memory_limit_bytes: int | None
    network_rx_bytes: int
    network_tx_bytes: int
    gpu_utilization: float | None
    gpu_memory_bytes: int | None
