"""The job engine's counters and histograms, fed by the job service as changes are stored
(`JobService.observer`): launches and how long they take, how long attempts wait in the queue,
how instances end (by exit-code class) and how often the backend goes away.

Everything is read off the stored transitions, so a figure counts what the event log says
happened, once, whichever backend ran the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from backends.base import BackendHealth
from server.jobs.machine import MachineSnapshot
from server.shapes.exit_info import ExitInfo
from server.shapes.job_record import JobRecord
from server.shapes.job_states import JobState, Transition
from server.shapes.values import NewEvent

# Seconds: from well under a second (a warm Docker engine) to the minutes an image pull or a
# busy cluster's queue takes.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

# How an instance ended, in OpenPAI's terms: the behaviour its exit-code entry gives (transient,
# transient_conflict, permanent, unknown), except success and stops, which have classes of
# their own; `retried` is a failure retried on its own (its class is not kept).
SUCCEEDED, STOPPED, RETRIED, UNKNOWN = "succeeded", "stopped", "retried", "unknown"


def exit_class(ended: ExitInfo) -> str:
    """The class of an instance's end."""
    if ended.succeeded:
        return SUCCEEDED
    if ended.is_stop:
        return STOPPED
    return ended.behaviour.value.lower()


class JobMetrics:
    """The service's observer (server.jobs.observer.JobObserver) keeping the figures."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.launches = Counter(
            "paigraph_launches",
            "Attempts placed on the backend (a job leaving the queue, first run or retry).",
            registry=registry,
        )
        self.launch_seconds = Histogram(
            "paigraph_launch_duration_seconds",
            "From an attempt being placed on the backend to its first instance running.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_wait_seconds = Histogram(
            "paigraph_queue_wait_seconds",
            "How long an attempt waited in the queue before the backend placed it.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.exits = Counter(
            "paigraph_instance_exits",
            "Task instances that ended, by exit-code class.",
            ["exit_class"],
            registry=registry,
        )
        self.outages = Counter(
            "paigraph_backend_outages",
            "Times the backend's engine stopped answering.",
            registry=registry,
        )
        self._healthy = True

    def saved(self, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]) -> None:
        record = snapshot.record
        for change in changes:
            if not isinstance(change, Transition):
                continue
            if change.role is None:
                self._job_changed(record, change)
            else:
                self._instance_changed(record, change)

    def backend_health(self, health: BackendHealth) -> None:
        if self._healthy and not health.healthy:
            self.outages.inc()
        self._healthy = health.healthy

    def _job_changed(self, record: JobRecord, change: Transition) -> None:
        placed = _placed_at(record, change)
        if change.from_state is JobState.WAITING and change.to_state in _PLACED:
            self.launches.inc()
            queued = next(
                (a.launched_at for a in record.attempts if a.attempt == change.attempt), None
            )
            if queued is not None:
                self.queue_wait_seconds.observe(_seconds(queued, change.at))
        if change.to_state is JobState.RUNNING and placed is not None:
            self.launch_seconds.observe(_seconds(placed, change.at))

    def _instance_changed(self, record: JobRecord, change: Transition) -> None:
        if change.to_state.is_final:
            self.exits.labels(_class_of_end(record, change)).inc()
        elif change.to_state is JobState.WAITING and change.from_state in _PLACED:
            self.exits.labels(RETRIED).inc()  # a failed instance retried on its own


_PLACED = frozenset({JobState.STARTING, JobState.RUNNING})


def _placed_at(record: JobRecord, change: Transition) -> datetime | None:
    """When the attempt of `change` left the queue: the job's own change out of WAITING in that
    attempt (`change` itself, perhaps); None when the record has none."""
    if change.from_state is JobState.WAITING:
        return change.at
    for earlier in reversed(record.transitions):
        if (
            earlier.role is None
            and earlier.attempt == change.attempt
            and earlier.from_state is JobState.WAITING
            and earlier.to_state in _PLACED
        ):
            return earlier.at
    return None


def _class_of_end(record: JobRecord, change: Transition) -> str:
    """The class of the end `change` records: from the instance's exit as the record keeps it,
    else (its attempt was replaced by a retry in the same change) from the attempt's deciding
    exit when this instance decided it, else from the state it ended in."""
    for view in record.instances:
        if (
            (view.role, view.index, view.attempt) == (change.role, change.index, change.attempt)
            and view.ended
            and view.exit is not None
        ):
            return exit_class(view.exit)
    for attempt in record.attempts:
        decided = attempt.completion
        if (
            attempt.attempt == change.attempt
            and decided is not None
            and (decided.role, decided.index) == (change.role, change.index)
        ):
            return exit_class(decided.exit)
    if change.to_state is JobState.SUCCEEDED:
        return SUCCEEDED
    if change.to_state is JobState.STOPPED:
        return STOPPED
    return UNKNOWN


def _seconds(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds(), 0.0)
