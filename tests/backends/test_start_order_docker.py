"""Role start order on the simulator backend, with real containers: a role's commands wait at
the gate until what it depends on holds, and a dependency that cannot hold ends it clearly."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from backends.base import (
    EventKind,
    InstanceEvent,
    InstanceKey,
    LaunchRequest,
    ReadinessCheck,
    StartDependency,
)
from backends.start_gate import DEPENDENCY_FAILED
from server.jobs.exit_codes import START_DEPENDENCY_FAILED
from server.shapes.job_states import JobState
from server.shapes.values import Job
from tests.job_engine.test_job_service import (
    history,
    instances_of,
    job_of,
    service_on,
    submitted,
    user,
)
from tests.simulated import Collector, backend, job, job_config, leftovers, log_text, role
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

# The ps takes a while before it listens on its http port; every request it answers is
# recorded, and it exits once both workers were answered.
PS = [
    "sleep 2",
    "mkdir -p /tmp/www/cgi-bin",
    "printf '%s\\n' '#!/bin/sh' 'echo Content-Type: text/plain' 'echo' 'echo hit >> /tmp/heard'"
    " 'echo ok' > /tmp/www/cgi-bin/hi",
    "chmod +x /tmp/www/cgi-bin/hi && touch /tmp/heard",
    "httpd -p $PAI_CONTAINER_HOST_PORT -h /tmp/www",
    "echo ps listening",
    "while [ $(wc -l < /tmp/heard) -lt 2 ]; do sleep 0.2; done",
]
# A worker's first command reaches the ps, once: it fails when the ps does not listen yet.
WORKER = [
    "wget -q -O /tmp/answer http://${PAI_TASK_ROLE_ps_HOST_LIST%%,*}/cgi-bin/hi",
    "grep -q ok /tmp/answer && echo worker reached ps",
]
READY = [StartDependency(role="ps", when="ready", instances=1)]
BY_PORT = ReadinessCheck(port="http", period_seconds=0.2)


async def workers_ended(
    events: Collector, request: LaunchRequest
) -> dict[InstanceKey, InstanceEvent]:
    """The ends of the request's workers, once each ended."""
    workers = request.role("worker").instances

    def ended() -> dict[InstanceKey, InstanceEvent]:
        return {k: e for k, e in events.ended(request).items() if k.role == "worker"}

    await events.until(lambda: len(ended()) == workers, 60, "every worker ending")
    return ended()


def ps_worker(*, wait: bool) -> LaunchRequest:
    ps = role("ps", PS, readiness=BY_PORT, min_succeeded=-1)
    return job(ps, role("worker", WORKER, instances=2, depends_on=READY if wait else []))


async def test_workers_that_wait_for_the_ps_to_be_ready_reach_it(tmp_path: Path) -> None:
    request = ps_worker(wait=True)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {k.role: e.exit_code for k, e in ended.items()} == {"ps": 0, "worker": 0}, [
            e.reason for e in ended.values()
        ]
        placed = {
            e.key.role: e.reason or "" for e in events.of(request) if e.kind is EventKind.PLACED
        }
        assert "waiting for 1 of 1 ps instances to be ready" in placed["worker"]
        assert "waiting" not in placed["ps"]
        # the order, from what each instance logged: the ps listened, then the workers began
        ps_log = await log_text(
            sim, InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0)
        )
        assert "ps listening" in ps_log
        for index in (0, 1):
            key = InstanceKey(job_id=request.job_id, attempt=1, role="worker", index=index)
            assert "worker reached ps" in await log_text(sim, key)
        started = {e.key: e.at for e in events.of(request) if e.kind is EventKind.STARTED}
        ps_started = started[InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0)]
        assert all(at >= ps_started for key, at in started.items() if key.role == "worker")
        await sim.forget(request.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


async def test_workers_that_do_not_wait_fail_to_reach_the_ps(tmp_path: Path) -> None:
    request = ps_worker(wait=False)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await workers_ended(events, request)
        assert all(e.exit_code not in (None, 0) for e in ended.values())
        await sim.stop(request.job_id, 1, grace_seconds=1)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()


async def test_a_dependency_that_can_never_hold_ends_the_waiting_role(tmp_path: Path) -> None:
    ps = role("ps", ["exit 4"], min_succeeded=-1)
    waits = [StartDependency(role="ps", when="succeeded", instances=1)]
    request = job(ps, role("worker", ["echo worker ran"], depends_on=waits))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        worker = next(e for k, e in ended.items() if k.role == "worker")
        assert (worker.kind, worker.exit_code) == (EventKind.EXITED, DEPENDENCY_FAILED)
        assert "1 of 1 ps instances to succeed" in (worker.reason or "")
        assert "too many of them ended" in (worker.reason or "")
        assert "worker ran" not in await log_text(sim, worker.key)
        assert not any(
            e.kind is EventKind.STARTED for e in events.of(request) if e.key.role == "worker"
        )
        await sim.forget(request.job_id, 1)
        events.close()


async def test_a_wait_past_its_deadline_ends_with_its_code(tmp_path: Path) -> None:
    never_ready = ReadinessCheck(command=["false"], period_seconds=0.2)
    ps = role("ps", ["sleep 600"], readiness=never_ready, min_succeeded=-1)
    request = job(
        ps,
        role("worker", ["echo worker ran"], depends_on=READY, dependency_timeout_seconds=1),
    )
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        [worker] = (await workers_ended(events, request)).values()
        assert (worker.kind, worker.exit_code) == (EventKind.EXITED, DEPENDENCY_FAILED)
        assert "waited 1 s (dependencyTimeoutSeconds)" in (worker.reason or "")
        assert "worker ran" not in await log_text(sim, worker.key)
        await sim.stop(request.job_id, 1, grace_seconds=1)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()


async def test_a_readiness_command_run_inside_the_instance_opens_the_gate(tmp_path: Path) -> None:
    up = ReadinessCheck(command=["test", "-e", "/tmp/up"], period_seconds=0.2)
    ps = role(
        "ps", ["sleep 1", "touch /tmp/up", "echo ps up", "sleep 3"], readiness=up, min_succeeded=-1
    )
    request = job(ps, role("worker", ["echo worker ran"], depends_on=READY))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {k.role: e.exit_code for k, e in ended.items()} == {"ps": 0, "worker": 0}
        worker = next(k for k in ended if k.role == "worker")
        assert "worker ran" in await log_text(sim, worker)
        await sim.forget(request.job_id, 1)
        events.close()


# --- through the job service: what users see ----------------------------------------------------


def ordered_job(ps_commands: list[str], order: dict[str, Any], **ps: Any) -> str:
    """A v2 ps/worker job whose extras.paigraph.taskRoles say `order`."""
    return job_config(
        {
            "ps": {"commands": ps_commands, "ports": {"grpc": 1}, **ps},
            "worker": {"instances": 2, "commands": ["echo worker ran"]},
        },
        name=f"order-{uuid.uuid4().hex[:6]}",
        extras={"paigraph": {"taskRoles": order}},
    )


async def test_a_waiting_worker_is_shown_starting_with_what_it_waits_for(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    order = {
        "ps": {"readiness": {"command": ["test", "-e", "/tmp/up"], "periodSeconds": 0.2}},
        "worker": {"dependsOn": [{"role": "ps", "when": "ready"}]},
    }
    text = ordered_job(
        ["sleep 1", "touch /tmp/up", "sleep 2"],
        order,
        completion={"minSucceededInstances": -1},
    )
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        job = await submitted(service, ann, text)

        async def ended() -> Job | None:
            found = await job_of(service.store, job.id)
            return found if found.state.is_final else None

        final = await until_async(ended, "the job ending", 90)
        assert final.state is JobState.SUCCEEDED, final.state_reason
        told = [
            (e.role, e.state, e.message or "")
            for e in history(service.store, final)
            if e.role == "worker"
        ]
        waiting = [m for _, state, m in told if state is JobState.STARTING]
        assert waiting and all(
            "waiting for 1 of 1 ps instances to be ready" in m for m in waiting
        ), told


async def test_a_dependency_that_cannot_hold_fails_the_job_with_the_reason(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    order = {"worker": {"dependsOn": [{"role": "ps", "when": "succeeded", "instances": 1}]}}
    text = ordered_job(
        ["exit 4"], order, completion={"minSucceededInstances": -1, "minFailedInstances": -1}
    )
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        job = await submitted(service, ann, text)

        async def ended() -> Job | None:
            found = await job_of(service.store, job.id)
            return found if found.state.is_final else None

        final = await until_async(ended, "the job ending", 90)
        assert final.state is JobState.FAILED
        workers = {k: i for k, i in (await instances_of(service.store, job.id)).items()}
        codes = {i.exit_code for k, i in workers.items() if k.startswith("worker")}
        # the first worker to give up fails the job; the other may be stopped with it
        assert START_DEPENDENCY_FAILED in codes
        assert "MinFailedTaskCount 1 in role worker" in final.state_reason
        assert any(
            "too many of them ended" in f"{i.state_reason} {i.exit_reason}"
            for k, i in workers.items()
            if k.startswith("worker")
        ), [(i.state_reason, i.exit_reason) for i in workers.values()]


async def test_workers_still_waiting_when_the_server_restarts_go_on_waiting(
    tmp_path: Path, owner: str
) -> None:
    slow_ps = role("ps", ["sleep 5", *PS[1:]], readiness=BY_PORT, min_succeeded=-1)
    request = job(slow_ps, role("worker", WORKER, instances=2, depends_on=READY))
    async with backend(tmp_path, owner=owner) as first:
        events = Collector(first)
        await first.launch(request)
        await events.until(lambda: len(events.started(request)) == 1)  # the ps only
        events.close()
    async with backend(tmp_path, owner=owner) as second:
        events = Collector(second)
        await second.reconcile()
        ended = await workers_ended(events, request)
        assert {e.exit_code for e in ended.values()} == {0}, [e.reason for e in ended.values()]
        for key in ended:
            assert "worker reached ps" in await log_text(second, key)
        await second.stop(request.job_id, 1, grace_seconds=1)
        await second.forget(request.job_id, 1)
        events.close()
    assert leftovers(owner) == ([], [])


# --- task retries and the readiness failure threshold -------------------------------------------


def run_ends(events: Collector, request: LaunchRequest, role_name: str, run: int) -> Any:
    """The end of run `run` of the role's instance 0, or None before it came."""
    return next(
        (
            e
            for e in events.of(request)
            if e.kind in (EventKind.EXITED, EventKind.START_FAILED, EventKind.STOPPED)
            and e.role == role_name
            and e.run == run
        ),
        None,
    )


async def run_ended(events: Collector, request: LaunchRequest, role_name: str, run: int) -> Any:
    await events.until(lambda: run_ends(events, request, role_name, run))
    return run_ends(events, request, role_name, run)


async def test_a_waiting_worker_started_again_by_its_task_retry_waits_again(
    tmp_path: Path,
) -> None:
    never_ready = ReadinessCheck(command=["false"], period_seconds=0.2)
    ps = role("ps", ["sleep 600"], readiness=never_ready, min_succeeded=-1)
    request = job(
        ps,
        role("worker", ["echo worker ran"], depends_on=READY, dependency_timeout_seconds=1),
    )
    worker = InstanceKey(job_id=request.job_id, attempt=1, role="worker", index=0)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        first = await run_ended(events, request, "worker", 1)
        assert first.exit_code == DEPENDENCY_FAILED
        await sim.relaunch(worker, 2)
        second = await run_ended(events, request, "worker", 2)
        # its new run waited again, and gave up again: its commands never ran
        seen = [(e.kind, e.role, e.run, e.exit_code, e.reason) for e in events.of(request)]
        assert (second.kind, second.exit_code) == (EventKind.EXITED, DEPENDENCY_FAILED), seen
        assert "waited 1 s (dependencyTimeoutSeconds)" in (second.reason or ""), seen
        assert "worker ran" not in await log_text(sim, worker)
        assert not [
            e for e in events.of(request) if e.kind is EventKind.STARTED and e.role == "worker"
        ]
        await sim.stop(request.job_id, 1, grace_seconds=1)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()


async def test_a_ps_started_again_by_its_task_retry_does_not_restart_the_workers(
    tmp_path: Path,
) -> None:
    up = ReadinessCheck(command=["test", "-e", "/tmp/up"], period_seconds=0.2)
    ps = role("ps", ["touch /tmp/up", "sleep 1", "exit 3"], readiness=up, min_succeeded=-1)
    worker_commands = ["echo worker began", "sleep 6", "echo worker done"]
    request = job(ps, role("worker", worker_commands, instances=2, depends_on=READY))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        failed = await run_ended(events, request, "ps", 1)
        assert failed.exit_code == 3
        await events.until(lambda: len(events.started(request)) == 3)  # the workers began
        await sim.relaunch(InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0), 2)
        ended = await workers_ended(events, request)
        assert {e.exit_code for e in ended.values()} == {0}
        for key in ended:  # one run each, never started again
            started = [
                e for e in events.of(request) if e.kind is EventKind.STARTED and e.key == key
            ]
            assert len(started) == 1
            assert (await log_text(sim, key)).count("worker began") == 1
        await sim.stop(request.job_id, 1, grace_seconds=1)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()


# ps 0 is ready for its first 3 seconds, then not; ps 1 is ready from its sixth second on: the
# two are ready together only if ps 0's failed checks are not enough to make it not ready
FLICKER = [
    'if [ "$PAI_TASK_INDEX" = 0 ]; then touch /tmp/up; sleep 3; rm /tmp/up; else sleep 6;'
    " touch /tmp/up; fi",
    "sleep 600",
]


@pytest.mark.parametrize(("threshold", "worker_runs"), [(1, False), (1000, True)])
async def test_a_ready_instance_is_not_ready_after_failure_threshold_failed_checks(
    tmp_path: Path, threshold: int, worker_runs: bool
) -> None:
    check = ReadinessCheck(
        command=["test", "-e", "/tmp/up"], period_seconds=0.2, failure_threshold=threshold
    )
    ps = role("ps", FLICKER, instances=2, readiness=check, min_succeeded=-1)
    both = [StartDependency(role="ps", when="ready", instances=2)]
    waits = role("worker", ["echo worker ran"], depends_on=both, dependency_timeout_seconds=12)
    request = job(ps, waits)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        [worker] = (await workers_ended(events, request)).values()
        if worker_runs:  # ps 0 stayed ready through its failed checks, until ps 1 was
            assert worker.exit_code == 0, worker.reason
            assert "worker ran" in await log_text(sim, worker.key)
        else:  # ps 0 was not ready any more by the time ps 1 was
            assert worker.exit_code == DEPENDENCY_FAILED
            assert "waited 12 s" in (worker.reason or "")
        await sim.stop(request.job_id, 1, grace_seconds=1)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()
