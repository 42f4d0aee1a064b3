"""The record a job machine keeps: the job, its attempts and its current attempt's instances,
as the store saves them and the API shows them. The machine (`server.jobs.machine`) decides
what goes in it; this module only holds the values, so the store and the API read them without
importing the job engine."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from server.shapes.exit_info import ExitInfo
from server.shapes.job_states import JobState, Transition


class InstanceView(BaseModel):
    """One task instance of the current attempt, as a user sees it."""

    role: str
    index: int
    attempt: int
    # its current run: 1, then one more each time it is retried on its own; the backend is
    # asked for that run by number and tells it on the run's events (InstanceEvent.run)
    task_attempt: int = 1
    task_retries: int = 0
    task_accountable_retries: int = 0
    state: JobState = JobState.WAITING
    reason: str = "waiting to be placed"
    exit_code: int | None = None  # what the container returned
    exit: ExitInfo | None = None  # how it ended, classified
    node: str | None = None
    host_ip: str | None = None
    ports: dict[str, list[int]] = Field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    retried_at: datetime | None = None  # when its latest run on its own was decided

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def exit_reason(self) -> str | None:
        return self.exit.reason if self.exit else None

    @property
    def ended(self) -> bool:
        return self.state.is_final


class Completion(BaseModel):
    """How an attempt's outcome was decided, and which instance decided it."""

    message: str
    exit: ExitInfo
    role: str | None = None  # the role and index whose end fired a rule; None otherwise
    index: int | None = None
    by_user: bool = False


class AttemptRecord(BaseModel):
    attempt: int
    launched_at: datetime
    completion: Completion | None = None  # set once the outcome is decided
    stop_issued: bool = False
    state: JobState | None = None  # SUCCEEDED / FAILED / STOPPED once every instance ended
    finished_at: datetime | None = None


class JobRecord(BaseModel):
    """Everything the machine knows; each field maps to a stored column or row."""

    job_id: str
    state: JobState = JobState.WAITING
    reason: str = "waiting: submitted"
    attempt: int = 1
    retries: int = 0  # every retry (OpenPAI's `retries`)
    accountable_retries: int = 0  # those counted against the retry count
    created_at: datetime
    started_at: datetime | None = None  # when an instance first ran
    completed_at: datetime | None = None
    stop_reason: str | None = None  # set when a user asked to stop
    exit: ExitInfo | None = None  # how the job ended (OpenPAI's appExitCode and spec)
    instances: list[InstanceView] = Field(default_factory=list)  # the current attempt's
    attempts: list[AttemptRecord] = Field(default_factory=list)
    transitions: list[Transition] = Field(default_factory=list)  # job's and instances', in order

    @property
    def current(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def trigger(self) -> Completion | None:
        """What decided the latest decided attempt (OpenPAI's appExitTrigger*)."""
        for attempt in reversed(self.attempts):
            if attempt.completion is not None:
                return attempt.completion
        return None

    @property
    def platform_retries(self) -> int:
        return self.retries - self.accountable_retries
