"""How the job machine reads a backend's facts about one instance.

Which run an event is about, how an instance's end is classified and told, and which events
replay an instance a backend found after a restart: reading, kept apart from the decisions in
`machine.py` that act on what was read.
"""

from __future__ import annotations

from typing import Any

from backends.base import EventKind, InstanceEvent, InstanceReport, InstanceStatus, utcnow
from server.jobs import exit_codes
from server.shapes.exit_info import ExitInfo
from server.shapes.job_record import InstanceView


def _other_run(view: InstanceView, event: InstanceEvent) -> str | None:
    """Why the event is not about the instance's current run, or None when it is.

    A backend may tell one end twice (its records at a restart, and its event stream), or late,
    and by then the instance may run again on its own: a fact about an earlier run must not end
    the run that replaced it, nor count as another death. The event names its run; an event
    that does not (a record older than run numbers) is taken as the earlier run's when it is
    dated no later than the retry, which is decided at the time of that end."""
    if event.run is not None:
        if event.run == view.task_attempt:
            return None
        return f"it is about run {event.run}; run {view.task_attempt} is current"
    if view.retried_at is not None and event.at <= view.retried_at:
        return "it happened before the instance was retried on its own"
    return None


def _classify(event: InstanceEvent, log_tail: str) -> ExitInfo:
    if event.completion_code is not None and event.kind is not EventKind.STOPPED:
        spec = exit_codes.spec_for(event.completion_code)
        text = f"{event.reason}; {spec.description}" if event.reason else spec.description
        return exit_codes.info(event.completion_code, text, exit_code=event.exit_code)
    if event.kind is EventKind.START_FAILED:
        return exit_codes.classify(event.exit_code, start_failed_reason=event.reason or "")
    if event.kind is EventKind.LOST:
        return exit_codes.vanished(event.reason)
    if event.kind is EventKind.STOPPED and event.exit_code is None and not event.oom_killed:
        return exit_codes.vanished(event.reason or "stopped from outside the job engine")
    return exit_codes.classify(
        event.exit_code,
        oom_killed=event.oom_killed,
        oom_reason=event.reason if event.oom_killed else None,
        log_tail=log_tail,
    )


def _story(view: InstanceView, ended: ExitInfo) -> str:
    """E.g. 'worker-0 exited with 1: the command failed and the cause was not recognised'."""
    prefix = f"exit code {ended.exit_code}: "
    if ended.exit_code is not None and ended.reason.startswith(prefix):
        return f"{view.name} exited with {ended.exit_code}: {ended.reason[len(prefix) :]}"
    return f"{view.name} {ended.reason}"


def events_for_report(report: InstanceReport) -> list[InstanceEvent]:
    """The events that bring a machine up to date with an instance a backend found after a
    restart (`Backend.reconcile`); facts the machine already has are ignored when applied."""
    key = report.key
    if report.status is InstanceStatus.PENDING and report.placement is None:
        return []  # waiting to be placed (again): nothing has happened to it yet
    base: dict[str, Any] = {
        "job_id": key.job_id,
        "attempt": key.attempt,
        "role": key.role,
        "index": key.index,
        "run": report.run,
    }
    events = [
        InstanceEvent(
            kind=EventKind.PLACED,
            placement=report.placement,
            at=report.started_at or utcnow(),
            **base,
        )
    ]
    if report.status is InstanceStatus.PENDING:
        return events
    if report.started_at is not None or report.status is InstanceStatus.RUNNING:
        events.append(
            InstanceEvent(kind=EventKind.STARTED, at=report.started_at or utcnow(), **base)
        )
    if report.status is InstanceStatus.EXITED:
        events.append(
            InstanceEvent(
                kind=EventKind.EXITED,
                exit_code=report.exit_code,
                oom_killed=report.oom_killed,
                at=report.finished_at or utcnow(),
                **base,
            )
        )
    return events
