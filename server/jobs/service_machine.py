"""The job machine as the service drives it, with the two inputs only a long-running service has.

`StartingTimedOut` (an instance stuck starting is LOST, checked in order with the backend's
events) and `BackendOutage` (no state change, only the reason and a note); details:
docs/architecture.md, The job machine's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from backends.base import EventKind, InstanceEvent, utcnow
from server.jobs.machine import Action, JobMachine
from server.jobs.policy import JobPolicy
from server.shapes.job_record import InstanceView, JobRecord
from server.shapes.job_states import JobState, Transition


class StartingTimedOut(InstanceEvent):
    """LOST for an instance stuck in STARTING; ignored unless, when it is applied, the same run
    of the instance is still STARTING."""

    kind: EventKind = EventKind.LOST
    task_attempt: int = 1


class BackendOutage(InstanceEvent):
    """The backend's engine stopped answering (`over=False`, the reason says since when) or
    answers again (`over=True`). It changes no state: the job's reason says what it waits for
    meanwhile, and an event is recorded each way (`ServiceMachine.take_notes`)."""

    kind: EventKind = EventKind.WAITING
    over: bool = False


BACKEND_UNREACHABLE = "BACKEND_UNREACHABLE"
BACKEND_REACHABLE = "BACKEND_REACHABLE"


@dataclass(frozen=True)
class Note:
    """An event to record that is no change of state (its type is one of the names above)."""

    type: str
    at: datetime
    message: str
    state: JobState
    attempt: int
    position: int  # how many transitions the machine had made: it is recorded after those


class ServiceMachine(JobMachine):
    """The job machine as the service drives it: it also understands `StartingTimedOut` and
    `BackendOutage`."""

    def __init__(
        self,
        policy: JobPolicy,
        job_id: str | None = None,
        *,
        at: datetime | None = None,
        record: JobRecord | None = None,
    ) -> None:
        super().__init__(policy, job_id, at=at, record=record)
        self._notes: list[Note] = []
        self._outage: tuple[str, str] | None = None  # (the outage's reason, the one it hid)

    def take_notes(self) -> list[Note]:
        """The events recorded since the last call, to be saved with the machine."""
        notes, self._notes = self._notes, []
        return notes

    def apply(self, event: InstanceEvent, *, log_tail: str = "") -> list[Action]:
        if isinstance(event, BackendOutage):
            self._backend_outage(event)
            return []
        if (
            event.kind is EventKind.WAITING
            and self._outage is not None
            and event.reason == self._outage[0]
        ):
            return []  # the backend waits for the engine: the reason says so already
        if self._outage is not None and not isinstance(event, StartingTimedOut):
            # a fact from the backend: it reaches its engine again (the service may not have
            # seen it yet); say so before what it applies of the time it was away
            self._outage_over("the backend answers again", utcnow())
        if isinstance(event, StartingTimedOut):
            view = self._view_of(event)
            if (
                view is None
                or view.attempt != event.attempt
                or view.task_attempt != event.task_attempt
                or view.state is not JobState.STARTING
            ):
                return []
        return super().apply(event, log_tail=log_tail)

    def _backend_outage(self, event: BackendOutage) -> None:
        """Show the outage as the job's reason while it lasts; afterwards the reason it hid,
        unless something that happened meanwhile gave the job a newer one."""
        r = self.record
        if r.state.is_final:
            return
        if not event.over:
            text = event.reason or "the backend is unreachable; waiting"
            hidden = self._outage[1] if self._outage else r.reason
            if self._outage is not None and self._outage[0] == text:
                return
            self._outage = (text, hidden)
            r.reason = text
            self._note(BACKEND_UNREACHABLE, event.at, text)
            return
        self._outage_over(event.reason or "the backend answers again", event.at)

    def _outage_over(self, message: str, at: datetime) -> None:
        r = self.record
        if self._outage is None:
            return
        text, hidden = self._outage
        self._outage = None
        if r.reason == text:
            r.reason = hidden
        self._note(BACKEND_REACHABLE, at, message)

    def _note(self, kind: str, at: datetime, message: str) -> None:
        r = self.record
        self._notes.append(Note(kind, at, message, r.state, r.attempt, len(r.transitions)))

    def _view_of(self, event: InstanceEvent) -> InstanceView | None:
        if event.role is None or event.index is None:
            return None
        return self.instance(event.role, event.index)


def stuck_in_starting(
    machine: JobMachine, *, now: datetime, timeout: float
) -> list[StartingTimedOut]:
    """A `StartingTimedOut` for every instance of the current attempt that has been STARTING
    for longer than `timeout` seconds."""
    stuck = []
    for view in machine.instances:
        if view.state is not JobState.STARTING:
            continue
        since = entered(machine.transitions, view, JobState.STARTING)
        if since is None or (now - since).total_seconds() <= timeout:
            continue
        stuck.append(
            StartingTimedOut(
                job_id=machine.job_id,
                attempt=view.attempt,
                role=view.role,
                index=view.index,
                task_attempt=view.task_attempt,
                run=view.task_attempt,
                at=now,
                reason=f"still not running {timeout:g} s after it was placed (starting timeout)",
            )
        )
    return stuck


def entered(transitions: list[Transition], view: InstanceView, state: JobState) -> datetime | None:
    """When the instance last went into `state` within its attempt, or None."""
    for change in reversed(transitions):
        if (
            change.role == view.role
            and change.index == view.index
            and change.attempt == view.attempt
            and change.to_state is state
        ):
            return change.at
    return None
