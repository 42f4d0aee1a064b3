"""How a job's state is written: the lock, the job and instance rows, and the event log.

These are the steps `JobStore`'s writes (`create_job`, `save_machine`, `append_events`) share,
kept apart from the store's queries so each write's transaction reads as the list of its steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session
from sqlmodel import col

from server.shapes.job_record import InstanceView, JobRecord
from server.shapes.job_states import Transition
from server.shapes.store_errors import UnknownJob
from server.shapes.values import INSTANCE_STATE, JOB_STATE, Event, NewEvent
from server.store.tables import EventRow, InstanceRow, JobRow

_INSTANCE_FIELDS = (
    "task_attempt",
    "state",
    "state_reason",
    "exit_code",
    "exit_reason",
    "node",
    "host_ip",
    "ports",
    "started_at",
    "finished_at",
)


class SavedMachine(Protocol):
    """What the store reads of a job machine's snapshot (`server.jobs.machine.MachineSnapshot`):
    its record, for the job's columns and instance rows, and the whole as JSON, kept as the
    job's `machine` column for the job engine to read back (`JobStore.machine_json`). Named here
    so the store need not import the engine, whose policy the snapshot carries."""

    @property
    def record(self) -> JobRecord: ...

    def model_dump_json(self) -> str: ...


# --- writing helpers -------------------------------------------------------------------------


def _lock(session: Session, job_id: str) -> int:
    """Lock the job row for this transaction (FOR UPDATE; SQLite holds its write lock already)
    and return the sequence of its newest event."""
    last = session.scalar(
        select(col(JobRow.last_sequence)).where(col(JobRow.id) == job_id).with_for_update()
    )
    if last is None:
        raise UnknownJob(f"no job has id {job_id!r}")
    return last


def _job_values(record: JobRecord, snapshot: SavedMachine) -> dict[str, Any]:
    return {
        "state": record.state.value,
        "state_reason": record.reason,
        "started_at": record.started_at,
        "completed_at": record.completed_at,
        "attempt": record.attempt,
        "retries": record.retries,
        "machine": snapshot.model_dump_json(),
    }


def _instance_values(view: InstanceView) -> dict[str, Any]:
    return {
        "task_attempt": view.task_attempt,
        "state": view.state.value,
        "state_reason": view.reason,
        "exit_code": view.exit_code,
        "exit_reason": view.exit_reason,
        "node": view.node,
        "host_ip": view.host_ip,
        "ports": {label: list(ports) for label, ports in view.ports.items()},
        "started_at": view.started_at,
        "finished_at": view.finished_at,
    }


def _write_instances(session: Session, record: JobRecord) -> None:
    """Insert the current attempt's new instance rows and update those that changed."""
    attempts = {view.attempt for view in record.instances}
    stored: dict[tuple[int, str, int], tuple[int, dict[str, Any]]] = {}
    if attempts:
        columns = [getattr(InstanceRow, name) for name in _INSTANCE_FIELDS]
        rows = session.execute(
            select(
                col(InstanceRow.id),
                col(InstanceRow.attempt),
                col(InstanceRow.role),
                col(InstanceRow.task_index),
                *columns,
            ).where(
                col(InstanceRow.job_id) == record.job_id,
                col(InstanceRow.attempt).in_(attempts),
            )
        )
        for row in rows:
            stored[(row.attempt, row.role, row.task_index)] = (
                row.id,
                {name: getattr(row, name) for name in _INSTANCE_FIELDS},
            )
    inserts, updates = [], []
    for view in record.instances:
        values = _instance_values(view)
        found = stored.get((view.attempt, view.role, view.index))
        if found is None:
            inserts.append(
                {
                    "job_id": record.job_id,
                    "attempt": view.attempt,
                    "role": view.role,
                    "task_index": view.index,
                    **values,
                }
            )
        elif found[1] != values:
            updates.append({"id": found[0], **values})
    if inserts:
        session.execute(insert(InstanceRow), inserts)
    if updates:
        session.execute(update(InstanceRow), updates)


def _end_earlier_attempts(
    session: Session, record: JobRecord, changes: Sequence[Transition | NewEvent]
) -> None:
    """Apply instance transitions of attempts the record no longer holds to their rows.

    One input can end an attempt's last instances and start the next attempt; the snapshot then
    shows only the new attempt, and these transitions are all that tells how the old rows ended
    (state, reason and time; an exit code not saved before is not known here).
    """
    current = {(v.attempt, v.role, v.index) for v in record.instances}
    for change in changes:
        if not isinstance(change, Transition) or change.role is None or change.index is None:
            continue
        if (change.attempt, change.role, change.index) in current:
            continue
        values: dict[str, Any] = {"state": change.to_state.value, "state_reason": change.reason}
        where = [
            col(InstanceRow.job_id) == record.job_id,
            col(InstanceRow.attempt) == change.attempt,
            col(InstanceRow.role) == change.role,
            col(InstanceRow.task_index) == change.index,
        ]
        session.execute(update(InstanceRow).where(*where).values(**values))
        if change.to_state.is_final:
            session.execute(
                update(InstanceRow)
                .where(*where, col(InstanceRow.finished_at).is_(None))
                .values(finished_at=change.at)
            )


_EVENT_APPEND_LOCK = 0x7061_6967_6576  # "paigev": the advisory lock event appends take turns on


def _take_event_turn(session: Session, changes: Sequence[object]) -> None:
    """Wait for this transaction's turn to append events, before it locks any row.

    Event ids must grow in commit order, so that a reader of every job's changes after an id
    (`jobs_changed_after`) never skips a row committed late with a lower id: on PostgreSQL,
    transactions that append take turns on an advisory lock until they end. It is taken first,
    before the job's row, so that two of them can never each hold what the other waits for.
    SQLite has one writer at a time anyway."""
    if changes and session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_EVENT_APPEND_LOCK)))


def _append(
    session: Session, job_id: str, last: int, changes: Sequence[Transition | NewEvent]
) -> list[Event]:
    """Insert the events numbered from `last + 1` and move the job's counter on (after
    `_take_event_turn` began the transaction)."""
    events = [_new_event(job_id, last + n, change) for n, change in enumerate(changes, start=1)]
    if not events:
        return []
    session.execute(
        insert(EventRow),
        [
            {
                "job_id": e.job_id,
                "sequence": e.sequence,
                "at": e.at,
                "type": e.type,
                "message": e.message,
                "state": e.state.value if e.state is not None else None,
                "attempt": e.attempt,
                "task_role": e.role,
                "task_index": e.index,
            }
            for e in events
        ],
    )
    session.execute(
        update(JobRow).where(col(JobRow.id) == job_id).values(last_sequence=events[-1].sequence)
    )
    return events


def _new_event(job_id: str, sequence: int, change: Transition | NewEvent) -> Event:
    if isinstance(change, Transition):
        return Event(
            job_id=job_id,
            sequence=sequence,
            at=change.at,
            type=JOB_STATE if change.role is None else INSTANCE_STATE,
            message=change.reason,
            state=change.to_state,
            attempt=change.attempt,
            role=change.role,
            index=change.index,
        )
    return Event(
        job_id=job_id,
        sequence=sequence,
        at=change.at,
        type=change.type,
        message=change.message,
        state=change.state,
        attempt=change.attempt,
        role=change.role,
        index=change.index,
    )
