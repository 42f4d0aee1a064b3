"""Job and instance states, the changes allowed between them, and the record of each change.

The same seven states describe a job and each of its task instances, so a client sees one
vocabulary. The allowed changes are written out here once; anything else is a bug in the engine
and raises instead of silently producing a job that is, say, RUNNING after SUCCEEDED.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class JobState(StrEnum):
    WAITING = "WAITING"  # queued: not placed yet (or waiting for a new attempt)
    STARTING = "STARTING"  # placed: containers are being created, none runs yet
    RUNNING = "RUNNING"  # at least one instance of the current attempt has run
    STOPPING = "STOPPING"  # the attempt is being stopped (user stop, or its outcome is decided)
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def is_final(self) -> bool:
        return self in _FINAL

    def can_become(self, other: JobState) -> bool:
        """Whether a job may change from this state to `other`."""
        return other in JOB_TRANSITIONS[self]


_FINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})
_ENDS = _FINAL | {JobState.STOPPING}

# A job goes forward WAITING -> STARTING -> RUNNING within an attempt, may skip ahead when the
# backend reports facts late (an instance seen running before it was seen placed), may be
# stopped or end from any live state, and goes back to WAITING only for a new attempt.
JOB_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.WAITING: frozenset({JobState.STARTING, JobState.RUNNING} | _ENDS),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.WAITING} | _ENDS),
    JobState.RUNNING: frozenset({JobState.WAITING} | _ENDS),
    JobState.STOPPING: frozenset({JobState.WAITING} | _FINAL),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.STOPPED: frozenset(),
}

# An instance has the same shape, except that once it is being stopped it can only end; it goes
# back to WAITING only when it is retried on its own (task retry, gang allocation off).
INSTANCE_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.WAITING: frozenset({JobState.STARTING, JobState.RUNNING} | _ENDS),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.WAITING} | _ENDS),
    JobState.RUNNING: frozenset({JobState.WAITING} | _ENDS),
    JobState.STOPPING: _FINAL,
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.STOPPED: frozenset(),
}


class IllegalTransition(ValueError):
    """The engine tried a state change the rules above do not allow."""


def check_transition(old: JobState, new: JobState, *, instance: bool = False) -> None:
    """Raise IllegalTransition unless `old -> new` is allowed for a job (or an instance)."""
    table = INSTANCE_TRANSITIONS if instance else JOB_TRANSITIONS
    if new not in table[old]:
        what = "an instance" if instance else "a job"
        allowed = ", ".join(sorted(table[old])) or "nothing (it is final)"
        raise IllegalTransition(
            f"{what} cannot go from {old} to {new}; from {old} it may become {allowed}"
        )


class Transition(BaseModel):
    """One state change, ready to be stored as an event row.

    `role` and `index` are set for an instance's change and None for the job's own. `from_state`
    is None for the first entry, the job being created.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    attempt: int
    from_state: JobState | None
    to_state: JobState
    reason: str
    role: str | None = None
    index: int | None = None
