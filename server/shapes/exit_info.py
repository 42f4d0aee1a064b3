"""How an instance or an attempt ended (`ExitInfo`), with the completion codes and retry
behaviours it is told in: stored with the job's record, so kept apart from the engine that
classifies an end (`server.jobs.exit_codes`, which holds the table and the rules)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Behaviour(StrEnum):
    TRANSIENT = "TRANSIENT"
    TRANSIENT_CONFLICT = "TRANSIENT_CONFLICT"
    PERMANENT = "PERMANENT"
    UNKNOWN = "UNKNOWN"


class Reaction(StrEnum):
    ALWAYS_RETRY = "ALWAYS_RETRY"
    ALWAYS_BACKOFF_RETRY = "ALWAYS_BACKOFF_RETRY"
    RETRY_TO_MAX = "RETRY_TO_MAX"
    NEVER_RETRY = "NEVER_RETRY"


# Codes the engine itself produces.
SUCCEEDED = 0
INSTANCE_VANISHED = -101
CREATION_REFUSED = -200
STOP_REQUESTED = -210
ATTEMPT_COMPLETED = -220
ENGINE_FAILED = -1100  # CreateFrameworkPermanentFailed: accepted, but the engine could not run it
UNRECOGNISED_FAILURE = 255
UNDEFINED_NEGATIVE = -8000
STOP_CODES = frozenset({STOP_REQUESTED, ATTEMPT_COMPLETED, -230})
# Codes of paigraph's own, in a range OpenPAI's spec leaves free: a prerequisite the fetch
# policy refuses is the user's error and deserves its own reason, not "creation error".
PREREQUISITE_FETCH_REFUSED = 240
START_DEPENDENCY_FAILED = 241  # backends.start_gate.DEPENDENCY_FAILED: a wait for a role failed
OWN_CODES = frozenset({PREREQUISITE_FETCH_REFUSED, START_DEPENDENCY_FAILED})


class ExitInfo(BaseModel):
    """How one instance (or one attempt) ended, with the text shown to the user."""

    model_config = ConfigDict(frozen=True)

    # The completion code; spec_for(code) always gives this entry's phrase and behaviour. An
    # unrecognised container exit keeps its own code here unless the table uses that number.
    code: int
    exit_code: int | None  # what the container itself returned; None when it never ran or vanished
    phrase: str
    behaviour: Behaviour
    reaction: Reaction
    reason: str  # e.g. "exit code 137: killed by SIGKILL from outside the program (...)"
    solution: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.code == SUCCEEDED

    @property
    def is_stop(self) -> bool:
        """Ended because a stop was asked for; such an end is never retried."""
        return self.code in STOP_CODES
