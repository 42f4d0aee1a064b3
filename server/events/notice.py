"""The one message the event bus carries: "job X has events up to sequence N".

A notice is deliberately tiny. It is a wake-up, not the event itself: the event log in the
database is the source of truth, and a subscriber that receives a notice re-reads the log from
its own cursor. That is why a notice may be coalesced with a newer one, or lost while a
connection is down, without losing anything a client sees.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

CHANNEL = "paigraph_jobs"
"""The PostgreSQL LISTEN/NOTIFY channel shared by every server process of one database."""

ALL_JOBS = "*"
"""The job id of a resync notice that concerns every job (sent to all-jobs subscribers)."""

EVENT = "event"
"""The usual kind: new rows were appended to the job's event log."""

RESYNC = "resync"
"""Notifications may have been missed (the bus reconnected, or a slow subscriber overflowed):
re-read the event log from your cursor. A resync's `sequence` is 0, meaning "unknown"."""

MAX_PAYLOAD_BYTES = 8000
"""PostgreSQL rejects NOTIFY payloads of 8000 bytes or more."""


class JobNotice(BaseModel):
    """Job `job_id` has events up to `sequence`; `state` is the job's state then, if known."""

    # Unknown fields are ignored so that processes of two versions can share one channel.
    model_config = ConfigDict(frozen=True, extra="ignore")

    job_id: str = Field(min_length=1, max_length=256)
    sequence: int = Field(ge=0)
    state: str | None = Field(default=None, max_length=32)
    kind: str = Field(default=EVENT, pattern=r"^[a-z][a-z0-9_]{0,31}$")

    @model_validator(mode="after")
    def _all_jobs_only_for_resync(self) -> Self:
        if self.job_id == ALL_JOBS and self.kind != RESYNC:
            raise ValueError(f"job_id {ALL_JOBS!r} is reserved for notices of kind {RESYNC!r}")
        return self

    @classmethod
    def resync(cls, job_id: str = ALL_JOBS) -> JobNotice:
        """A notice that tells subscribers of `job_id` (or of every job) to re-read their log."""
        return cls(job_id=job_id, sequence=0, state=None, kind=RESYNC)

    @property
    def is_resync(self) -> bool:
        return self.kind == RESYNC

    def to_payload(self) -> str:
        """The compact JSON text sent through NOTIFY (always under `MAX_PAYLOAD_BYTES`)."""
        payload = self.model_dump_json()
        size = len(payload.encode())
        if size >= MAX_PAYLOAD_BYTES:  # cannot happen with the field limits above; kept as a guard
            raise ValueError(f"notice payload is {size} bytes; NOTIFY takes < {MAX_PAYLOAD_BYTES}")
        return payload

    @classmethod
    def from_payload(cls, payload: str | bytes) -> JobNotice:
        """Parse a NOTIFY payload; raises pydantic.ValidationError when it is not a notice."""
        return cls.model_validate_json(payload)


def newest(old: JobNotice, new: JobNotice) -> JobNotice:
    """The notice to keep when two for the same job are coalesced.

    A pending resync already makes the subscriber re-read everything after its cursor, so it
    absorbs ordinary notices; otherwise the higher sequence wins (the later one on a tie).
    """
    if old.is_resync:
        return old
    if new.is_resync:
        return new
    return new if new.sequence >= old.sequence else old
