"""The store on real SQLite and PostgreSQL databases: schema, users, jobs, instances, events."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlmodel import SQLModel

from backends.base import EventKind, Placement, utcnow
from server.jobs import JobMachine, JobState, job_policy
from server.jobs.recorder import load_machine
from server.shapes.accounts import token_hash
from server.shapes.store_errors import (
    InvalidValue,
    JobExists,
    NameInUse,
    UnknownJob,
    UnknownUser,
    UserExists,
)
from server.shapes.values import INSTANCE_STATE, JOB_STATE, Job, JobCursor, JobFilter, NewEvent
from server.store import (
    Store,
    create_store_engine,
    current_revision,
    head_revision,
    migrate,
    session_scope,
)
from server.store.scratch import scratch_database
from server.store.tables import TokenRow
from tests.store_support import (
    StatementLog,
    feed,
    job_spec,
    postgres_server_url,
    submit,
)
from tests.worker_support import worker_name

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TABLES = {"users", "tokens", "virtual_clusters", "memberships", "jobs", "task_instances"}


def every_value(store: Store) -> list[str]:
    """Every stored value of every table, as text."""
    values = []
    with store.engine.connect() as connection:
        for table in SQLModel.metadata.sorted_tables:
            for row in connection.execute(select(table)):
                values.extend(str(value) for value in row)
    return values


def place_and_start(machine: JobMachine, at: datetime) -> None:
    for n, view in enumerate(list(machine.instances)):
        where = Placement(
            node=f"node-{n % 2}", host_ip=f"10.0.0.{n + 1}", ports={"grpc": [20000 + 2 * n]}
        )
        feed(machine, EventKind.PLACED, view.role, view.index, at, placement=where)
    for view in list(machine.instances):
        feed(machine, EventKind.STARTED, view.role, view.index, at + timedelta(seconds=1))


# --- schema ------------------------------------------------------------------------------------


def test_migrations_build_the_schema_from_empty_and_running_them_again_changes_nothing(
    db_url: str,
) -> None:
    engine = create_store_engine(db_url)
    try:
        assert current_revision(engine) is None
        migrate(engine)
        assert current_revision(engine) == head_revision() is not None
        assert TABLES | {"job_events"} <= set(inspect(engine).get_table_names())
        jobs_indexes = {ix["name"] for ix in inspect(engine).get_indexes("jobs")}
        assert {
            "ix_jobs_owner_state",
            "ix_jobs_virtual_cluster",
            "ix_jobs_name",
            "ix_jobs_submitted",
        } <= jobs_indexes
        user, token = Store(engine).create_user("ann")

        migrate(db_url)  # a restarted server migrates again, by URL this time
        assert current_revision(engine) == head_revision()
        assert Store(engine).user_for_token(token) == user
    finally:
        engine.dispose()


def test_the_migrated_schema_is_exactly_what_the_tables_declare(db_url: str) -> None:
    engine = create_store_engine(db_url)
    try:
        migrate(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, SQLModel.metadata) == []
    finally:
        engine.dispose()


def test_servers_starting_together_migrate_once_without_errors(db_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def start() -> None:
        barrier.wait()
        try:
            migrate(db_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    engine = create_store_engine(db_url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        with engine.connect() as first, engine.connect() as second:
            for connection in (first, second):
                pragma = connection.exec_driver_sql
                assert pragma("PRAGMA journal_mode").scalar() == "wal"
                assert pragma("PRAGMA busy_timeout").scalar() == 5000
                assert pragma("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_foreign_keys_are_enforced(store: Store) -> None:
    with (
        pytest.raises(IntegrityError),
        session_scope(store.engine) as session,
    ):
        session.add(TokenRow(user_id=4242, token_hash="0" * 64, created_at=utcnow()))
        session.flush()


# --- users -------------------------------------------------------------------------------------


def test_a_new_user_gets_a_token_that_authenticates_and_only_its_hash_is_stored(
    store: Store,
) -> None:
    alice, token = store.create_user("alice", admin=True)
    bob, bob_token = store.create_user("bob")
    assert (alice.name, alice.admin, bob.admin) == ("alice", True, False)
    assert alice.created_at.tzinfo is not None
    assert store.user_for_token(token) == alice
    assert store.user_for_token(bob_token) == bob
    assert store.user_for_token(token[:-1]) is None
    assert store.user_for_token("") is None

    second = store.add_token(alice.id)
    assert second != token
    assert store.user_for_token(second) == alice
    assert store.user_for_token(token) == alice  # the first one still works

    stored = every_value(store)
    for raw in (token, bob_token, second):
        assert not any(raw in value for value in stored)
        assert token_hash(raw) in stored
    assert store.count_users() == 2
    assert store.users_by_ids([alice.id, bob.id, 999]) == {alice.id: alice, bob.id: bob}
    assert store.user_named("bob") == bob
    assert store.get_user(alice.id) == alice


def test_user_names_are_unique_and_must_be_plain(store: Store) -> None:
    store.create_user("carol")
    with pytest.raises(UserExists, match="a user named 'carol' exists already"):
        store.create_user("carol", admin=True)
    with pytest.raises(InvalidValue, match="user name 'two words' is not allowed"):
        store.create_user("two words")
    assert store.count_users() == 1
    with pytest.raises(UnknownUser):
        store.add_token(999)


def test_a_removed_user_keeps_their_row_and_jobs_but_no_token_or_membership(
    store: Store,
) -> None:
    ann, first = store.create_user("ann")
    store.add_membership(ann.id, "research")
    second = store.add_token(ann.id)
    job, _ = submit(store, ann.id, "kept", utcnow())
    assert store.valid_token_hashes([token_hash(first), token_hash(second), "x"]) == {
        token_hash(first),
        token_hash(second),
    }

    renewed = store.reset_token("ann")
    assert store.user_for_token(first) is None and store.user_for_token(second) is None
    assert store.user_for_token(renewed) == ann

    removed = store.remove_user("ann")
    assert removed.removed_at is not None
    assert store.user_for_token(renewed) is None and store.user_vcs(ann.id) == []
    assert store.valid_token_hashes([token_hash(renewed)]) == set()
    assert store.get_job(job.id).owner == "ann"  # on record under their name
    assert store.list_users() == [] and [u.name for u in store.list_users(removed=True)] == ["ann"]
    with pytest.raises(UnknownUser, match="removed already"):
        store.remove_user("ann")
    with pytest.raises(UnknownUser, match="removed already"):
        store.reset_token("ann")
    with pytest.raises(UserExists, match="was removed"):
        store.create_user("ann")
    with pytest.raises(UnknownUser):
        store.remove_user("nobody")


def test_membership_lists_a_users_virtual_clusters(store: Store) -> None:
    ann, _ = store.create_user("ann")
    bob, _ = store.create_user("bob")
    store.add_membership(ann.id, "gpu")
    store.add_membership(ann.id, "default")
    store.add_membership(ann.id, "gpu")  # again: nothing changes
    store.add_membership(bob.id, "gpu")
    assert store.user_vcs(ann.id) == ["default", "gpu"]
    assert store.user_vcs(bob.id) == ["gpu"]
    with pytest.raises(UnknownUser):
        store.add_membership(999, "gpu")


# --- jobs and their machines ---------------------------------------------------------------


def test_a_job_round_trips_its_machine_instances_and_events(store: Store) -> None:
    owner, _ = store.create_user("ann")
    spec = job_spec("roundtrip")
    machine = JobMachine(job_policy(spec), "roundtrip-1", at=T0)
    job, first_events = store.create_job(spec, machine.snapshot(), owner_id=owner.id)
    assert (job.id, job.name, job.owner, job.virtual_cluster) == (
        "roundtrip-1",
        "roundtrip",
        "ann",
        "default",
    )
    assert (job.state, job.submitted_at, job.attempt, job.retries) == (JobState.WAITING, T0, 1, 0)
    assert [(e.sequence, e.type, e.state) for e in first_events] == [
        (1, JOB_STATE, JobState.WAITING)
    ]
    saved = len(machine.transitions)

    def save() -> None:
        nonlocal saved
        store.save_machine(job.id, machine.snapshot(), machine.transitions[saved:])
        saved = len(machine.transitions)

    machine.start(at=T0)
    place_and_start(machine, T0 + timedelta(seconds=5))
    save()

    # A restarted server rebuilds the machine mid-run; it then behaves like the original.
    restored = JobMachine.restore(load_machine(store, job.id))
    assert restored.record == machine.record
    assert restored.policy == machine.policy
    ended = T0 + timedelta(minutes=3)
    feed(restored, EventKind.EXITED, "worker", 0, ended, exit_code=0)
    feed(machine, EventKind.EXITED, "worker", 0, ended, exit_code=0)
    assert restored.record == machine.record
    machine.stop_completed(1, at=ended + timedelta(seconds=2))
    save()

    assert machine.state is JobState.SUCCEEDED
    assert JobMachine.restore(load_machine(store, job.id)).record == machine.record
    stored = store.get_job(job.id)
    assert stored is not None
    assert (stored.state, stored.state_reason) == (machine.state, machine.reason)
    assert (stored.started_at, stored.completed_at) == (
        machine.record.started_at,
        machine.record.completed_at,
    )
    assert stored.last_sequence == len(machine.transitions)

    instances = store.instances_for_jobs([job.id])[job.id]
    assert [
        (i.role, i.index, i.attempt, i.state, i.exit_code, i.exit_reason, i.node, i.host_ip)
        for i in instances
    ] == [
        (v.role, v.index, v.attempt, v.state, v.exit_code, v.exit_reason, v.node, v.host_ip)
        for v in machine.instances
    ]
    assert [i.ports for i in instances] == [v.ports for v in machine.instances]
    assert [(i.started_at, i.finished_at) for i in instances] == [
        (v.started_at, v.finished_at) for v in machine.instances
    ]

    events = store.events_after(job.id, 0, limit=1000)
    assert [e.sequence for e in events] == list(range(1, len(machine.transitions) + 1))
    assert [(e.at, e.state, e.message, e.attempt, e.role, e.index) for e in events] == [
        (t.at, t.to_state, t.reason, t.attempt, t.role, t.index) for t in machine.transitions
    ]
    assert {e.type for e in events if e.role is None} == {JOB_STATE}
    assert {e.type for e in events if e.role is not None} == {INSTANCE_STATE}
    assert all(e.at.tzinfo is not None and e.at.utcoffset() == timedelta(0) for e in events)
    assert store.job_specs([job.id]) == {job.id: spec}
    assert store.job_config(job.id) == spec.source


def test_a_retried_job_keeps_the_instance_rows_of_its_earlier_attempt(store: Store) -> None:
    owner, _ = store.create_user("ann")
    spec = job_spec("retried", jobRetryCount=1)
    machine = JobMachine(job_policy(spec), "retried-1", at=T0)
    job, _ = store.create_job(spec, machine.snapshot(), owner_id=owner.id)
    saved = len(machine.transitions)

    def save() -> None:  # after every input, as the service does
        nonlocal saved
        store.save_machine(job.id, machine.snapshot(), machine.transitions[saved:])
        saved = len(machine.transitions)

    machine.start(at=T0)
    place_and_start(machine, T0)
    save()
    feed(machine, EventKind.EXITED, "worker", 1, T0 + timedelta(minutes=1), exit_code=1)
    save()
    stopped_at = T0 + timedelta(minutes=2)
    machine.stop_completed(1, at=stopped_at)  # ends attempt 1 and queues attempt 2 at once
    save()
    assert (machine.attempt, machine.retries, machine.state) == (2, 1, JobState.WAITING)

    stored = store.get_job(job.id)
    assert stored is not None and (stored.attempt, stored.retries) == (2, 1)
    current = store.instances_for_jobs([job.id])[job.id]
    assert {(i.attempt, i.state) for i in current} == {(2, JobState.WAITING)}
    every = store.instances_for_jobs([job.id], all_attempts=True)[job.id]
    first = [i for i in every if i.attempt == 1]
    assert [(i.role, i.index) for i in first] == [("ps", 0), ("worker", 0), ("worker", 1)]
    failed = next(i for i in first if (i.role, i.index) == ("worker", 1))
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 1)
    others = [i for i in first if i is not failed]
    assert {(i.state, i.finished_at) for i in others} == {(JobState.STOPPED, stopped_at)}
    assert all(i.state_reason.startswith("stopped: ") for i in others)
    assert len(every) == 6


def test_a_job_name_is_taken_while_its_owners_job_of_that_name_lives(store: Store) -> None:
    ann, _ = store.create_user("ann")
    bob, _ = store.create_user("bob")
    first, machine = submit(store, ann.id, "train", T0, job_id="train-a")
    with pytest.raises(NameInUse, match="already have a job named 'train'"):
        submit(store, ann.id, "train", T0 + timedelta(seconds=1))
    submit(store, bob.id, "train", T0)  # another user's name space

    machine.request_stop(at=T0 + timedelta(seconds=2))
    store.save_machine(first.id, machine.snapshot(), machine.transitions[1:])
    again, _ = submit(store, ann.id, "train", T0 + timedelta(seconds=3), job_id="train-b")
    assert store.job_named(ann.id, "train") == again

    with pytest.raises(JobExists):
        submit(store, ann.id, "other", T0, job_id="train-b")
    with pytest.raises(UnknownUser):
        submit(store, 999, "lost", T0)
    elsewhere = machine.snapshot()
    elsewhere.record.job_id = "nope"
    with pytest.raises(UnknownJob):
        store.save_machine("nope", elsewhere, [])
    with pytest.raises(UnknownJob):
        store.machine_json("nope")


def test_secrets_never_reach_the_database(store: Store) -> None:
    owner, _ = store.create_user("ann")
    secret = "hunter2-do-not-store"
    spec = job_spec("secretive", secrets={"registry_password": secret})
    assert spec.secrets  # the spec in memory has it; the store must not
    machine = JobMachine(job_policy(spec), "secretive-1", at=T0)
    job, _ = store.create_job(spec, machine.snapshot(), owner_id=owner.id)
    assert not any(secret in value for value in every_value(store))
    assert "******" in (store.job_config(job.id) or "")


# --- concurrency -------------------------------------------------------------------------------


def test_event_sequences_stay_contiguous_with_concurrent_writers(store: Store) -> None:
    owner, _ = store.create_user("ann")
    job, machine = submit(store, owner.id, "busy", T0)
    writers, per_writer = 8, 50
    barrier = threading.Barrier(writers)
    returned: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        barrier.wait()
        mine = []
        try:
            for n in range(per_writer):
                note = NewEvent(type="NOTE", at=utcnow(), message=f"{writer}:{n}")
                if writer % 2:
                    saved = store.append_events(job.id, [note])
                else:
                    saved = store.save_machine(job.id, machine.snapshot(), [note])
                mine.extend(e.sequence for e in saved)
        except BaseException as exc:
            errors.append(exc)
        returned[writer] = mine

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    events = store.events_after(job.id, 0, limit=10_000)
    total = 1 + writers * per_writer  # the job's first event, then the notes
    assert [e.sequence for e in events] == list(range(1, total + 1))
    notes = [e for e in events if e.type == "NOTE"]
    by_sequence = {e.sequence: e.message for e in notes}
    for writer, sequences in returned.items():
        assert [by_sequence[s] for s in sequences] == [f"{writer}:{n}" for n in range(per_writer)]
    stored = store.get_job(job.id)
    assert stored is not None and stored.last_sequence == total


# --- reading -----------------------------------------------------------------------------------


def test_the_job_list_pages_newest_first_by_cursor_and_filters(store: Store) -> None:
    ann, _ = store.create_user("ann")
    bob, _ = store.create_user("bob")
    jobs = {}
    for i in range(14):
        owner = bob if i % 3 == 0 else ann
        name = "shared" if i in (4, 6) else f"job{i}"
        vc = "gpu" if i % 4 == 0 else "default"
        at = T0 + timedelta(minutes=i // 2)  # pairs share a time: the id breaks the tie
        job, machine = submit(store, owner.id, name, at, vc=vc, job_id=f"j{i:02d}")
        if i % 5 == 1:
            machine.start(at=at)
            place_and_start(machine, at + timedelta(seconds=1))
        elif i % 5 == 2:
            machine.request_stop(at=at + timedelta(seconds=1))
        store.save_machine(job.id, machine.snapshot(), machine.transitions[1:])
        jobs[job.id] = store.get_job(job.id)

    newest_first = sorted(jobs.values(), key=lambda j: (j.submitted_at, j.id), reverse=True)

    def walk(where: JobFilter | None = None, first: int = 5) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list_jobs(where, first=first, after=cursor)
            assert len(page.jobs) <= first
            # A brief page is the same page, the fields it reads the same as the full ones.
            brief = store.list_jobs(where, first=first, after=cursor, brief=True)
            assert brief.has_next == page.has_next
            assert [_briefly(j) for j in brief.jobs] == [_briefly(j) for j in page.jobs]
            assert [j.cursor for j in brief.jobs] == [j.cursor for j in page.jobs]
            seen.extend(j.id for j in page.jobs)
            if not page.has_next:
                return seen
            cursor = JobCursor.decode(page.end_cursor.encode())  # as a client sends it back

    assert walk() == [j.id for j in newest_first]
    assert walk(first=100) == walk(first=1) == [j.id for j in newest_first]

    def expect(keep: Callable[[Job], bool]) -> list[str]:
        return [j.id for j in newest_first if keep(j)]

    running = JobFilter(states=[JobState.RUNNING])
    assert walk(running, 2) == expect(lambda j: j.state is JobState.RUNNING) != []
    ended = JobFilter(states=[JobState.STOPPED, JobState.RUNNING])
    assert walk(ended, 2) == expect(lambda j: j.state in (JobState.STOPPED, JobState.RUNNING))
    assert walk(JobFilter(owner="bob"), 2) == expect(lambda j: j.owner == "bob")
    assert walk(JobFilter(virtual_cluster="gpu"), 2) == expect(lambda j: j.virtual_cluster == "gpu")
    assert walk(JobFilter(name="shared")) == ["j06", "j04"]
    both = JobFilter(owner="ann", states=[JobState.WAITING])
    assert walk(both, 3) == expect(lambda j: j.owner == "ann" and j.state is JobState.WAITING)
    assert walk(JobFilter(owner="nobody")) == []

    assert [j.id for j in store.unfinished_jobs()] == [
        j.id for j in reversed(newest_first) if not j.state.is_final
    ]
    assert store.list_jobs(first=0).jobs == []
    assert store.list_jobs(first=0).has_next
    with pytest.raises(InvalidValue, match="first must be between 0 and 100"):
        store.list_jobs(first=101)
    with pytest.raises(ValueError, match="not a job list cursor"):
        JobCursor.decode("bm9wZQ")


def _briefly(job: Job) -> tuple[object, ...]:
    """The fields of a job a brief list (`list_jobs(brief=True)`) reads."""
    return (job.id, job.name, job.owner_id, job.state, job.submitted_at, job.attempt)


def test_loaders_fetch_many_jobs_in_one_query_each(store: Store) -> None:
    owner, _ = store.create_user("ann")
    ids = []
    for i in range(30):
        job, machine = submit(store, owner.id, f"bulk{i}", T0 + timedelta(seconds=i))
        if i % 2:
            machine.start(at=T0)
            place_and_start(machine, T0)
            store.save_machine(job.id, machine.snapshot(), machine.transitions[1:])
        ids.append(job.id)

    log = StatementLog(store.engine)
    try:
        counts = []
        for wanted in (ids[:3], ids):
            before = len(log.statements)
            instances = store.instances_for_jobs([*wanted, "missing"])
            store.jobs_by_ids(wanted)
            store.job_specs(wanted)
            counts.append(len(log.statements) - before)
    finally:
        log.close()
    assert counts == [3, 3]
    assert set(instances) == {*ids, "missing"}
    assert instances["missing"] == []
    for n, job_id in enumerate(ids):
        found = instances[job_id]
        assert [(i.role, i.index) for i in found] == [("ps", 0), ("worker", 0), ("worker", 1)]
        if n % 2:
            assert [i.ports for i in found] == [
                {"grpc": [20000]},
                {"grpc": [20002]},
                {"grpc": [20004]},
            ]
            assert {i.state for i in found} == {JobState.RUNNING}
        else:
            assert [i.ports for i in found] == [{}, {}, {}]


def test_events_after_pages_through_the_log(store: Store) -> None:
    owner, _ = store.create_user("ann")
    job, _ = submit(store, owner.id, "log", T0)
    notes = [
        NewEvent(type="NOTE", at=T0 + timedelta(seconds=n), message=str(n), role="worker", index=n)
        for n in range(10)
    ]
    saved = store.append_events(job.id, notes)
    assert [e.sequence for e in saved] == list(range(2, 12))
    assert [e.sequence for e in store.events_after(job.id, 0, 4)] == [1, 2, 3, 4]
    page = store.events_after(job.id, 4, 4)
    assert [(e.sequence, e.message, e.index) for e in page] == [
        (5, "3", 3),
        (6, "4", 4),
        (7, "5", 5),
        (8, "6", 6),
    ]
    assert store.events_after(job.id, 11) == []
    assert store.events_after(job.id, 0, 100) == store.events_after(job.id, 0, 4) + [
        e for e in saved if e.sequence > 4
    ]
    with pytest.raises(InvalidValue):
        store.events_after(job.id, 0, 0)
    with pytest.raises(UnknownJob):
        store.append_events("missing", notes)


@pytest.mark.postgres
def test_a_scratch_database_is_dropped_while_a_session_still_holds_it() -> None:
    """What the tests (tests/store_support.py drops theirs with the same code) and benchmarks
    rely on to leave no database behind."""
    with scratch_database(postgres_server_url(), f"paigraph_t_{worker_name()}") as url:
        held = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
        name = make_url(url).database
    try:
        with psycopg.connect(postgres_server_url(), autocommit=True) as admin:
            found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchall()
        assert found == []
    finally:
        held.close()
