"""The job state machine: backend facts in, job and instance states and runner actions out.

`JobMachine` is pure and deterministic and keeps everything in its `JobRecord`, so the same
machine runs in `paigraph run` and the service and can be stored and rebuilt. Its actions and
rules: docs/architecture.md, The job machine's rules.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Self

from backends.base import EventKind, InstanceEvent, utcnow
from server.jobs import exit_codes
from server.jobs.completion import completion_after
from server.jobs.machine_events import _classify, _other_run, _story, events_for_report
from server.jobs.machine_values import (
    Action,
    Finish,
    LaunchAttempt,
    MachineSnapshot,
    ReleaseAttempt,
    RetryInstance,
    StopAttempt,
)
from server.jobs.policy import JobPolicy, Outcome
from server.shapes.exit_info import ExitInfo
from server.shapes.job_record import AttemptRecord, Completion, InstanceView, JobRecord
from server.shapes.job_states import JobState, Transition, check_transition

__all__ = [
    "Action",
    "Finish",
    "JobMachine",
    "LaunchAttempt",
    "MachineSnapshot",
    "ReleaseAttempt",
    "RetryInstance",
    "StopAttempt",
    "events_for_report",
]

log = logging.getLogger(__name__)

_ENDING = frozenset({EventKind.EXITED, EventKind.START_FAILED, EventKind.STOPPED, EventKind.LOST})
_PROGRESS = {JobState.WAITING: 0, JobState.STARTING: 1, JobState.RUNNING: 2}


# --- the machine -------------------------------------------------------------------------------


class JobMachine:
    """Decides a job's state from backend facts; see the module docstring for the protocol."""

    def __init__(
        self,
        policy: JobPolicy,
        job_id: str | None = None,
        *,
        at: datetime | None = None,
        record: JobRecord | None = None,
    ) -> None:
        if record is None:
            if job_id is None:
                raise ValueError("a new JobMachine needs a job_id")
            when = at or utcnow()
            record = JobRecord(job_id=job_id, created_at=when)
            record.instances = _views(policy, record.attempt)
            record.transitions.append(
                Transition(
                    at=when, attempt=1, from_state=None, to_state=record.state, reason=record.reason
                )
            )
        self._policy = policy
        self._record = record

    # --- reading ---

    @property
    def policy(self) -> JobPolicy:
        return self._policy

    @property
    def record(self) -> JobRecord:
        """The live record; treat it as read-only."""
        return self._record

    @property
    def job_id(self) -> str:
        return self._record.job_id

    @property
    def state(self) -> JobState:
        return self._record.state

    @property
    def reason(self) -> str:
        return self._record.reason

    @property
    def attempt(self) -> int:
        return self._record.attempt

    @property
    def retries(self) -> int:
        return self._record.retries

    @property
    def is_final(self) -> bool:
        return self._record.state.is_final

    @property
    def instances(self) -> list[InstanceView]:
        return self._record.instances

    @property
    def transitions(self) -> list[Transition]:
        return self._record.transitions

    def instance(self, role: str, index: int) -> InstanceView | None:
        return next(
            (v for v in self._record.instances if v.role == role and v.index == index), None
        )

    def snapshot(self) -> MachineSnapshot:
        return MachineSnapshot(policy=self._policy, record=self._record.model_copy(deep=True))

    @classmethod
    def restore(cls, snapshot: MachineSnapshot) -> Self:
        return cls(snapshot.policy, record=snapshot.record.model_copy(deep=True))

    # --- inputs ---

    def start(self, *, at: datetime | None = None) -> list[Action]:
        """Launch the first attempt; does nothing when the job was started already."""
        record = self._record
        if record.attempts or record.state.is_final:
            return []
        when = at or utcnow()
        record.attempts.append(AttemptRecord(attempt=record.attempt, launched_at=when))
        record.reason = f"waiting: attempt {record.attempt} queued"
        return [LaunchAttempt(attempt=record.attempt, reason="first attempt")]

    def apply(self, event: InstanceEvent, *, log_tail: str = "") -> list[Action]:
        """Apply one backend event. Events of other jobs and other attempts are ignored.

        `log_tail` is the end of the instance's log, worth passing with a failed EXITED event:
        known failures in it ("command not found", an ImportError ...) are classified.
        """
        if not self._concerns(event):
            return []
        if event.kind is EventKind.WAITING:
            self._note_waiting(event)
            return []
        view = self._live_view(event)
        if view is None:
            return []
        if event.placement is not None:
            view.node = event.placement.node
            view.host_ip = event.placement.host_ip
            view.ports = {k: list(v) for k, v in event.placement.ports.items()}
        if event.kind is EventKind.PLACED:
            return self._placed(view, event)
        if event.kind is EventKind.STARTED:
            return self._started(view, event)
        if event.kind in _ENDING:
            return self._instance_ended(view, event, log_tail)
        return []

    def _concerns(self, event: InstanceEvent) -> bool:
        """Whether the event is about this job's current attempt while the job is not over."""
        record = self._record
        return (
            not record.state.is_final
            and bool(record.attempts)
            and event.job_id == record.job_id
            and event.attempt == record.attempt
        )

    def _note_waiting(self, event: InstanceEvent) -> None:
        """A waiting attempt says what it waits for, until its outcome is decided."""
        if self._record.state is JobState.WAITING and self._decided is None:
            self._record.reason = _waiting_text(event.reason)

    def _live_view(self, event: InstanceEvent) -> InstanceView | None:
        """The instance the event is about, or None when it has ended or the event comes from
        another run of it (a late event of a replaced container)."""
        key = event.key
        view = self.instance(key.role, key.index) if key is not None else None
        if view is None or view.ended:
            return None
        if (other := _other_run(view, event)) is not None:
            log.debug(
                "job %s: %s event of %s dropped: %s",
                self._record.job_id,
                event.kind,
                view.name,
                other,
            )
            return None
        return view

    def _placed(self, view: InstanceView, event: InstanceEvent) -> list[Action]:
        """The instance holds its resources: a waiting one is starting now."""
        if view.state is JobState.WAITING:
            placed = f"placed on {view.node or 'a node'}"
            note = f"; {event.reason}" if event.reason else ""  # e.g. limits scaled
            self._move(view, JobState.STARTING, event.at, placed + note)
        return self._progress(event.at)

    def _started(self, view: InstanceView, event: InstanceEvent) -> list[Action]:
        """The instance runs the user's command; the first start is kept as the start time."""
        record = self._record
        view.started_at = view.started_at or event.at
        record.started_at = record.started_at or event.at
        if view.state in (JobState.WAITING, JobState.STARTING):
            self._move(view, JobState.RUNNING, event.at, f"running on {view.node or 'a node'}")
        return self._progress(event.at)

    def request_stop(
        self, reason: str = "stop requested by user", *, at: datetime | None = None
    ) -> list[Action]:
        """A user asked to stop the job: it ends STOPPED unless its outcome was already decided."""
        record = self._record
        if record.state.is_final or record.stop_reason is not None:
            return []
        when = at or utcnow()
        record.stop_reason = reason
        current = record.current
        if current is None:  # never launched: nothing to stop
            for view in record.instances:
                self._move(view, JobState.STOPPED, when, f"stopped: {reason}")
            return self._finish(JobState.STOPPED, f"stopped: {reason}", None, when, release=False)
        if current.completion is None:
            current.completion = Completion(
                message=f"stopped: {reason}",
                exit=exit_codes.info(exit_codes.STOP_REQUESTED, f"stopped: {reason}"),
                by_user=True,
            )
        if current.stop_issued:
            return []
        return self._stop_attempt(when)

    def stop_completed(self, attempt: int, *, at: datetime | None = None) -> list[Action]:
        """`backend.stop` returned for this attempt: every instance still shown live is gone."""
        record = self._record
        current = record.current
        if record.state.is_final or current is None or attempt != record.attempt:
            return []
        when = at or utcnow()
        if current.completion is None:
            current.completion = Completion(
                message="stopped: the attempt was stopped",
                exit=exit_codes.info(exit_codes.STOP_REQUESTED, "stopped: the attempt was stopped"),
                by_user=True,
            )
        for view in record.instances:
            if not view.ended:
                self._end_stopped(view, None, when)
        return self._after_end(when)

    def launch_refused(
        self, attempt: int, reason: str, *, at: datetime | None = None
    ) -> list[Action]:
        """The backend refused the attempt (it can never run there): the job FAILED, no retry."""
        record = self._record
        current = record.current
        if record.state.is_final or current is None or attempt != record.attempt:
            return []
        when = at or utcnow()
        text = f"refused: {reason}"
        ended = exit_codes.info(exit_codes.CREATION_REFUSED, text)
        for view in record.instances:
            if not view.ended:
                view.exit, view.finished_at = ended, when
                self._move(view, JobState.FAILED, when, text)
        current.completion = Completion(message=text, exit=ended)
        current.state, current.finished_at = JobState.FAILED, when
        return self._finish(JobState.FAILED, text, ended, when, release=False)

    def abandon(self, error: str, *, at: datetime | None = None) -> list[Action]:
        """The job cannot be driven any further (its runner hit an unexpected error): end it
        now rather than leave it live with nothing to move it on. FAILED with `error` in its
        reason, or STOPPED when a user had asked to stop it; no retry. The caller then asks the
        backend to stop and forget the attempt, whatever it still holds."""
        record = self._record
        if record.state.is_final:
            return []
        when = at or utcnow()
        if record.stop_reason is not None:
            state, text = JobState.STOPPED, f"stopped: {record.stop_reason} ({error})"
            ended = exit_codes.info(exit_codes.STOP_REQUESTED, text)
        else:
            state, text = JobState.FAILED, f"failed: {error}"
            ended = exit_codes.info(exit_codes.ENGINE_FAILED, text)
        for view in record.instances:
            if not view.ended:
                view.exit, view.finished_at = ended, when
                self._move(view, state, when, text)
        current = record.current
        if current is not None:
            current.completion = current.completion or Completion(message=text, exit=ended)
            current.state, current.finished_at = state, when
        return self._finish(state, text, ended, when, release=current is not None)

    # --- instance ends ---

    @property
    def _decided(self) -> Completion | None:
        current = self._record.current
        return current.completion if current else None

    def _instance_ended(
        self, view: InstanceView, event: InstanceEvent, log_tail: str
    ) -> list[Action]:
        at = event.at
        if view.state is JobState.STOPPING:
            if event.kind is EventKind.EXITED and event.exit_code == 0:
                view.exit, view.exit_code, view.finished_at = exit_codes.classify(0), 0, at
                self._move(view, JobState.SUCCEEDED, at, view.exit.reason)
            else:
                self._end_stopped(view, event.exit_code, at)
            return self._after_end(at)
        ended = _classify(event, log_tail)
        failed = not ended.succeeded
        if failed and (retry := self._task_retry(view, ended, event, at)) is not None:
            return retry
        view.exit, view.exit_code, view.finished_at = ended, event.exit_code, at
        self._move(view, JobState.FAILED if failed else JobState.SUCCEEDED, at, ended.reason)
        if self._decided is None:
            self._judge(view, Outcome.FAILED if failed else Outcome.SUCCEEDED)
        return self._after_end(at)

    def _end_stopped(self, view: InstanceView, exit_code: int | None, at: datetime) -> None:
        decided = self._decided
        if decided is not None and decided.by_user:
            ended = exit_codes.info(exit_codes.STOP_REQUESTED, exit_code=exit_code)
            text = decided.message
        else:
            ended = exit_codes.info(exit_codes.ATTEMPT_COMPLETED, exit_code=exit_code)
            text = f"stopped: {_decided_by(decided)}"
        view.exit = ended.model_copy(update={"reason": text})
        view.exit_code, view.finished_at = exit_code, at
        self._move(view, JobState.STOPPED, at, text)

    def _task_retry(
        self, view: InstanceView, ended: ExitInfo, event: InstanceEvent, at: datetime
    ) -> list[Action] | None:
        """Retry one failed instance on its own (gang allocation off), or None when it is not."""
        policy = self._policy.task_retry(view.role)
        if policy is None or self._decided is not None or self._record.stop_reason is not None:
            return None
        decision = policy.decide(
            ended, attempts=view.task_attempt, accountable_retries=view.task_accountable_retries
        )
        if not decision.retry:
            return None
        view.task_attempt += 1
        view.task_retries += 1
        view.task_accountable_retries += int(decision.accountable)
        view.exit, view.exit_code, view.started_at, view.finished_at = None, None, None, None
        view.retried_at = at
        text = f"retrying on its own after {_story(view, ended)}; {decision.reason}"
        self._move(view, JobState.WAITING, at, text)
        self._progress(at)
        return [
            RetryInstance(
                attempt=self._record.attempt,
                role=view.role,
                index=view.index,
                task_attempt=view.task_attempt,
                delay_seconds=decision.delay_seconds,
                reason=text,
            )
        ]

    def _judge(self, view: InstanceView, outcome: Outcome) -> None:
        """Apply the completion rules after `view` ended; record the decision if one fires."""
        current = self._record.current
        assert current is not None
        decided = completion_after(self._policy, self._record, view, outcome)
        if decided is not None:
            current.completion = decided

    def _after_end(self, at: datetime) -> list[Action]:
        record, current = self._record, self._record.current
        assert current is not None
        live = [v for v in record.instances if not v.ended]
        if current.completion is not None and live:
            return [] if current.stop_issued else self._stop_attempt(at)
        if live:
            return self._progress(at)
        if current.completion is None:  # every instance was stopped from outside the rules
            current.completion = Completion(
                message="every instance ended",
                exit=exit_codes.info(exit_codes.STOP_REQUESTED, "every instance ended"),
                by_user=True,
            )
        return self._end_attempt(at)

    # --- attempts ---

    def _stop_attempt(self, at: datetime) -> list[Action]:
        record, current = self._record, self._record.current
        assert current is not None and current.completion is not None
        current.stop_issued = True
        message = current.completion.message
        why = message if current.completion.by_user else _decided_by(current.completion)
        for view in record.instances:
            if not view.ended:
                self._move(
                    view, JobState.STOPPING, at, "stopping: " + why.removeprefix("stopped: ")
                )
        self._set_job(JobState.STOPPING, "stopping: " + message.removeprefix("stopped: "), at)
        return [
            StopAttempt(
                attempt=record.attempt,
                reason=message,
                grace_seconds=self._policy.stop_grace_seconds,
            )
        ]

    def _end_attempt(self, at: datetime) -> list[Action]:
        record, current = self._record, self._record.current
        assert current is not None and current.completion is not None
        completion = current.completion
        ended = completion.exit
        if record.stop_reason is not None and not completion.by_user:
            decision_reason, retry = "not run again: the job was stopped", None
        else:
            retry = self._policy.retry.decide(
                ended, attempts=record.attempt, accountable_retries=record.accountable_retries
            )
            decision_reason = retry.reason
        state = _final_state(ended)
        current.state, current.finished_at = state, at
        if retry is not None and retry.retry:
            old = record.attempt
            record.retries += 1
            record.accountable_retries += int(retry.accountable)
            record.attempt += 1
            record.instances = _views(self._policy, record.attempt)
            record.attempts.append(AttemptRecord(attempt=record.attempt, launched_at=at))
            text = (
                f"waiting: attempt {record.attempt}, {decision_reason}; "
                f"attempt {old}: {completion.message}"
            )
            self._set_job(JobState.WAITING, text, at)
            return [
                ReleaseAttempt(attempt=old),
                LaunchAttempt(
                    attempt=record.attempt, delay_seconds=retry.delay_seconds, reason=text
                ),
            ]
        text = "; ".join(part for part in (completion.message, decision_reason) if part)
        return self._finish(state, text, ended, at, release=True)

    def _finish(
        self, state: JobState, reason: str, ended: ExitInfo | None, at: datetime, *, release: bool
    ) -> list[Action]:
        record = self._record
        record.exit = ended
        record.completed_at = at
        self._set_job(state, reason, at)
        actions: list[Action] = [ReleaseAttempt(attempt=record.attempt)] if release else []
        return [*actions, Finish(state=state, reason=reason, exit=ended)]

    # --- state changes ---

    def _progress(self, at: datetime) -> list[Action]:
        """Move the job forward within an attempt and keep its reason current."""
        record = self._record
        if self._decided is not None or record.state not in _PROGRESS:
            return []
        views = record.instances
        if any(v.started_at is not None or v.exit_code is not None for v in views):
            target = JobState.RUNNING
        elif any(v.state is not JobState.WAITING or v.node is not None for v in views):
            target = JobState.STARTING
        else:
            target = JobState.WAITING
        total = len(views)
        running = sum(1 for v in views if v.state is JobState.RUNNING)
        ended = sum(1 for v in views if v.ended)
        if target is JobState.RUNNING:
            text = f"running: {running} of {total} instance(s) running" + (
                f", {ended} ended" if ended else ""
            )
        elif target is JobState.STARTING:
            placed = sum(1 for v in views if v.state is not JobState.WAITING)
            text = f"starting: {placed} of {total} instance(s) placed"
        else:
            return []
        if _PROGRESS[target] > _PROGRESS[record.state]:
            self._set_job(target, text, at)
        elif record.state is target:
            record.reason = text
        return []

    def _set_job(self, state: JobState, reason: str, at: datetime) -> None:
        record = self._record
        if state is not record.state:
            check_transition(record.state, state)
            record.transitions.append(
                Transition(
                    at=at,
                    attempt=record.attempt,
                    from_state=record.state,
                    to_state=state,
                    reason=reason,
                )
            )
            record.state = state
        record.reason = reason

    def _move(self, view: InstanceView, state: JobState, at: datetime, reason: str) -> None:
        if state is not view.state:
            check_transition(view.state, state, instance=True)
            self._record.transitions.append(
                Transition(
                    at=at,
                    attempt=view.attempt,
                    from_state=view.state,
                    to_state=state,
                    reason=reason,
                    role=view.role,
                    index=view.index,
                )
            )
            view.state = state
        view.reason = reason


# --- helpers -------------------------------------------------------------------------------


def _views(policy: JobPolicy, attempt: int) -> list[InstanceView]:
    return [
        InstanceView(role=role.name, index=i, attempt=attempt)
        for role in policy.roles
        for i in range(role.instances)
    ]


def _decided_by(decided: Completion | None) -> str:
    if decided is None or decided.role is None:
        return "the outcome of its attempt was already decided"
    return f"the outcome of its attempt was decided by {decided.role}-{decided.index}"


def _final_state(ended: ExitInfo) -> JobState:
    if ended.succeeded:
        return JobState.SUCCEEDED
    if ended.is_stop:
        return JobState.STOPPED
    return JobState.FAILED


def _waiting_text(reason: str | None) -> str:
    if not reason:
        return "waiting: not placed yet"
    return reason if reason.startswith("waiting") else f"waiting: {reason}"
