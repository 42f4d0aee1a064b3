"""Bring a stored job back in line with its backend after the server was down.

`plan_resumption` compares a job's stored machine with what the backend reports and returns the
facts to apply (LOST for what the backend does not know) and the actions that were in flight, to
be made again; `stale_attempts` are released (docs/reliability.md, The server killed at any moment).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from backends.base import (
    EventKind,
    InstanceEvent,
    InstanceReport,
    InstanceStatus,
)
from server.jobs.machine import (
    Action,
    LaunchAttempt,
    MachineSnapshot,
    RetryInstance,
    StopAttempt,
    events_for_report,
)
from server.jobs.service_machine import ServiceMachine
from server.shapes.job_record import InstanceView
from server.shapes.job_states import JobState

UNKNOWN_TO_BACKEND = "the backend has no record of it after the server restarted"


@dataclass
class Resumption:
    """What one unfinished job's runner does before it goes on (see the module docstring)."""

    machine: ServiceMachine
    events: list[InstanceEvent] = field(default_factory=list)
    pending: list[Action] = field(default_factory=list)
    fresh: bool = False  # never started: run it from the start instead of resuming


def plan_resumption(snapshot: MachineSnapshot, reports: Iterable[InstanceReport]) -> Resumption:
    """The resumption of the job whose saved machine is `snapshot`, given what the backend
    reported (reports of other jobs and other attempts are left out)."""
    machine = ServiceMachine.restore(snapshot)
    record = snapshot.record
    current = record.current
    if current is None:
        return Resumption(machine, fresh=True)
    if record.state.is_final:
        return Resumption(machine)
    known = _reports_of_attempt(snapshot, reports)
    if _never_reached_backend(snapshot, known):
        # saved, then the server stopped before the backend was asked: ask it now
        launch = LaunchAttempt(attempt=record.attempt, reason="launched after a server restart")
        return Resumption(machine, pending=[launch])
    plan = Resumption(machine)
    live = [view for view in record.instances if not view.ended]
    for view in live:
        report = known.get((view.role, view.index))
        if report is None:
            plan.events.append(_lost(record.job_id, view, UNKNOWN_TO_BACKEND))
        elif _retry_not_started(view, report, stop_issued=current.stop_issued):
            plan.pending.append(_start_again(record.attempt, view))
        else:
            plan.events.extend(events_for_report(report))
    if current.stop_issued and live:
        plan.pending.insert(0, _stop_again(snapshot))
    return plan


def _reports_of_attempt(
    snapshot: MachineSnapshot, reports: Iterable[InstanceReport]
) -> dict[tuple[str, int], InstanceReport]:
    """The reports of the saved job's current attempt, by (role, index)."""
    record = snapshot.record
    return {
        (r.key.role, r.key.index): r
        for r in reports
        if r.key.job_id == record.job_id and r.key.attempt == record.attempt
    }


def _never_reached_backend(
    snapshot: MachineSnapshot, known: dict[tuple[str, int], InstanceReport]
) -> bool:
    """Whether the current attempt was saved but the backend was never asked to launch it:
    the backend knows none of it and every instance still waits for its first run."""
    record = snapshot.record
    current = record.current
    return (
        not known
        and current is not None
        and current.completion is None
        and all(v.state is JobState.WAITING and v.task_attempt == 1 for v in record.instances)
    )


def _retry_not_started(view: InstanceView, report: InstanceReport, *, stop_issued: bool) -> bool:
    """Whether the instance was retried on its own but the backend only shows the run before
    the retry (a run that ended while the server was down names itself, and its end is
    applied instead)."""
    return (
        view.state is JobState.WAITING
        and view.task_attempt > 1
        and report.status is InstanceStatus.EXITED
        and (report.run is None or report.run < view.task_attempt)
        and not stop_issued
    )


def _start_again(attempt: int, view: InstanceView) -> RetryInstance:
    return RetryInstance(
        attempt=attempt,
        role=view.role,
        index=view.index,
        task_attempt=view.task_attempt,
        reason="started again after a server restart",
    )


def _stop_again(snapshot: MachineSnapshot) -> StopAttempt:
    """The stop that was issued before the server stopped (its instances may still run)."""
    record = snapshot.record
    completion = record.current.completion if record.current else None
    reason = completion.message if completion else "stopped"
    grace = snapshot.policy.stop_grace_seconds
    return StopAttempt(attempt=record.attempt, reason=reason, grace_seconds=grace)


def stale_attempts(
    reports: Iterable[InstanceReport], current: dict[str, int]
) -> list[tuple[str, int]]:
    """The (job id, attempt) pairs the backend holds that are not the current attempt of an
    unfinished job (`current`: job id -> its attempt): attempts of jobs that ended or that the
    store does not know, and earlier attempts whose release was cut short."""
    found = {(r.key.job_id, r.key.attempt) for r in reports}
    return sorted(pair for pair in found if current.get(pair[0]) != pair[1])


def _lost(job_id: str, view: InstanceView, reason: str) -> InstanceEvent:
    return InstanceEvent(
        job_id=job_id,
        attempt=view.attempt,
        role=view.role,
        index=view.index,
        run=view.task_attempt,
        kind=EventKind.LOST,
        reason=reason,
    )
