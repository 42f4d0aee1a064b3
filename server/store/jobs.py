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

from sqlalchemy import Engine, Select, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from server.protocol.model import JobSpec
from server.shapes.job_states import JobState, Transition
from server.shapes.store_errors import InvalidValue, JobExists, NameInUse, UnknownJob, UnknownUser
from server.shapes.values import (
    Event,
    Instance,
    Job,
    JobCursor,
    JobFilter,
    JobPage,
    JobWarning,
    NewEvent,
)
from server.store.columns import utcnow
from server.store.db import Repository
from server.store.job_rows import (
    _BRIEF_INSTANCE_COLUMNS,
    _BRIEF_JOB_COLUMNS,
    _EVENT_COLUMNS,
    _INSTANCE_COLUMNS,
    _INSTANCE_ORDER,
    _brief_instance,
    _brief_job,
    _event,
    _instance,
    _job,
    _jobs_query,
)
from server.store.job_writes import (
    SavedMachine,
    _append,
    _end_earlier_attempts,
    _job_values,
    _lock,
    _take_event_turn,
    _write_instances,
)
from server.store.spec_cache import SpecCache
from server.store.tables import EventRow, InstanceRow, JobRow, UserRow

MAX_PAGE = 100
_FINAL = [s.value for s in JobState if s.is_final]
_NEWEST_FIRST = (col(JobRow.submitted_at).desc(), col(JobRow.id).desc())
# The instance columns that a save compares to decide whether a row changed.


class JobStore(Repository):
    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.spec_cache = SpecCache()

    # --- writing ---

    def create_job(
        self,
        spec: JobSpec,
        snapshot: SavedMachine,
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
        snapshot: SavedMachine,
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
        self,
        where: JobFilter | None = None,
        *,
        first: int = 50,
        after: JobCursor | None = None,
        brief: bool = False,
    ) -> JobPage:
        """Jobs newest first, `first` (0 to 100) of them after the cursor, matching `where`.

        `brief`: only the id, name, owner id, state, submission time and attempt are read; the
        other fields are left empty (the owner's name, the virtual cluster and the state
        reason "", the other times None, retries and last_sequence 0, no warnings), for a
        caller that shows nothing else of them (a list of jobs with their task roles)."""
        if not 0 <= first <= MAX_PAGE:
            raise InvalidValue(f"first must be between 0 and {MAX_PAGE}, got {first}")
        where = where or JobFilter()
        if not brief:
            query, make = _jobs_query(), _job
        else:
            query, make = select(*_BRIEF_JOB_COLUMNS), _brief_job
            if where.owner is not None:  # the filter names the owner: the users table is needed
                query = query.join(UserRow, col(UserRow.id) == col(JobRow.owner_id))
        query = _matching(query, where)
        if after is not None:
            query = query.where(
                tuple_(col(JobRow.submitted_at), col(JobRow.id))
                < tuple_(after.submitted_at, after.id)
            )
        query = query.order_by(*_NEWEST_FIRST).limit(first + 1)
        with self._read() as session:  # rows of columns: the connection's, not the ORM's
            jobs = [make(row) for row in session.connection().execute(query)]
        return JobPage(jobs=jobs[:first], has_next=len(jobs) > first)

    def newest_event_id(self) -> int:
        """The id of the newest event of any job (0 without any): where a `jobs_changed_after`
        reader starts that wants only what happens from now on."""
        with self._read() as session:
            return session.connection().scalar(select(func.max(col(EventRow.id)))) or 0

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

    def machine_json(self, job_id: str) -> str:
        """The job machine's snapshot as last saved, as JSON: the job engine reads it back
        (`server.jobs.recorder.load_machine`) and `JobMachine.restore` rebuilds the machine."""
        with self._read() as session:
            text = session.scalar(select(col(JobRow.machine)).where(col(JobRow.id) == job_id))
        if text is None:
            raise UnknownJob(f"no job has id {job_id!r}")
        return text

    def job_config(self, job_id: str) -> str | None:
        """The config as submitted, secrets masked."""
        with self._read() as session:
            return session.scalar(select(col(JobRow.config)).where(col(JobRow.id) == job_id))

    def job_configs(self, job_ids: Iterable[str]) -> dict[str, str]:
        """The submitted configs (secrets masked) of many jobs in one query (for a loader)."""
        wanted = set(job_ids)
        if not wanted:
            return {}
        with self._read() as session:
            rows = session.execute(
                select(col(JobRow.id), col(JobRow.config)).where(col(JobRow.id).in_(wanted))
            )
            return {job_id: config for job_id, config in rows}

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
