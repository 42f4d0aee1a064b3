"""The values a job machine works with: the actions it asks for and its snapshot.

They live apart from `machine.py` so that the machine's module holds only its decisions, and
so that code that carries out or saves these values (the runner, the recorder) reads them
without the machine's logic. The record it keeps (`JobRecord` and its parts) is a stored shape,
in `server.shapes.job_record`. `server.jobs.machine` re-exports every name here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from server.jobs.policy import JobPolicy
from server.shapes.exit_info import ExitInfo
from server.shapes.job_record import JobRecord
from server.shapes.job_states import JobState

# --- actions ---------------------------------------------------------------------------------


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LaunchAttempt(_Action):
    kind: Literal["launch"] = "launch"
    attempt: int
    delay_seconds: float = 0.0  # wait this long first (a retry after a resource conflict)
    reason: str = ""


class StopAttempt(_Action):
    kind: Literal["stop"] = "stop"
    attempt: int
    reason: str
    grace_seconds: float


class ReleaseAttempt(_Action):
    kind: Literal["release"] = "release"
    attempt: int


class RetryInstance(_Action):
    kind: Literal["retry_instance"] = "retry_instance"
    attempt: int
    role: str
    index: int
    task_attempt: int  # 2 for the first retry of this instance
    delay_seconds: float = 0.0
    reason: str = ""


class Finish(_Action):
    kind: Literal["finish"] = "finish"
    state: JobState
    reason: str
    exit: ExitInfo | None = None


Action = Annotated[
    LaunchAttempt | StopAttempt | ReleaseAttempt | RetryInstance | Finish,
    Field(discriminator="kind"),
]


# --- the record --------------------------------------------------------------------------------


class MachineSnapshot(BaseModel):
    policy: JobPolicy
    record: JobRecord
