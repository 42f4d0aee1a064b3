"""Jobs, their task instances and their event log.

Every write of a job's state goes through one transaction that first locks the job: the job
row, the changed instance rows and the new event rows commit together, and the event sequence
is read and bumped under the lock, so concurrent writers get consecutive numbers and a reader
never sees a state without its event (or the other way round).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Engine, Select, Text, cast, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlmodel import col

from backends.base import utcnow
from server.jobs.machine import InstanceView, JobRecord, MachineSnapshot
from server.protocol.model import JobSpec
from server.shapes.job_states import JobState, Transition
from server.store.db import Repository
from server.store.errors import InvalidValue, JobExists, NameInUse, UnknownJob, UnknownUser
from server.store.spec_cache import SpecCache
from server.store.tables import EventRow, InstanceRow, JobRow, UserRow
from server.store.values import (
    INSTANCE_STATE,
    JOB_STATE,
    Event,
    Instance,
    Job,
    JobCursor,
    JobFilter,
    JobPage,
    JobWarning,
    NewEvent,
)

MAX_PAGE = 100
_FINAL = [s.value for s in JobState if s.is_final]
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
_NEWEST_FIRST = (col(JobRow.submitted_at).desc(), col(JobRow.id).desc())
# The instance columns that a save compares to decide whether a row changed.
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


class JobStore(Repository):
    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.spec_cache = SpecCache()

    # --- writing ---

    def create_job(
        self,
        spec: JobSpec,
        snapshot: MachineSnapshot,
        *,
        owner_id: int,
        virtual_cluster: str | None = None,
        config: str | None = None,
        warnings: Sequence[JobWarning] = (),
    ) -> tuple[Job, list[Event]]:
        """Store a new job (id, state and instances from `snapshot`) and its first events.

        `config` is the text as submitted with secrets masked (default: `spec.source`, which is);
        the virtual cluster defaults to the spec's. Raises NameInUse when the owner has a job of
        that name that has not ended, JobExists for a taken id, UnknownUser for a bad owner.
        """
        record = snapshot.record
        now = utcnow()
        values = {
            **_job_values(record, snapshot),
            "id": record.job_id,
            "name": spec.name,
            "owner_id": owner_id,
            "virtual_cluster": virtual_cluster or spec.virtual_cluster,
            "submitted_at": record.created_at,
            "config": spec.source if config is None else config,
            "spec": spec.model_dump_json(),
            "last_sequence": 0,
            "updated_at": now,
            "warnings": [
                {"path": list(w.path), "code": w.code, "message": w.message} for w in warnings
            ],
        }
        try:
            with self._write() as session:
                _take_event_turn(session, record.transitions)
                # Lock the owner so two submissions of one name cannot both pass the check.
                owner = session.scalar(
                    select(col(UserRow.name)).where(col(UserRow.id) == owner_id).with_for_update()
                )
                if owner is None:
                    raise UnknownUser(f"no user has id {owner_id}")
                live = session.scalar(
                    select(col(JobRow.id)).where(
                        col(JobRow.owner_id) == owner_id,
                        col(JobRow.name) == spec.name,
                        col(JobRow.state).not_in(_FINAL),
                    )
                )
                if live is not None:
                    raise NameInUse(
                        f"you already have a job named {spec.name!r} that has not ended "
                        f"({live}); stop it or choose another name"
                    )
                session.execute(insert(JobRow), [values])
                _write_instances(session, record)
                events = _append(session, record.job_id, 0, record.transitions)
        except IntegrityError:
            raise JobExists(f"a job with id {record.job_id!r} exists already") from None
        job = self.get_job(record.job_id)
        assert job is not None
        return job, events

    def save_machine(
        self,
        job_id: str,
        snapshot: MachineSnapshot,
        changes: Sequence[Transition | NewEvent] = (),
    ) -> list[Event]:
        """Write the machine's state, its current attempt's instances and the new events in one
        transaction; return the events with their sequence numbers (publish them after this).

        `changes` are the transitions made since the last save (`machine.transitions[n:]`, n
        being its length then) and any other events to record, in order.
        """
        record = snapshot.record
        if record.job_id != job_id:
            raise ValueError(f"the snapshot is of job {record.job_id!r}, not of {job_id!r}")
        with self._write() as session:
            _take_event_turn(session, changes)
            last = _lock(session, job_id)
            session.execute(
                update(JobRow)
                .where(col(JobRow.id) == job_id)
                .values(**_job_values(record, snapshot), updated_at=utcnow())
            )
            _write_instances(session, record)
            _end_earlier_attempts(session, record, changes)
            return _append(session, job_id, last, changes)

    def append_events(self, job_id: str, changes: Sequence[Transition | NewEvent]) -> list[Event]:
        """Record events that come with no change of the machine's state."""
        with self._write() as session:
            _take_event_turn(session, changes)
            return _append(session, job_id, _lock(session, job_id), changes)

    # --- reading jobs ---

    def get_job(self, job_id: str) -> Job | None:
        return self.jobs_by_ids([job_id]).get(job_id)

    def jobs_by_ids(self, job_ids: Iterable[str]) -> dict[str, Job]:
        """Many jobs in one query (for a loader); unknown ids are left out."""
        wanted = set(job_ids)
        if not wanted:
            return {}
        with self._read() as session:
            rows = session.execute(_jobs_query().where(col(JobRow.id).in_(wanted)))
            return {job.id: job for job in map(_job, rows)}

    def job_named(self, owner_id: int, name: str) -> Job | None:
        """The owner's newest job of that name."""
        with self._read() as session:
            row = session.execute(
                _jobs_query()
                .where(col(JobRow.owner_id) == owner_id, col(JobRow.name) == name)
                .order_by(*_NEWEST_FIRST)
                .limit(1)
            ).first()
            return _job(row) if row is not None else None

    def list_jobs(
        self, where: JobFilter | None = None, *, first: int = 50, after: JobCursor | None = None
    ) -> JobPage:
        """Jobs newest first, `first` (0 to 100) of them after the cursor, matching `where`."""
        if not 0 <= first <= MAX_PAGE:
            raise InvalidValue(f"first must be between 0 and {MAX_PAGE}, got {first}")
        query = _matching(_jobs_query(), where or JobFilter())
        if after is not None:
            query = query.where(
                tuple_(col(JobRow.submitted_at), col(JobRow.id))
                < tuple_(after.submitted_at, after.id)
            )
        query = query.order_by(*_NEWEST_FIRST).limit(first + 1)
        with self._read() as session:
            jobs = [_job(row) for row in session.execute(query)]
        return JobPage(jobs=jobs[:first], has_next=len(jobs) > first)

    def newest_event_id(self) -> int:
        """The id of the newest event of any job (0 without any): where a `jobs_changed_after`
        reader starts that wants only what happens from now on."""
        with self._read() as session:
            return session.scalar(select(func.max(col(EventRow.id)))) or 0

    def jobs_changed_after(
        self, after: int, where: JobFilter | None = None, *, limit: int = 100
    ) -> tuple[list[tuple[Job, int]], int]:
        """The jobs matching `where` that have events with an id above `after` (a job entered
        the list, or changed), oldest change first, each with the id of its newest event read,
        and the id to read after next time.

        Event ids grow in the order their transactions commit (see `_append`), so reading on
        from the returned id misses nothing and tells each change once. At most `limit` events
        are looked at per call: call again while the id moves."""
        with self._read() as session:
            rows = session.execute(
                select(col(EventRow.id), col(EventRow.job_id))
                .where(col(EventRow.id) > after)
                .order_by(col(EventRow.id))
                .limit(limit)
            ).all()
            if not rows:
                return [], after
            newest: dict[str, int] = {}
            for event_id, job_id in rows:
                assert event_id is not None  # a stored row's primary key
                newest[job_id] = event_id
            matching = {
                job.id: job
                for job in map(
                    _job,
                    session.execute(
                        _matching(_jobs_query(), where or JobFilter()).where(
                            col(JobRow.id).in_(list(newest))
                        )
                    ),
                )
            }
        ordered = sorted(newest, key=newest.__getitem__)
        return [(matching[j], newest[j]) for j in ordered if j in matching], max(newest.values())

    def job_counts(self) -> list[tuple[str, str, int]]:
        """(state, virtual cluster, how many jobs) for every pair that has jobs: one grouped
        query, cheap enough to run on every scrape of /metrics."""
        query = select(
            col(JobRow.state), col(JobRow.virtual_cluster), func.count(col(JobRow.id))
        ).group_by(col(JobRow.state), col(JobRow.virtual_cluster))
        with self._read() as session:
            return [(state, vc, count) for state, vc, count in session.execute(query)]

    def completion_times(self, job_ids: Iterable[str]) -> dict[str, datetime | None]:
        """When each of the jobs ended (None: it has not ended); jobs that do not exist are
        left out."""
        wanted = list(set(job_ids))
        if not wanted:
            return {}
        query = select(col(JobRow.id), col(JobRow.completed_at)).where(col(JobRow.id).in_(wanted))
        with self._read() as session:
            return {job_id: ended for job_id, ended in session.execute(query)}

    def unfinished_jobs(self) -> list[Job]:
        """Every job that has not reached a final state (what a restarted server resumes)."""
        with self._read() as session:
            rows = session.execute(
                _jobs_query()
                .where(col(JobRow.state).not_in(_FINAL))
                .order_by(col(JobRow.submitted_at), col(JobRow.id))
            )
            return [_job(row) for row in rows]

    def load_machine(self, job_id: str) -> MachineSnapshot:
        """The job machine's snapshot as last saved; `JobMachine.restore` rebuilds it."""
        with self._read() as session:
            text = session.scalar(select(col(JobRow.machine)).where(col(JobRow.id) == job_id))
        if text is None:
            raise UnknownJob(f"no job has id {job_id!r}")
        return MachineSnapshot.model_validate_json(text)

    def job_config(self, job_id: str) -> str | None:
        """The config as submitted, secrets masked."""
        with self._read() as session:
            return session.scalar(select(col(JobRow.config)).where(col(JobRow.id) == job_id))

    def job_specs(self, job_ids: Iterable[str]) -> dict[str, JobSpec]:
        """The resolved specs of many jobs in one query (for a loader)."""
        found, wanted = self.spec_cache.get_many(set(job_ids))
        if not wanted:
            return found
        with self._read() as session:
            rows = session.connection().execute(
                select(col(JobRow.id), col(JobRow.spec)).where(col(JobRow.id).in_(wanted))
            )
            read = {job_id: JobSpec.model_validate_json(text) for job_id, text in rows}
        self.spec_cache.put_many(read)
        return found | read

    # --- instances and events ---

    def instances_for_jobs(
        self, job_ids: Iterable[str], *, all_attempts: bool = False
    ) -> dict[str, list[Instance]]:
        """The instances of many jobs in one query, by role then index (earlier attempts first
        with `all_attempts`; otherwise only each job's current attempt). Every id is a key."""
        wanted = set(job_ids)
        result: dict[str, list[Instance]] = {job_id: [] for job_id in wanted}
        if not wanted:
            return result
        query = select(*_INSTANCE_COLUMNS).where(col(InstanceRow.job_id).in_(wanted))
        if not all_attempts:
            query = query.join(
                JobRow,
                (col(JobRow.id) == col(InstanceRow.job_id))
                & (col(JobRow.attempt) == col(InstanceRow.attempt)),
            )
        return self._read_instances(query, result)

    def current_instances(
        self, attempts: Mapping[str, int], *, brief: bool = False
    ) -> dict[str, list[Instance]]:
        """Like instances_for_jobs, for jobs whose current attempt the caller has just read
        (a page of jobs): the attempt is matched here instead of joining the jobs table.

        `brief`: only the job, attempt, role, index, state and ports are read; the other
        fields are left empty (task_attempt 0, state_reason "", the rest None), for a caller
        that shows nothing else of them (a list of jobs shows instances' states and ports: the
        eight other columns, two of them timestamps to parse, were half of reading a page)."""
        result: dict[str, list[Instance]] = {job_id: [] for job_id in attempts}
        if not attempts:
            return result
        columns = _BRIEF_INSTANCE_COLUMNS if brief else _INSTANCE_COLUMNS
        query = select(*columns).where(col(InstanceRow.job_id).in_(list(attempts)))
        return self._read_instances(query, result, attempts, _brief_instance if brief else None)

    def _read_instances(
        self,
        query: Select[*tuple[Any, ...]],
        into: dict[str, list[Instance]],
        attempts: Mapping[str, int] | None = None,
        make: Callable[[Sequence[Any]], Instance] | None = None,
    ) -> dict[str, list[Instance]]:
        """The rows of `query` in order (made into instances by `make`, `_instance` without),
        added to their jobs' lists in `into`; with `attempts`, only those of each job's given
        attempt."""
        make = make or _instance
        with self._read() as session:
            for row in session.connection().execute(query.order_by(*_INSTANCE_ORDER)).all():
                instance = make(row)
                if attempts is None or instance.attempt == attempts[instance.job_id]:
                    into[instance.job_id].append(instance)
        return into

    def events_after(self, job_id: str, sequence: int = 0, limit: int = 100) -> list[Event]:
        """The job's events with a sequence above `sequence`, oldest first, at most `limit`."""
        if limit < 1:
            raise InvalidValue(f"limit must be at least 1, got {limit}")
        with self._read() as session:
            rows = session.execute(
                select(*_EVENT_COLUMNS)
                .where(col(EventRow.job_id) == job_id, col(EventRow.sequence) > sequence)
                .order_by(col(EventRow.sequence))
                .limit(limit)
            )
            return [_event(row) for row in rows]


def _matching(query: Select[Any], where: JobFilter) -> Select[Any]:
    """`query` narrowed to the jobs `where` asks for."""
    if where.states:
        query = query.where(col(JobRow.state).in_([JobState(s).value for s in where.states]))
    if where.owner is not None:
        query = query.where(col(UserRow.name) == where.owner)
    if where.owner_id is not None:
        query = query.where(col(JobRow.owner_id) == where.owner_id)
    if where.virtual_cluster is not None:
        query = query.where(col(JobRow.virtual_cluster) == where.virtual_cluster)
    if where.name is not None:
        query = query.where(col(JobRow.name) == where.name)
    if where.name_contains:
        query = query.where(
            func.lower(col(JobRow.name)).contains(where.name_contains.lower(), autoescape=True)
        )
    return query


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


def _job_values(record: JobRecord, snapshot: MachineSnapshot) -> dict[str, Any]:
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


# --- reading helpers -------------------------------------------------------------------------


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
