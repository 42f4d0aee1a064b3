"""How job, instance and event rows are read into the store's values.

The columns each query selects and the functions that turn a selected row into a `Job`,
`Instance` or `Event` go together (a row's fields are the columns in order), kept apart from
`JobStore`'s queries so that a change of a value's fields is made in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Select, Text, cast, select
from sqlmodel import col

from server.shapes.job_states import JobState
from server.shapes.values import Event, Instance, Job, JobWarning
from server.store.tables import EventRow, InstanceRow, JobRow, UserRow

_JOB_COLUMNS = (
    col(JobRow.id),
    col(JobRow.name),
    col(JobRow.owner_id),
    col(UserRow.name),
    col(JobRow.virtual_cluster),
    col(JobRow.state),
    col(JobRow.state_reason),
    col(JobRow.submitted_at),
    col(JobRow.started_at),
    col(JobRow.completed_at),
    col(JobRow.attempt),
    col(JobRow.retries),
    col(JobRow.last_sequence),
    col(JobRow.warnings),
)
# What a list that shows only each job's id, name, state and attempt needs (`list_jobs` brief),
# with the submission time its cursor is made of and the owner's id for the owner's fields.
_BRIEF_JOB_COLUMNS = (
    col(JobRow.id),
    col(JobRow.name),
    col(JobRow.owner_id),
    col(JobRow.state),
    col(JobRow.submitted_at),
    col(JobRow.attempt),
)
_INSTANCE_COLUMNS = (
    col(InstanceRow.job_id),
    col(InstanceRow.attempt),
    col(InstanceRow.role),
    col(InstanceRow.task_index),
    col(InstanceRow.task_attempt),
    col(InstanceRow.state),
    col(InstanceRow.state_reason),
    col(InstanceRow.exit_code),
    col(InstanceRow.exit_reason),
    col(InstanceRow.node),
    col(InstanceRow.host_ip),
    # As the JSON text, decoded by `_instance` with orjson: the JSON type's own decoding (the
    # json module, behind two processor calls) was a third of reading a page's instances.
    cast(col(InstanceRow.ports), Text),
    col(InstanceRow.started_at),
    col(InstanceRow.finished_at),
)
# What a list that shows only each instance's state and ports needs (`current_instances` brief).
_BRIEF_INSTANCE_COLUMNS = (
    col(InstanceRow.job_id),
    col(InstanceRow.attempt),
    col(InstanceRow.role),
    col(InstanceRow.task_index),
    col(InstanceRow.state),
    cast(col(InstanceRow.ports), Text),
)
_INSTANCE_ORDER = (
    col(InstanceRow.job_id),
    col(InstanceRow.attempt),
    col(InstanceRow.role),
    col(InstanceRow.task_index),
)
_EVENT_COLUMNS = (
    col(EventRow.job_id),
    col(EventRow.sequence),
    col(EventRow.at),
    col(EventRow.type),
    col(EventRow.message),
    col(EventRow.state),
    col(EventRow.attempt),
    col(EventRow.task_role),
    col(EventRow.task_index),
)


def _jobs_query() -> Select[*tuple[Any, ...]]:
    return select(*_JOB_COLUMNS).join(UserRow, col(UserRow.id) == col(JobRow.owner_id))


def _job(row: Sequence[Any]) -> Job:
    (
        job_id,
        name,
        owner_id,
        owner,
        vc,
        state,
        reason,
        submitted,
        started,
        completed,
        attempt,
        retries,
        last,
        warnings,
    ) = row
    return Job(
        id=job_id,
        name=name,
        owner_id=owner_id,
        owner=owner,
        virtual_cluster=vc,
        state=JobState(state),
        state_reason=reason,
        submitted_at=submitted,
        started_at=started,
        completed_at=completed,
        attempt=attempt,
        retries=retries,
        last_sequence=last,
        warnings=tuple(
            JobWarning(path=tuple(w["path"]), code=w["code"], message=w["message"])
            for w in warnings or ()
        ),
    )


def _brief_job(row: Sequence[Any]) -> Job:
    """A job of _BRIEF_JOB_COLUMNS, the fields not read left empty."""
    job_id, name, owner_id, state, submitted, attempt = row
    return Job(
        id=job_id,
        name=name,
        owner_id=owner_id,
        owner="",
        virtual_cluster="",
        state=_STATES.get(state) or JobState(state),
        state_reason="",
        submitted_at=submitted,
        started_at=None,
        completed_at=None,
        attempt=attempt,
        retries=0,
        last_sequence=0,
    )


def _brief_instance(row: Sequence[Any]) -> Instance:
    """An instance of _BRIEF_INSTANCE_COLUMNS, the fields not read left empty."""
    job_id, attempt, role, index, state, ports = row
    return Instance(
        job_id,
        attempt,
        role,
        index,
        0,
        _STATES.get(state) or JobState(state),
        "",
        None,
        None,
        None,
        None,
        orjson.loads(ports),
        None,
        None,
    )


_STATES = {state.value: state for state in JobState}  # a dict lookup, not an enum call per row


def _instance(row: Sequence[Any]) -> Instance:
    """_INSTANCE_COLUMNS are Instance's fields in order; the state and the ports' JSON text
    need converting."""
    (job_id, attempt, role, index, task_attempt, state, reason, exit_code, exit_reason, node,
     host_ip, ports, started, finished) = row  # fmt: skip
    return Instance(
        job_id,
        attempt,
        role,
        index,
        task_attempt,
        _STATES.get(state) or JobState(state),
        reason,
        exit_code,
        exit_reason,
        node,
        host_ip,
        orjson.loads(ports),
        started,
        finished,
    )


def _event(row: Sequence[Any]) -> Event:
    job_id, sequence, at, type_, message, state, attempt, role, index = row
    return Event(
        job_id=job_id,
        sequence=sequence,
        at=at,
        type=type_,
        message=message,
        state=JobState(state) if state is not None else None,
        attempt=attempt,
        role=role,
        index=index,
    )
