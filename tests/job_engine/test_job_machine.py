"""The job state machine, driven by scripted backend events as a runner would feed them."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.base import EventKind, InstanceEvent, InstanceKey, InstanceReport, InstanceStatus
from backends.base import Placement as Where
from server.jobs import (
    Finish,
    JobMachine,
    JobPolicy,
    JobState,
    LaunchAttempt,
    MachineSnapshot,
    ReleaseAttempt,
    RetryInstance,
    RetryPolicy,
    RolePolicy,
    StopAttempt,
    events_for_report,
    job_policy,
)
from server.protocol import parse_job
from server.shapes.job_states import check_transition
from tests.jobs import as_yaml, v2

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
S = JobState


class Run:
    """A machine plus the bookkeeping a runner does: the clock, the actions it was given."""

    def __init__(self, policy: JobPolicy, job_id: str = "job-1") -> None:
        self.clock = T0
        self.machine = JobMachine(policy, job_id, at=self.clock)
        self.actions: list = []
        self.take(self.machine.start(at=self.clock))

    @property
    def m(self) -> JobMachine:
        return self.machine

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def take(self, actions: list) -> list:
        self.actions.extend(actions)
        return actions

    def event(self, kind: EventKind, name: str | None = None, *, attempt: int | None = None, **kw):
        role, index = (None, None)
        if name is not None:
            role, _, number = name.rpartition("-")
            index = int(number)
        log_tail = kw.pop("log_tail", "")
        if role is not None and index is not None and "run" not in kw:
            view = self.m.instance(role, index)  # a backend names the run it tells of
            kw["run"] = view.task_attempt if view is not None else 1
        event = InstanceEvent(
            job_id=kw.pop("job_id", self.m.job_id),
            attempt=self.m.attempt if attempt is None else attempt,
            kind=kind,
            role=role,
            index=index,
            at=self.tick(),
            **kw,
        )
        return self.take(self.m.apply(event, log_tail=log_tail))

    def place_and_start(self, *names: str) -> None:
        for i, name in enumerate(names):
            where = Where(
                node=f"node-{i % 2}", host_ip=f"10.0.0.{i + 1}", ports={"http": [15000 + i]}
            )
            self.event(EventKind.PLACED, name, placement=where)
        for name in names:
            self.event(EventKind.STARTED, name)

    def exit(self, name: str, code: int, **kw) -> list:
        return self.event(EventKind.EXITED, name, exit_code=code, **kw)

    def stop_done(self) -> list:
        """What the runner does with a StopAttempt: backend.stop, then report it returned."""
        stops = [a for a in self.actions if isinstance(a, StopAttempt)]
        assert stops, "no stop was asked for"
        return self.take(self.m.stop_completed(stops[-1].attempt, at=self.tick()))

    def view(self, name: str):
        role, _, number = name.rpartition("-")
        found = self.m.instance(role, int(number))
        assert found is not None
        return found

    def finish(self) -> Finish:
        finishes = [a for a in self.actions if isinstance(a, Finish)]
        assert len(finishes) == 1, self.actions
        return finishes[0]

    def launches(self) -> list[int]:
        return [a.attempt for a in self.actions if isinstance(a, LaunchAttempt)]


def roles(*specs: tuple[str, int, int, int], retry: int = 0, **kw) -> JobPolicy:
    """(name, instances, min_failed, min_succeeded) per role."""
    return JobPolicy(
        roles=tuple(
            RolePolicy(name=n, instances=i, min_failed=f, min_succeeded=s) for n, i, f, s in specs
        ),
        retry=RetryPolicy.for_job(retry, max_attempts=kw.pop("max_attempts", None)),
        **kw,
    )


PS_WORKERS = (("ps", 1, 1, -1), ("worker", 2, 1, 2))
ALL = ("ps-0", "worker-0", "worker-1")


def job_states(machine: JobMachine) -> list[JobState]:
    return [t.to_state for t in machine.transitions if t.role is None]


# --- success ---------------------------------------------------------------------------------


def test_a_job_goes_waiting_starting_running_succeeded_with_instance_details() -> None:
    run = Run(roles(*PS_WORKERS))
    assert run.actions == [LaunchAttempt(attempt=1, reason="first attempt")]
    run.event(EventKind.WAITING, reason="needs 5 cpu, 2 free in vc default")
    assert run.m.state is S.WAITING
    assert run.m.reason == "waiting: needs 5 cpu, 2 free in vc default"
    run.place_and_start(*ALL)
    assert run.m.state is S.RUNNING and run.m.reason == "running: 3 of 3 instance(s) running"
    worker = run.view("worker-1")
    assert (worker.node, worker.host_ip, worker.ports) == ("node-0", "10.0.0.3", {"http": [15002]})
    assert worker.started_at is not None and run.m.record.started_at == T0 + timedelta(seconds=5)

    run.exit("worker-0", 0)
    assert run.m.state is S.RUNNING and "1 ended" in run.m.reason
    run.exit("worker-1", 0)
    # both workers succeeded: the role's rule ends the attempt, the ps still runs -> stopped
    assert run.m.state is S.STOPPING
    stop = run.actions[-1]
    assert isinstance(stop, StopAttempt) and stop.attempt == 1 and stop.grace_seconds == 10.0
    assert "SucceededTaskCount 2 has reached MinSucceededTaskCount 2 in role worker" in stop.reason
    assert run.view("ps-0").state is S.STOPPING

    run.event(EventKind.STOPPED, "ps-0", exit_code=143)
    assert run.m.state is S.SUCCEEDED
    assert run.actions[-2:] == [ReleaseAttempt(attempt=1), run.finish()]
    assert run.finish().state is S.SUCCEEDED and run.m.record.exit.code == 0
    ps = run.view("ps-0")
    assert ps.state is S.STOPPED and ps.exit_code == 143
    assert ps.exit.phrase == "FrameworkAttemptCompletion" and "worker-1" in ps.exit_reason
    assert job_states(run.m) == [S.WAITING, S.STARTING, S.RUNNING, S.STOPPING, S.SUCCEEDED]
    trigger = run.m.record.trigger
    assert (trigger.role, trigger.index) == ("worker", 1)
    assert run.m.record.completed_at == run.clock
    # a stop completing after the end changes nothing
    assert run.m.stop_completed(1) == []


def test_all_instances_ending_without_a_rule_firing_succeeds_even_with_allowed_failures() -> None:
    run = Run(roles(("ps", 1, -1, -1), ("worker", 2, -1, -1)))
    run.place_and_start(*ALL)
    run.exit("worker-0", 3)
    run.exit("ps-0", 0)
    assert run.m.state is S.RUNNING
    run.exit("worker-1", 1)
    assert run.m.state is S.SUCCEEDED
    assert run.finish().reason.startswith("CompletedTaskCount 3 has reached TotalTaskCount 3")
    assert "2 failed instance(s) were allowed" in run.finish().reason
    assert run.m.record.trigger.role is None
    assert [run.view(n).state for n in ALL] == [S.SUCCEEDED, S.FAILED, S.FAILED]


# --- completion rules ------------------------------------------------------------------------


def test_the_first_failure_fails_the_job_and_records_which_instance() -> None:
    run = Run(roles(*PS_WORKERS))
    run.place_and_start(*ALL)
    actions = run.exit("worker-1", 1)
    assert [type(a) for a in actions] == [StopAttempt]
    expected = (
        "FailedTaskCount 1 has reached MinFailedTaskCount 1 in role worker "
        "(worker-1 exited with 1: the command failed and the cause was not recognised)"
    )
    assert actions[0].reason == expected
    assert run.m.reason == "stopping: " + expected
    run.stop_done()
    finish = run.finish()
    assert finish.state is S.FAILED and finish.reason.startswith(expected)
    assert "not retried (retry count 0)" in finish.reason
    assert finish.exit.code == 1 and run.m.record.exit.exit_code == 1
    trigger = run.m.record.trigger
    assert (trigger.role, trigger.index) == ("worker", 1)
    assert run.view("worker-1").exit_reason.startswith("exit code 1: ")
    assert {run.view(n).state for n in ("ps-0", "worker-0")} == {S.STOPPED}
    assert run.m.record.attempts[0].state is S.FAILED


def test_min_failed_two_waits_for_the_second_failure() -> None:
    run = Run(roles(("worker", 3, 2, -1)))
    names = ("worker-0", "worker-1", "worker-2")
    run.place_and_start(*names)
    assert run.exit("worker-2", 1) == []
    assert run.m.state is S.RUNNING
    run.exit("worker-0", 2)
    assert run.m.state is S.STOPPING
    assert "FailedTaskCount 2 has reached MinFailedTaskCount 2 in role worker (worker-0" in (
        run.m.reason
    )
    assert run.m.record.trigger.index == 0


def test_a_parameter_server_that_exits_ends_a_v2_job_as_succeeded() -> None:
    # OpenPAI's default minSucceededInstances is the role's instance count, so a finished ps
    # completes the job while the workers still run
    result = parse_job(as_yaml(v2()))
    assert result.spec is not None
    run = Run(job_policy(result.spec))
    run.place_and_start(*ALL)
    run.exit("ps-0", 0)
    assert run.m.state is S.STOPPING
    assert "in role ps (ps-0 exited with 0" in run.m.reason
    run.event(EventKind.STOPPED, "worker-0", exit_code=143)
    run.event(EventKind.EXITED, "worker-1", exit_code=0)  # finished during the grace period
    assert run.finish().state is S.SUCCEEDED
    assert run.view("worker-0").state is S.STOPPED
    assert run.view("worker-1").state is S.SUCCEEDED


def test_a_disabled_role_never_decides_the_job() -> None:
    run = Run(roles(("ps", 1, -1, -1), ("worker", 2, 1, 2)))
    run.place_and_start(*ALL)
    run.exit("ps-0", 1)  # ps may fail
    assert run.m.state is S.RUNNING
    run.exit("ps-0", 1)  # a duplicate end is ignored
    run.exit("worker-0", 0)
    run.exit("worker-1", 0)
    assert run.finish().state is S.SUCCEEDED
    assert run.m.record.trigger.role == "worker"


# --- retries ---------------------------------------------------------------------------------


def test_a_transient_failure_is_retried_without_counting() -> None:
    run = Run(roles(*PS_WORKERS, retry=0))
    run.place_and_start(*ALL)
    run.exit("worker-0", 137)
    run.stop_done()
    assert run.actions[-2:] == [
        ReleaseAttempt(attempt=1),
        LaunchAttempt(attempt=2, reason=run.m.reason),
    ]
    assert run.m.state is S.WAITING and run.m.attempt == 2
    assert (run.m.retries, run.m.record.accountable_retries, run.m.record.platform_retries) == (
        1,
        0,
        1,
    )
    assert "retried, not counted" in run.m.reason and "SIGKILL" in run.m.reason
    assert all(v.state is S.WAITING and v.attempt == 2 for v in run.m.instances)
    assert job_states(run.m)[-2:] == [S.STOPPING, S.WAITING]
    assert run.m.record.attempts[0].state is S.FAILED

    run.place_and_start(*ALL)
    for name in ALL:
        run.exit(name, 0)
    assert run.finish().state is S.SUCCEEDED and run.m.retries == 1
    assert run.launches() == [1, 2]


def test_unknown_failures_are_retried_up_to_the_count_then_fail() -> None:
    run = Run(roles(("worker", 1, 1, 1), retry=2))
    for attempt in (1, 2, 3):
        assert run.m.attempt == attempt
        run.place_and_start("worker-0")
        run.exit("worker-0", 1)
    assert run.launches() == [1, 2, 3]
    assert run.m.state is S.FAILED and run.m.retries == 2
    assert run.m.record.accountable_retries == 2
    assert "all 2 retries used" in run.finish().reason
    releases = [a.attempt for a in run.actions if isinstance(a, ReleaseAttempt)]
    assert releases == [1, 2, 3]


def test_a_permanent_failure_is_not_retried_whatever_the_count() -> None:
    run = Run(roles(("worker", 1, 1, 1), retry=5))
    run.place_and_start("worker-0")
    run.exit("worker-0", 137, oom_killed=True)
    finish = run.finish()
    assert finish.state is S.FAILED and run.launches() == [1]
    assert "out of memory" in finish.reason and "not retried" in finish.reason
    assert finish.exit.phrase == "UserContainerDockerOOMKilled"


def test_an_oom_kill_under_a_limit_the_machine_capped_says_what_was_asked_and_given() -> None:
    run = Run(roles(("worker", 1, 1, 1)))
    run.place_and_start("worker-0")
    told = (
        "killed because it used more memory than this machine gave it (out of memory: "
        "asked 16384 MB; this machine gave 3000 MB, its share of this machine's 3000 MB)"
    )
    run.exit("worker-0", 137, oom_killed=True, reason=told)
    finish = run.finish()
    assert finish.state is S.FAILED
    assert "asked 16384 MB; this machine gave 3000 MB" in finish.reason
    assert run.view("worker-0").exit_reason == f"exit code 137: {told}"


def test_a_command_not_found_in_the_log_tail_is_permanent() -> None:
    run = Run(roles(("worker", 1, 1, 1), retry=3))
    run.place_and_start("worker-0")
    run.exit("worker-0", 127, log_tail="sh: trian.py: not found\n")
    assert run.finish().state is S.FAILED and run.launches() == [1]
    assert "trian.py" in run.view("worker-0").exit_reason


def test_a_missing_image_fails_at_once_with_a_clear_reason() -> None:
    run = Run(roles(("ps", 1, 1, -1), ("worker", 2, 1, -1), retry=3))
    for name in ALL:
        run.event(EventKind.PLACED, name)
    run.event(EventKind.START_FAILED, "worker-0", reason="No such image: paigraph/nope:1")
    assert run.m.state is S.STOPPING
    run.event(EventKind.START_FAILED, "worker-1", reason="No such image: paigraph/nope:1")
    run.stop_done()
    finish = run.finish()
    assert finish.state is S.FAILED and run.launches() == [1]
    assert "worker-0 could not start: No such image: paigraph/nope:1" in finish.reason
    assert finish.exit.phrase == "ContainerImageNotExists"
    assert run.view("worker-1").state is S.STOPPED


def test_minus_one_retries_every_failure_until_the_safety_cap() -> None:
    run = Run(roles(("worker", 1, 1, 1), retry=-1, max_attempts=4))
    while not run.m.is_final:
        run.place_and_start("worker-0")
        run.exit("worker-0", 1)
    assert run.launches() == [1, 2, 3, 4] and run.m.retries == 3
    assert run.finish().state is S.FAILED
    assert "max_attempts 4" in run.finish().reason


def test_minus_two_runs_a_successful_job_again_until_the_cap() -> None:
    run = Run(roles(("worker", 1, 1, 1), retry=-2, max_attempts=3))
    while not run.m.is_final:
        run.place_and_start("worker-0")
        run.exit("worker-0", 0)
    assert run.launches() == [1, 2, 3]
    finish = run.finish()
    assert finish.state is S.SUCCEEDED and "max_attempts 3" in finish.reason
    assert run.m.retries == 2 and run.m.record.accountable_retries == 2


def test_a_lost_instance_is_retried() -> None:
    run = Run(roles(("worker", 1, 1, 1)))
    run.place_and_start("worker-0")
    run.event(EventKind.LOST, "worker-0", reason="container vanished")
    assert run.launches() == [1, 2]
    assert "container vanished" in run.m.reason


def test_events_of_older_attempts_and_other_jobs_are_ignored() -> None:
    run = Run(roles(*PS_WORKERS))
    run.place_and_start(*ALL)
    run.exit("worker-0", 143)
    run.stop_done()
    assert run.m.attempt == 2
    before = run.m.record.model_copy(deep=True)
    for kind in EventKind:
        assert run.event(kind, "worker-1", attempt=1, exit_code=1) == []
    assert run.event(EventKind.EXITED, "worker-1", job_id="job-2", exit_code=1) == []
    assert run.event(EventKind.EXITED, "chief-0", exit_code=1) == []  # no such role
    assert run.m.record == before


# --- stopping --------------------------------------------------------------------------------


def test_a_stop_in_the_middle_ends_stopped_and_is_never_retried() -> None:
    run = Run(roles(*PS_WORKERS, retry=-1, stop_grace_seconds=3.0))
    run.place_and_start(*ALL)
    run.exit("worker-0", 0)
    actions = run.take(run.m.request_stop("interrupted (Ctrl-C)", at=run.tick()))
    assert actions == [
        StopAttempt(attempt=1, reason="stopped: interrupted (Ctrl-C)", grace_seconds=3.0)
    ]
    assert run.m.state is S.STOPPING and run.m.reason == "stopping: interrupted (Ctrl-C)"
    assert run.m.request_stop("again") == []  # asked twice: one stop
    run.event(EventKind.STOPPED, "ps-0", exit_code=143)
    run.event(EventKind.STOPPED, "worker-1", exit_code=137)
    finish = run.finish()
    assert finish.state is S.STOPPED and finish.reason == "stopped: interrupted (Ctrl-C)"
    assert finish.exit.phrase == "StopFrameworkRequested"
    assert run.launches() == [1]
    assert [run.view(n).state for n in ALL] == [S.STOPPED, S.SUCCEEDED, S.STOPPED]
    assert run.view("worker-1").exit_code == 137
    assert job_states(run.m) == [S.WAITING, S.STARTING, S.RUNNING, S.STOPPING, S.STOPPED]


def test_a_stop_while_waiting_for_resources() -> None:
    run = Run(roles(*PS_WORKERS))
    run.event(EventKind.WAITING, reason="needs 5 cpu, 2 free in vc default")
    run.take(run.m.request_stop(at=run.tick()))
    assert run.m.state is S.STOPPING
    run.stop_done()
    assert run.finish().state is S.STOPPED
    assert run.actions[-2] == ReleaseAttempt(attempt=1)
    assert all(v.state is S.STOPPED for v in run.m.instances)


def test_a_stop_before_the_first_launch_needs_no_backend() -> None:
    machine = JobMachine(roles(*PS_WORKERS), "job-1", at=T0)
    actions = machine.request_stop(at=T0)
    assert [type(a) for a in actions] == [Finish] and machine.state is S.STOPPED
    assert machine.start() == []


def test_a_stop_after_the_outcome_was_decided_keeps_the_outcome_and_prevents_a_retry() -> None:
    run = Run(roles(*PS_WORKERS, retry=3))
    run.place_and_start(*ALL)
    run.exit("worker-0", 1)
    assert run.m.state is S.STOPPING
    assert run.m.request_stop(at=run.tick()) == []  # the attempt is being stopped already
    run.stop_done()
    finish = run.finish()
    assert finish.state is S.FAILED and run.launches() == [1]
    assert "the job was stopped" in finish.reason


def test_a_refused_launch_fails_the_job_without_retry() -> None:
    run = Run(roles(*PS_WORKERS, retry=-2))
    message = "asks 64 cpu per instance, the largest node has 16"
    actions = run.take(run.m.launch_refused(1, message, at=run.tick()))
    assert actions == [run.finish()] and run.finish().state is S.FAILED
    assert run.finish().reason == f"refused: {message}"
    assert all(v.state is S.FAILED for v in run.m.instances)
    assert run.m.launch_refused(1, message) == []


# --- task retry (gang allocation off) ---------------------------------------------------------


def test_without_gang_allocation_a_failed_instance_is_retried_on_its_own() -> None:
    policy = JobPolicy(
        roles=(
            RolePolicy(name="ps", instances=1, min_failed=1),
            RolePolicy(name="worker", instances=2, min_failed=1, task_retry_count=1),
        ),
        gang_allocation=False,
    )
    run = Run(policy)
    run.place_and_start(*ALL)
    actions = run.exit("worker-1", 1)
    assert len(actions) == 1 and isinstance(actions[0], RetryInstance)
    retry = actions[0]
    assert (retry.attempt, retry.role, retry.index, retry.task_attempt) == (1, "worker", 1, 2)
    view = run.view("worker-1")
    assert view.state is S.WAITING and view.task_retries == 1 and view.exit is None
    assert "retry 1 of 1" in view.reason
    assert run.m.state is S.RUNNING and run.m.attempt == 1

    run.place_and_start("worker-1")
    assert run.view("worker-1").state is S.RUNNING
    run.exit("worker-1", 1)  # its own retries are used: now it counts
    assert run.m.state is S.STOPPING and run.m.record.trigger.index == 1


def test_the_end_of_a_run_told_again_after_its_retry_does_not_end_the_new_run() -> None:
    """After a restart a backend may tell one end twice (its records, then its event stream):
    the second telling arrives once the instance is retried on its own and must not end the
    run that replaced it (the SIGKILL fault suite's "first instance placed" case)."""
    policy = JobPolicy(
        roles=(
            RolePolicy(name="ps", instances=1, min_failed=1),
            RolePolicy(name="worker", instances=2, min_failed=1, task_retry_count=1),
        ),
        gang_allocation=False,
    )
    run = Run(policy)
    run.place_and_start(*ALL)
    first_end = InstanceEvent(
        job_id=run.m.job_id,
        attempt=1,
        kind=EventKind.EXITED,
        role="worker",
        index=1,
        exit_code=3,
        at=run.tick(),
    )
    assert isinstance(run.take(run.m.apply(first_end))[0], RetryInstance)
    assert run.m.apply(first_end) == []  # told again: the same run's end
    assert run.m.apply(first_end.model_copy(update={"kind": EventKind.STOPPED})) == []
    view = run.view("worker-1")
    assert (view.state, view.task_attempt, view.exit_code) == (S.WAITING, 2, None)

    run.place_and_start("worker-1")
    run.exit("worker-1", 0)
    assert run.view("worker-1").state is S.SUCCEEDED
    assert run.m.state is S.RUNNING


TOLD_AGAIN = [
    (when, restart, kind)
    for when in ("before the retry started", "after the retry started")
    for restart in (False, True)
    for kind in (EventKind.EXITED, EventKind.LOST)
]


@pytest.mark.parametrize(("when", "restart", "kind"), TOLD_AGAIN)
def test_one_end_told_twice_counts_one_death_and_one_retry(
    when: str, restart: bool, kind: EventKind, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend tells the end of a run twice, the second time dated after the retry was
    decided (as after a server restart: its records, then its event stream) and, when `kind`
    is LOST, as a vanished container, which on its own would be retried without counting.
    Both copies name run 1, so the second is dropped whenever it comes: before the retry's
    start or once it runs, with or without the machine saved and restored in between."""
    policy = JobPolicy(
        roles=(
            RolePolicy(name="ps", instances=1, min_failed=1),
            RolePolicy(name="worker", instances=2, min_failed=1, task_retry_count=1),
        ),
        gang_allocation=False,
    )
    run = Run(policy)
    run.place_and_start(*ALL)
    end = InstanceEvent(
        job_id=run.m.job_id,
        attempt=1,
        kind=EventKind.EXITED,
        role="worker",
        index=1,
        run=1,
        exit_code=3,
        at=run.tick(),
    )
    retry = run.take(run.m.apply(end))
    assert [(type(a), a.task_attempt) for a in retry] == [(RetryInstance, 2)]
    if restart:
        stored = run.m.snapshot().model_dump_json()
        run.machine = JobMachine.restore(MachineSnapshot.model_validate_json(stored))
    again = end.model_copy(update={"kind": kind, "at": run.tick() + timedelta(seconds=30)})
    if when == "after the retry started":
        run.place_and_start("worker-1")  # its events name the new run: run 2
    with caplog.at_level(logging.DEBUG, logger="server.jobs.machine"):
        assert run.m.apply(again) == []
    assert f"{kind} event of worker-1 dropped: it is about run 1; run 2 is current" in caplog.text
    if when == "before the retry started":
        run.place_and_start("worker-1")
    assert run.view("worker-1").state is S.RUNNING
    run.exit("worker-1", 0)

    view = run.view("worker-1")
    assert (view.state, view.exit_code, view.task_attempt) == (S.SUCCEEDED, 0, 2)
    assert (view.task_retries, view.task_accountable_retries) == (1, 1)
    deaths = [
        t
        for t in run.m.transitions
        if (t.role, t.index) == ("worker", 1) and t.from_state is S.RUNNING
    ]
    assert [t.to_state for t in deaths] == [S.WAITING, S.SUCCEEDED]  # one death, one retry
    assert [a for a in run.actions if isinstance(a, RetryInstance)] == retry


def test_an_end_without_a_run_number_is_told_apart_by_its_time() -> None:
    """A record written before events named their run: its end, told again no later than the
    retry, is still taken for the earlier run's."""
    policy = JobPolicy(
        roles=(RolePolicy(name="worker", instances=2, min_failed=1, task_retry_count=1),),
        gang_allocation=False,
    )
    run = Run(policy)
    run.place_and_start("worker-0", "worker-1")
    run.exit("worker-1", 3)
    old_end = InstanceEvent(
        job_id=run.m.job_id,
        attempt=1,
        kind=EventKind.EXITED,
        role="worker",
        index=1,
        exit_code=3,
        at=run.m.instance("worker", 1).retried_at,
    )
    assert run.m.apply(old_end) == []
    assert run.view("worker-1").task_attempt == 2


def test_with_gang_allocation_an_instance_is_never_retried_on_its_own() -> None:
    policy = JobPolicy(
        roles=(RolePolicy(name="worker", instances=2, min_failed=1, task_retry_count=3),),
    )
    run = Run(policy)
    run.place_and_start("worker-0", "worker-1")
    assert [type(a) for a in run.exit("worker-1", 1)] == [StopAttempt]


# --- persistence and restart -----------------------------------------------------------------


def test_a_snapshot_survives_json_and_the_restored_machine_continues_identically() -> None:
    run = Run(roles(*PS_WORKERS, retry=1))
    run.place_and_start(*ALL)
    run.exit("worker-0", 1)
    stored = run.m.snapshot().model_dump_json()
    restored = JobMachine.restore(MachineSnapshot.model_validate_json(stored))
    assert restored.record == run.m.record and restored.policy == run.m.policy

    stop = run.m.stop_completed(1, at=T0 + timedelta(minutes=1))
    assert restored.stop_completed(1, at=T0 + timedelta(minutes=1)) == stop
    assert restored.record == run.m.record and restored.attempt == 2


def test_instances_found_after_a_restart_are_adopted() -> None:
    run = Run(roles(("worker", 2, 1, -1)))
    where = Where(node="node-0", host_ip="10.0.0.9", ports={"http": [15010]})
    started = T0 + timedelta(seconds=30)
    reports = [
        InstanceReport(
            key=InstanceKey(job_id="job-1", attempt=1, role="worker", index=0),
            status=InstanceStatus.RUNNING,
            placement=where,
            started_at=started,
        ),
        InstanceReport(
            key=InstanceKey(job_id="job-1", attempt=1, role="worker", index=1),
            status=InstanceStatus.EXITED,
            placement=where,
            started_at=started,
            finished_at=started + timedelta(seconds=5),
            exit_code=0,
        ),
    ]
    for report in reports:
        for event in events_for_report(report):
            run.take(run.m.apply(event))
    assert run.m.state is S.RUNNING
    assert run.view("worker-0").host_ip == "10.0.0.9"
    assert run.view("worker-1").state is S.SUCCEEDED


# --- property: no illegal change, and every job ends ----------------------------------------

ENDINGS = (EventKind.EXITED, EventKind.START_FAILED, EventKind.STOPPED, EventKind.LOST)
CODES = (0, 0, 1, 2, 127, 130, 137, 139, 143, 254)

policies = st.builds(
    lambda specs, retry, cap, gang, grace: JobPolicy(
        roles=tuple(
            RolePolicy(
                name=f"r{i}",
                instances=n,
                min_failed=f,
                min_succeeded=s,
                task_retry_count=t,
            )
            for i, (n, f, s, t) in enumerate(specs)
        ),
        retry=RetryPolicy.for_job(retry, max_attempts=cap),
        gang_allocation=gang,
        stop_grace_seconds=grace,
    ),
    st.lists(
        st.tuples(
            st.integers(1, 3),
            st.sampled_from([-1, 0, 1, 2]),
            st.sampled_from([-1, 0, 1, 2, 3]),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([-2, -1, 0, 1, 2]),
    st.integers(1, 4),
    st.booleans(),
    st.just(1.0),
)

steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("event"),
            st.sampled_from(list(EventKind)),
            st.integers(0, 8),  # which instance
            st.sampled_from([0, 0, 0, -1, 1]),  # attempt offset: mostly current
            st.sampled_from(CODES),
            st.booleans(),  # oom
        ),
        st.just(("stop",)),
        st.just(("stop_done",)),
        st.just(("refused",)),
    ),
    max_size=40,
)


def _check_history(machine: JobMachine) -> None:
    job_state = None
    instance_state: dict[tuple[str, int, int], JobState] = {}
    for t in machine.transitions:
        if t.role is None:
            assert t.from_state == job_state
            if job_state is not None:
                check_transition(job_state, t.to_state)
            job_state = t.to_state
        else:
            key = (t.role, t.index, t.attempt)
            assert t.from_state == instance_state.get(key, JobState.WAITING)
            check_transition(t.from_state, t.to_state, instance=True)
            instance_state[key] = t.to_state
    assert job_state is machine.state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies, steps, st.data())
def test_random_event_sequences_never_break_the_rules_and_always_end(policy, script, data) -> None:
    machine = JobMachine(policy, "job-p", at=T0)
    clock = [T0]
    actions: list = []
    pending_stops: list[int] = []

    def now() -> datetime:
        clock[0] += timedelta(seconds=1)
        return clock[0]

    def take(new: list) -> None:
        if actions and isinstance(actions[-1], Finish):
            assert new == [], "nothing may follow Finish"
        for action in new:
            if isinstance(action, StopAttempt):
                pending_stops.append(action.attempt)
        actions.extend(new)

    take(machine.start(at=now()))
    names = [(r.name, i) for r in policy.roles for i in range(r.instances)]
    for step in script:
        if step[0] == "event":
            _, kind, which, offset, code, oom = step
            role, index = names[which % len(names)]
            event = InstanceEvent(
                job_id="job-p",
                attempt=max(1, machine.attempt + offset),
                kind=kind,
                role=None if kind is EventKind.WAITING else role,
                index=None if kind is EventKind.WAITING else index,
                exit_code=code if kind in (EventKind.EXITED, EventKind.STOPPED) else None,
                oom_killed=oom and kind is EventKind.EXITED,
                reason="why not",
                at=now(),
            )
            take(machine.apply(event))
        elif step[0] == "stop":
            take(machine.request_stop(at=now()))
        elif step[0] == "stop_done" and pending_stops:
            take(machine.stop_completed(pending_stops.pop(0), at=now()))
        elif step[0] == "refused" and data.draw(st.integers(0, 9)) == 0:
            take(machine.launch_refused(machine.attempt, "never fits", at=now()))

    # Now end every instance, as a runner eventually sees: the job must reach a final state.
    for _ in range(500):
        if machine.is_final:
            break
        if pending_stops:
            take(machine.stop_completed(pending_stops.pop(0), at=now()))
            continue
        for view in list(machine.instances):
            if not view.ended:
                code = data.draw(st.sampled_from(CODES), label="final exit code")
                event = InstanceEvent(
                    job_id="job-p",
                    attempt=machine.attempt,
                    kind=data.draw(st.sampled_from(ENDINGS), label="ending"),
                    role=view.role,
                    index=view.index,
                    exit_code=code,
                    at=now(),
                )
                take(machine.apply(event))
    assert machine.is_final
    assert all(v.ended for v in machine.instances)
    finishes = [a for a in actions if isinstance(a, Finish)]
    assert len(finishes) == 1 and actions[-1] == finishes[0]
    assert finishes[0].state is machine.state and finishes[0].reason == machine.reason
    launches = [a.attempt for a in actions if isinstance(a, LaunchAttempt)]
    assert launches == list(range(1, machine.attempt + 1))
    assert machine.attempt <= policy.retry.max_attempts
    assert machine.retries == machine.attempt - 1
    released = [a.attempt for a in actions if isinstance(a, ReleaseAttempt)]
    assert released == sorted(set(released)) and set(released) <= set(launches)
    _check_history(machine)
    # after the end, nothing changes any more
    assert machine.request_stop() == [] and machine.stop_completed(machine.attempt) == []
