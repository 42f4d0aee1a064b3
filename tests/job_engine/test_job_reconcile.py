"""Reconciling a saved job with what its backend reports after a restart, and the starting
timeout: real job machines, fed the values a backend reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from backends.base import (
    EventKind,
    InstanceEvent,
    InstanceKey,
    InstanceReport,
    InstanceStatus,
    Placement,
)
from server.jobs import JobMachine, JobState, LaunchAttempt, StopAttempt, job_policy
from server.jobs.machine import RetryInstance
from server.jobs.reconcile import UNKNOWN_TO_BACKEND, plan_resumption, stale_attempts
from server.jobs.service_machine import (
    BACKEND_REACHABLE,
    BACKEND_UNREACHABLE,
    BackendOutage,
    ServiceMachine,
    stuck_in_starting,
)
from tests.service_support import job_config, ps_worker, spec_of

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
INSTANCES = [("ps", 0), ("worker", 0), ("worker", 1)]


def started_machine(text: str = "", job_id: str = "j1") -> ServiceMachine:
    machine = ServiceMachine(job_policy(spec_of(text or ps_worker())), job_id, at=T0)
    machine.start(at=T0)
    return machine


def event(machine: JobMachine, kind: EventKind, role: str, index: int, **fields) -> InstanceEvent:
    return InstanceEvent(
        job_id=machine.job_id,
        attempt=machine.attempt,
        kind=kind,
        role=role,
        index=index,
        **fields,
    )


def place(machine: JobMachine, instances=INSTANCES, at: datetime = T0) -> None:
    for n, (role, index) in enumerate(instances):
        placement = Placement(node="node-0", host_ip=f"10.0.0.{n + 2}")
        machine.apply(event(machine, EventKind.PLACED, role, index, placement=placement, at=at))


def run(machine: JobMachine, instances=INSTANCES, at: datetime = T0) -> None:
    for role, index in instances:
        machine.apply(event(machine, EventKind.STARTED, role, index, at=at))


def report(job_id: str, role: str, index: int, status: InstanceStatus, **fields):
    return InstanceReport(
        key=InstanceKey(job_id=job_id, attempt=fields.pop("attempt", 1), role=role, index=index),
        status=status,
        placement=Placement(node="node-0", host_ip="10.0.0.9"),
        started_at=T0,
        **fields,
    )


def apply_all(machine: JobMachine, events: list[InstanceEvent]) -> list:
    actions = []
    for e in events:
        actions += machine.apply(e)
    return actions


def test_instances_that_ended_while_down_are_recorded_with_their_exit_codes() -> None:
    machine = started_machine()
    place(machine)
    run(machine)
    plan = plan_resumption(
        machine.snapshot(),
        [
            report("j1", "ps", 0, InstanceStatus.RUNNING),
            report("j1", "worker", 0, InstanceStatus.EXITED, exit_code=0, finished_at=T0),
            report("j1", "worker", 1, InstanceStatus.EXITED, exit_code=0, finished_at=T0),
            report("other", "ps", 0, InstanceStatus.RUNNING),  # another job's: left out
        ],
    )
    assert not plan.fresh and plan.pending == []
    actions = apply_all(plan.machine, plan.events)
    workers = [plan.machine.instance("worker", i) for i in (0, 1)]
    assert [(w.state, w.exit_code) for w in workers] == [(JobState.SUCCEEDED, 0)] * 2
    # the workers decided the attempt: the ps that still runs is stopped, as it would have been
    assert plan.machine.state is JobState.STOPPING
    assert [type(a) for a in actions] == [StopAttempt]


def test_an_instance_the_backend_does_not_know_is_lost_and_the_attempt_retried() -> None:
    machine = started_machine()
    place(machine)
    run(machine)
    plan = plan_resumption(
        machine.snapshot(),
        [
            report("j1", "ps", 0, InstanceStatus.RUNNING),
            report("j1", "worker", 0, InstanceStatus.RUNNING),
        ],
    )
    assert [e.kind for e in plan.events if e.role == "worker" and e.index == 1] == [EventKind.LOST]
    actions = apply_all(plan.machine, plan.events)
    lost = plan.machine.instance("worker", 1)
    assert lost is not None and lost.state is JobState.FAILED
    assert UNKNOWN_TO_BACKEND in (lost.exit_reason or "")
    assert [type(a) for a in actions] == [StopAttempt]
    # once the stop is done, the failure counts as transient: a new attempt, not counted
    after = plan.machine.stop_completed(1)
    assert [type(a).__name__ for a in after] == ["ReleaseAttempt", "LaunchAttempt"]
    assert plan.machine.attempt == 2 and plan.machine.record.accountable_retries == 0


def test_an_attempt_saved_but_never_launched_is_launched_again() -> None:
    machine = started_machine()
    plan = plan_resumption(machine.snapshot(), [])
    assert plan.events == []
    assert plan.pending == [LaunchAttempt(attempt=1, reason="launched after a server restart")]


def test_a_job_stored_before_it_started_runs_from_the_start() -> None:
    machine = ServiceMachine(job_policy(spec_of(ps_worker())), "j1", at=T0)
    plan = plan_resumption(machine.snapshot(), [])
    assert plan.fresh and plan.pending == [] and plan.events == []


def test_a_stop_under_way_is_issued_again() -> None:
    machine = started_machine()
    place(machine)
    run(machine)
    assert [type(a) for a in machine.request_stop("stop requested by ann", at=T0)] == [StopAttempt]
    reports = [report("j1", role, index, InstanceStatus.RUNNING) for role, index in INSTANCES]
    plan = plan_resumption(machine.snapshot(), reports)
    assert plan.pending == [
        StopAttempt(attempt=1, reason="stopped: stop requested by ann", grace_seconds=10.0)
    ]


def test_an_instance_retried_on_its_own_but_not_started_again_is_started_again() -> None:
    text = job_config(
        {"main": {"instances": 2, "taskRetryCount": 1, "commands": ["true"]}},
        extras={"gangAllocation": False},
    )
    machine = started_machine(text)
    main = [("main", 0), ("main", 1)]
    place(machine, main)
    run(machine, main)
    retry = machine.apply(event(machine, EventKind.EXITED, "main", 1, exit_code=1, at=T0))
    assert [type(a) for a in retry] == [RetryInstance]
    plan = plan_resumption(
        machine.snapshot(),
        [
            report("j1", "main", 0, InstanceStatus.RUNNING),
            report("j1", "main", 1, InstanceStatus.EXITED, exit_code=1),  # the run before
        ],
    )
    assert [(a.role, a.index, a.task_attempt) for a in plan.pending] == [("main", 1, 2)]
    assert all(e.index == 0 for e in plan.events)


def test_a_retry_that_ended_while_down_is_applied_not_started_a_third_time() -> None:
    """The new run was started and ended while the server was down: the backend's report
    names that run, so its end is applied, and nothing is started again."""
    text = job_config(
        {"main": {"instances": 2, "taskRetryCount": 1, "commands": ["true"]}},
        extras={"gangAllocation": False},
    )
    machine = started_machine(text)
    main = [("main", 0), ("main", 1)]
    place(machine, main)
    run(machine, main)
    machine.apply(event(machine, EventKind.EXITED, "main", 1, exit_code=1, at=T0, run=1))
    later = T0 + timedelta(seconds=5)
    plan = plan_resumption(
        machine.snapshot(),
        [
            report("j1", "main", 0, InstanceStatus.RUNNING, run=1),
            report("j1", "main", 1, InstanceStatus.EXITED, exit_code=0, finished_at=later, run=2),
        ],
    )
    assert plan.pending == []
    assert apply_all(plan.machine, plan.events) == []
    retried = plan.machine.instance("main", 1)
    assert retried is not None
    assert (retried.state, retried.exit_code, retried.task_attempt) == (JobState.SUCCEEDED, 0, 2)


def test_attempts_no_unfinished_job_runs_are_released() -> None:
    reports = [
        report("running", "ps", 0, InstanceStatus.RUNNING, attempt=2),
        report("running", "ps", 0, InstanceStatus.EXITED, attempt=1),  # an earlier attempt
        report("ended", "ps", 0, InstanceStatus.EXITED),  # its job is final (or unknown)
    ]
    assert stale_attempts(reports, {"running": 2}) == [("ended", 1), ("running", 1)]


def test_an_instance_stuck_in_starting_is_declared_lost_after_the_timeout() -> None:
    machine = started_machine()
    place(machine, at=T0)
    run(machine, [("ps", 0)], at=T0)
    assert stuck_in_starting(machine, now=T0 + timedelta(seconds=299), timeout=300) == []
    stuck = stuck_in_starting(machine, now=T0 + timedelta(seconds=301), timeout=300)
    assert [(e.role, e.index) for e in stuck] == [("worker", 0), ("worker", 1)]
    actions = machine.apply(stuck[0])
    worker = machine.instance("worker", 0)
    assert worker is not None and worker.state is JobState.FAILED
    assert "starting timeout" in (worker.exit_reason or "")
    assert [type(a) for a in actions] == [StopAttempt]


def test_a_starting_timeout_applied_after_the_instance_started_is_ignored() -> None:
    machine = started_machine()
    place(machine, at=T0)
    stuck = stuck_in_starting(machine, now=T0 + timedelta(minutes=10), timeout=300)
    run(machine, at=T0 + timedelta(minutes=10))  # the backend's STARTED came first
    assert all(machine.apply(e) == [] for e in stuck)
    assert all(v.state is JobState.RUNNING for v in machine.instances)


# --- the backend's engine unreachable -----------------------------------------------------------

OUTAGE = "Docker engine unreachable since 12:03:10 UTC; waiting"


def outage(machine: JobMachine, *, over: bool, reason: str | None = None) -> BackendOutage:
    return BackendOutage(
        job_id=machine.job_id, attempt=0, over=over, reason=reason or OUTAGE, at=T0
    )


def test_an_outage_shows_as_the_reason_changes_no_state_and_is_recorded_both_ways() -> None:
    machine = started_machine()
    place(machine)
    run(machine)
    before = machine.reason
    assert machine.apply(outage(machine, over=False)) == []
    assert (machine.state, machine.reason) == (JobState.RUNNING, OUTAGE)
    assert all(view.state is JobState.RUNNING for view in machine.instances)
    machine.apply(outage(machine, over=False))  # told again: recorded once
    machine.apply(outage(machine, over=True, reason="the backend answers again after 9 s"))
    assert machine.reason == before
    notes = machine.take_notes()
    assert [(n.type, n.message) for n in notes] == [
        (BACKEND_UNREACHABLE, OUTAGE),
        (BACKEND_REACHABLE, "the backend answers again after 9 s"),
    ]
    assert machine.take_notes() == []


def test_a_fact_from_the_backend_ends_the_outage_before_it_is_applied() -> None:
    machine = started_machine()
    place(machine)
    run(machine)
    machine.apply(outage(machine, over=False))
    machine.apply(event(machine, EventKind.EXITED, "ps", 0, exit_code=0, at=T0))
    assert not machine.reason.startswith("Docker engine")
    assert [n.type for n in machine.take_notes()] == [BACKEND_UNREACHABLE, BACKEND_REACHABLE]
    machine.apply(outage(machine, over=True))  # the service's word comes later: nothing new
    assert machine.take_notes() == []


def test_a_job_waiting_for_the_engine_keeps_the_outage_as_its_reason() -> None:
    machine = started_machine()
    machine.apply(outage(machine, over=False))
    waiting = InstanceEvent(
        job_id=machine.job_id, attempt=1, kind=EventKind.WAITING, reason=OUTAGE, at=T0
    )
    machine.apply(waiting)
    assert (machine.state, machine.reason) == (JobState.WAITING, OUTAGE)
