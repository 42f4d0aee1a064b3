"""The backend conformance suite: the same tests run against the Docker simulator (real
containers) and the Kubernetes backend on a fake API server (tests/fake_kube_api.py, whose
pods a kubelet played in tests/backend_drivers.py runs as real containers), so what a job sees
cannot drift between the two. Where the backends legitimately differ, the test says so."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backends.base import (
    BackendError,
    EventKind,
    InstanceKey,
    LaunchRefused,
    LaunchRequest,
    ReadinessCheck,
    StartDependency,
    UnknownInstance,
)
from backends.runtime_env import runtime_env
from tests.backend_drivers import NODE_CPU, Driver, docker_driver, kubernetes_driver
from tests.simulated import ENDED, job, role
from tests.worker_support import unique_name

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

BACKENDS = ["docker-simulator", "kubernetes-on-a-fake-api-server"]
PAI_LINE = re.compile(r"^(PAI_\w+)=(.*)$", re.MULTILINE)


@pytest.fixture(params=BACKENDS)
async def driver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Driver]:
    opened = docker_driver if request.param == "docker-simulator" else kubernetes_driver
    async with opened(tmp_path) as started:
        yield started


def key(request: LaunchRequest, role_name: str, index: int = 0) -> InstanceKey:
    return InstanceKey(job_id=request.job_id, attempt=request.attempt, role=role_name, index=index)


async def environment(driver: Driver, request: LaunchRequest, role_name: str, index: int) -> dict:
    text = await driver.log(key(request, role_name, index))
    return dict(PAI_LINE.findall(text))


# --- environment ---------------------------------------------------------------------------------


async def test_every_instance_sees_the_pai_variables_the_runtime_gives_its_role_and_index(
    driver: Driver,
) -> None:
    show = ["env | grep ^PAI_ | sort"]
    request = job(
        role("ps", show, ports=[("grpc", 2)]),
        role("worker", show, instances=2, ports=[("grpc", 2)]),
        job_id=f"env-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    ended = await driver.events.all_ended(request)
    assert {k: e.exit_code for k, e in ended.items()} == {"ps-0": 0, "worker-0": 0, "worker-1": 0}
    placements = {
        (e.role, e.index): e.placement
        for e in driver.events.of(request, EventKind.PLACED)
        if e.role is not None and e.index is not None and e.placement is not None
    }
    for role_name, index in [("ps", 0), ("worker", 0), ("worker", 1)]:
        seen = await environment(driver, request, role_name, index)
        expected = {
            name: value
            for name, value in runtime_env(request, placements, role_name, index).items()
            if name.startswith("PAI_")
        }
        # the same variables on both backends, and the same values but for addresses
        assert set(seen) == set(expected)
        if driver.kind == "kubernetes":
            # Differs on purpose: peers are named by their stable DNS names through the
            # headless Service (a pod's IP changes when it is recreated), and the pod's own
            # IP comes from the downward API, so the address variables are checked apart.
            peers = dict(_addressed(seen))
            assert peers == {
                f"PAI_HOST_IP_{r}_{i}": f"{r}-{i}.{_service(seen)}"
                for r, i in [("ps", 0), ("worker", 0), ("worker", 1)]
            }
            assert seen["PAI_CONTAINER_HOST_IP"] == placements[role_name, index].host_ip
            expected = _with_addresses(expected, placements, seen)
        assert seen == expected


def _addressed(env: dict[str, str]) -> list[tuple[str, str]]:
    return [(n, v) for n, v in env.items() if n.startswith("PAI_HOST_IP_")]


def _service(env: dict[str, str]) -> str:
    return env["PAI_HOST_IP_ps_0"].split(".", 1)[1]


def _with_addresses(
    expected: dict[str, str], placements: dict, seen: dict[str, str]
) -> dict[str, str]:
    """`expected` with each instance's IP written as the name a Kubernetes pod sees for it."""
    names = {placements[r, i].host_ip: seen[f"PAI_HOST_IP_{r}_{i}"] for (r, i) in placements}
    own = seen["PAI_CONTAINER_HOST_IP"]
    result = {}
    for name, value in expected.items():
        if name in ("PAI_CONTAINER_HOST_IP", "PAI_CURRENT_CONTAINER_IP"):
            result[name] = own
            continue
        for ip, dns in names.items():
            value = re.sub(rf"(?<![\d.]){re.escape(ip)}(?!\d)", dns, value)
        result[name] = value
    return result


# --- completion ----------------------------------------------------------------------------------


async def test_each_instance_ends_with_its_own_exit_code_and_keeps_its_output(
    driver: Driver,
) -> None:
    request = job(
        role(
            "trainer",
            ["echo trainer $PAI_TASK_INDEX says hello", "exit $((PAI_TASK_INDEX + 3))"],
            instances=2,
        ),
        job_id=f"codes-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    ended = await driver.events.all_ended(request)
    assert {k: (e.kind, e.exit_code) for k, e in ended.items()} == {
        "trainer-0": (EventKind.EXITED, 3),
        "trainer-1": (EventKind.EXITED, 4),
    }
    for index in (0, 1):
        assert f"trainer {index} says hello" in await driver.log(key(request, "trainer", index))
    kinds = [e.kind for e in driver.events.of(request) if e.index == 0]
    assert (
        kinds.index(EventKind.PLACED)
        < kinds.index(EventKind.STARTED)
        < kinds.index(EventKind.EXITED)
    )


async def test_an_ended_attempt_forgotten_keeps_its_output(driver: Driver) -> None:
    request = job(role("once", ["echo said once"]), job_id=f"keep-{driver.kind[:4]}")
    await driver.backend.launch(request)
    await driver.events.all_ended(request)
    await driver.backend.forget(request.job_id, request.attempt)
    assert "said once" in await driver.log(key(request, "once"))


# --- gang: all or nothing ------------------------------------------------------------------------


def holder_id(driver: Driver) -> str:
    """A job id of its own for a job that holds a node: several tests make one, and the Docker
    engine, whose container names carry the job id, is shared by every worker."""
    return unique_name(f"hold-{driver.kind[:4]}")


async def gang_waiting_behind_a_holder(
    driver: Driver, prefix: str, command: str
) -> tuple[LaunchRequest, LaunchRequest]:
    """A job holding a whole node, running, and a gang of two whole-node instances running
    `command`, waiting: one node is free, so neither may start."""
    holder = job(role("hold", ["sleep 600"], cpu=NODE_CPU), job_id=holder_id(driver))
    await driver.backend.launch(holder)
    await driver.events.until(
        lambda: driver.events.of(holder, EventKind.STARTED), "the holder running"
    )
    gang = job(
        role("big", [command], instances=2, cpu=NODE_CPU),
        job_id=unique_name(f"{prefix}-{driver.kind[:4]}"),
    )
    await driver.backend.launch(gang)
    await driver.events.until(lambda: driver.events.of(gang, EventKind.WAITING), "the gang waiting")
    return holder, gang


async def test_a_gang_that_does_not_fit_waits_whole_and_is_placed_whole_once_room_is_free(
    driver: Driver,
) -> None:
    holder, gang = await gang_waiting_behind_a_holder(driver, "gang", "echo placed")
    assert not driver.events.of(gang, EventKind.PLACED, EventKind.STARTED)

    await driver.backend.stop(holder.job_id, holder.attempt, grace_seconds=1)
    ended = await driver.events.all_ended(gang)
    assert {k: e.exit_code for k, e in ended.items()} == {"big-0": 0, "big-1": 0}
    placed = driver.events.of(gang, EventKind.PLACED)
    assert {e.placement.node for e in placed if e.placement} == {"node-a", "node-b"}


# --- stop ----------------------------------------------------------------------------------------


async def test_a_stopped_attempt_ends_every_instance_as_stopped(driver: Driver) -> None:
    request = job(
        role("server", ["echo up", "sleep 600"], instances=2), job_id=f"stop-{driver.kind[:4]}"
    )
    await driver.backend.launch(request)
    await driver.events.until(
        lambda: len(driver.events.of(request, EventKind.STARTED)) == 2, "both running"
    )
    await driver.backend.stop(request.job_id, request.attempt, grace_seconds=1)
    ended = await driver.events.all_ended(request)
    # SIGTERM's code on both: the entrypoint passes the signal on and ends with 128 + 15
    assert {(e.kind, e.exit_code) for e in ended.values()} == {(EventKind.STOPPED, 143)}


async def test_a_gang_stopped_while_it_waits_ends_every_instance_as_stopped_unstarted(
    driver: Driver,
) -> None:
    holder, gang = await gang_waiting_behind_a_holder(driver, "gang", "echo never")
    await driver.backend.stop(gang.job_id, gang.attempt, grace_seconds=1)
    ended = await driver.events.all_ended(gang)
    # no exit code: nothing ran. The reason's words differ ("stopped while waiting" on Docker,
    # "stopped before it started" on Kubernetes, where gated pods existed); both say stopped
    assert {(e.kind, e.exit_code) for e in ended.values()} == {(EventKind.STOPPED, None)}
    assert all("stopped" in (e.reason or "") for e in ended.values())
    assert not driver.events.of(gang, EventKind.PLACED, EventKind.STARTED)
    await driver.backend.stop(holder.job_id, holder.attempt, grace_seconds=1)


async def test_an_instance_larger_than_any_node_is_refused_on_docker_and_waits_on_kubernetes(
    driver: Driver,
) -> None:
    huge = job(role("huge", ["echo never"], cpu=NODE_CPU * 2), job_id=f"huge-{driver.kind[:4]}")
    if driver.kind == "docker":
        # Differs on purpose: the simulator's nodes are fixed by its settings, so a job that
        # can never fit is refused at once, naming the setting
        with pytest.raises(LaunchRefused, match="asks 8 cpu, the largest node has 4 cpu"):
            await driver.backend.launch(huge)
        return
    # a cluster can grow (a node added, an autoscaler): the attempt waits, saying why
    await driver.backend.launch(huge)
    waiting = await driver.events.until(
        lambda: driver.events.of(huge, EventKind.WAITING), "the attempt waiting"
    )
    assert "fits on no node" in (waiting[0].reason or "")
    assert "cpu 8" in (waiting[0].reason or "")
    assert not driver.events.of(huge, EventKind.PLACED)
    await driver.backend.stop(huge.job_id, huge.attempt, grace_seconds=1)


# --- retries -------------------------------------------------------------------------------------


async def test_a_relaunched_instance_runs_again_as_its_next_run_with_the_same_environment(
    driver: Driver,
) -> None:
    request = job(
        role("flaky", ["echo index=$PAI_TASK_INDEX", "exit 7"]),
        role("steady", ["sleep 600"]),
        job_id=f"retry-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    flaky = key(request, "flaky")
    first = await driver.events.until(
        lambda: [e for e in driver.events.of(request, EventKind.EXITED) if e.role == "flaky"],
        "the first run ending",
    )
    assert (first[0].exit_code, first[0].run) == (7, 1)

    await driver.backend.relaunch(flaky, run=2)
    second = await driver.events.until(
        lambda: [
            e
            for e in driver.events.of(request, EventKind.EXITED)
            if e.role == "flaky" and e.run == 2
        ],
        "the second run ending",
    )
    assert second[0].exit_code == 7
    assert "index=0" in await driver.log(flaky)
    await driver.backend.stop(request.job_id, request.attempt, grace_seconds=1)


async def test_a_relaunch_is_refused_alike_while_running_when_stopping_and_when_unknown(
    driver: Driver,
) -> None:
    request = job(
        role("done", ["exit 3"]), role("busy", ["sleep 600"]), job_id=f"refuse-{driver.kind[:4]}"
    )
    job_id = request.job_id
    await driver.backend.launch(request)
    await driver.events.until(
        lambda: (
            driver.events.of(request, EventKind.EXITED)
            and [e for e in driver.events.of(request, EventKind.STARTED) if e.role == "busy"]
        ),
        "done ending while busy runs",
    )

    with pytest.raises(BackendError) as running:
        await driver.backend.relaunch(key(request, "busy"), run=2)
    assert str(running.value) == (
        f"busy-0 of attempt 1 of job {job_id} has not ended; only an ended instance runs again"
    )
    with pytest.raises(UnknownInstance) as no_index:
        await driver.backend.relaunch(key(request, "busy", 1), run=2)
    assert str(no_index.value) == f"no instance busy-1 of attempt 1 of job {job_id}"
    never = InstanceKey(job_id=f"never-{driver.kind[:4]}", attempt=1, role="done", index=0)
    with pytest.raises(UnknownInstance) as no_job:
        await driver.backend.relaunch(never, run=2)
    assert str(no_job.value) == f"no instance done-0 of attempt 1 of job {never.job_id}"

    await driver.backend.stop(job_id, request.attempt, grace_seconds=1)
    await driver.events.all_ended(request)
    # "done" ended before the stop, yet its attempt is being stopped: it runs no more
    with pytest.raises(BackendError) as stopping:
        await driver.backend.relaunch(key(request, "done"), run=2)
    assert str(stopping.value) == f"attempt 1 of job {job_id} is being stopped"

    await driver.backend.forget(job_id, request.attempt)
    with pytest.raises(UnknownInstance) as forgotten:
        await driver.backend.relaunch(key(request, "done"), run=2)
    assert str(forgotten.value) == f"no instance done-0 of attempt 1 of job {job_id}"
    assert not [e for e in driver.events.of(request) if e.run == 2]


async def test_a_relaunch_told_twice_starts_one_run(driver: Driver) -> None:
    request = job(role("flaky", ["exit 7"]), job_id=f"twice-{driver.kind[:4]}")
    await driver.backend.launch(request)
    await driver.events.all_ended(request)

    # the job engine retrying a call that timed out: the same run asked for again
    await driver.backend.relaunch(key(request, "flaky"), run=2)
    await driver.backend.relaunch(key(request, "flaky"), run=2)
    await driver.events.until(
        lambda: [e for e in driver.events.of(request, *ENDED) if e.run == 2], "run 2 ending"
    )
    placed = [e.run for e in driver.events.of(request, EventKind.PLACED)]
    assert placed.count(2) == 1
    assert [e.run for e in driver.events.of(request, *ENDED)] == [1, 2]


async def test_an_instance_end_is_told_once_when_its_attempt_is_stopped_twice(
    driver: Driver,
) -> None:
    holder, gang = await gang_waiting_behind_a_holder(driver, "once", "echo never")

    # two stops at once (each ends every instance still waiting), then one more
    await asyncio.gather(
        driver.backend.stop(gang.job_id, gang.attempt, grace_seconds=1),
        driver.backend.stop(gang.job_id, gang.attempt, grace_seconds=1),
    )
    await driver.backend.stop(gang.job_id, gang.attempt, grace_seconds=1)
    await driver.events.all_ended(gang)
    # every end of the gang's stops was told before these returned; the holder's end comes
    # after them, so once it is seen no end of the gang is still on its way
    await driver.backend.stop(holder.job_id, holder.attempt, grace_seconds=1)
    await driver.events.all_ended(holder)
    ends = driver.events.of(gang, *ENDED)
    assert sorted((e.role, e.index, e.kind) for e in ends) == [
        ("big", 0, EventKind.STOPPED),
        ("big", 1, EventKind.STOPPED),
    ]


# --- restart adoption ----------------------------------------------------------------------------


async def test_a_second_backend_on_the_same_state_finds_the_running_instances(
    driver: Driver,
) -> None:
    request = job(role("long", ["sleep 600"], instances=2), job_id=f"adopt-{driver.kind[:4]}")
    await driver.backend.launch(request)
    await driver.events.until(
        lambda: len(driver.events.of(request, EventKind.STARTED)) == 2, "both running"
    )
    async with driver.reopen() as second:
        reports = [r for r in await second.reconcile() if r.key.job_id == request.job_id]
        assert sorted((r.key.role, r.key.index, r.status.value) for r in reports) == [
            ("long", 0, "running"),
            ("long", 1, "running"),
        ]
    await driver.backend.stop(request.job_id, request.attempt, grace_seconds=1)
    ended = await driver.events.all_ended(request)
    assert {e.kind for e in ended.values()} == {EventKind.STOPPED}


# --- faults --------------------------------------------------------------------------------------


async def test_an_instance_over_its_memory_is_killed_and_told_as_out_of_memory(
    driver: Driver,
) -> None:
    request = job(
        role("hog", ["dd if=/dev/zero of=/dev/null bs=200M count=1"], memory_mb=32),
        job_id=f"oom-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    ended = (await driver.events.all_ended(request))["hog-0"]
    assert (ended.kind, ended.exit_code, ended.oom_killed) == (EventKind.EXITED, 137, True)
    assert "its limit of 32 MB exceeded" in (ended.reason or "")


async def test_a_relaunch_without_room_waits_naming_its_instance_then_runs_when_room_frees(
    driver: Driver,
) -> None:
    request = job(
        role("flaky", ["exit 7"], cpu=NODE_CPU),
        role("steady", ["sleep 600"], cpu=NODE_CPU),
        job_id=f"room-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    await driver.events.until(
        lambda: [e for e in driver.events.of(request, EventKind.EXITED) if e.role == "flaky"],
        "the first run ending",
    )
    holder = job(role("hold", ["sleep 600"], cpu=NODE_CPU), job_id=holder_id(driver))
    await driver.backend.launch(holder)
    await driver.events.until(lambda: driver.events.of(holder, EventKind.STARTED), "the holder")

    await driver.backend.relaunch(key(request, "flaky"), run=2)
    waiting = await driver.events.until(
        lambda: [e for e in driver.events.of(request, EventKind.WAITING) if e.run == 2],
        "the second run waiting",
    )
    # each says what is missing in its own words ("needs 4 cpu, 0 free in vc default" on
    # Docker, the scheduler's "0/2 nodes are available: 2 Insufficient cpu." on Kubernetes)
    assert (waiting[0].role, waiting[0].index) == ("flaky", 0)
    assert "cpu" in (waiting[0].reason or "")
    assert not [e for e in driver.events.of(request, EventKind.PLACED) if e.run == 2]

    await driver.backend.stop(holder.job_id, holder.attempt, grace_seconds=1)
    second = await driver.events.until(
        lambda: [e for e in driver.events.of(request, EventKind.EXITED) if e.run == 2],
        "the second run ending",
    )
    assert (second[0].role, second[0].exit_code) == ("flaky", 7)
    await driver.backend.stop(request.job_id, request.attempt, grace_seconds=1)


# --- start order -------------------------------------------------------------------------------


async def test_a_role_waiting_for_a_ready_ps_starts_only_once_the_ps_listens(
    driver: Driver,
) -> None:
    """On Kubernetes the wait is the start-order init container after the gang's barrier, run
    by the kubelet against the ps pod's real socket: a worker started before it would find
    no one listening (the ps listens only after a few seconds)."""
    port = "$PAI_CONTAINER_HOST_http_PORT_LIST"
    request = job(
        role(
            "ps",
            [f"sleep 6; nc -ll -p {port} -e true & sleep 40"],
            ports=[("http", 1)],
            readiness=ReadinessCheck(port="http", period_seconds=1),
        ),
        role(
            "worker",
            [
                "nc -w 2 $PAI_HOST_IP_ps_0 $PAI_PORT_LIST_ps_0_http -e true </dev/null"
                " && echo ps was listening"
            ],
            depends_on=[StartDependency(role="ps", when="ready", instances=1)],
        ),
        job_id=f"order-{driver.kind[:4]}",
    )
    await driver.backend.launch(request)
    await driver.events.until(
        lambda: [e for e in driver.events.of(request, EventKind.EXITED) if e.role == "worker"],
        "the worker ending",
    )
    said = await driver.log(key(request, "worker"))
    assert "ps was listening" in said, said
    await driver.backend.stop(request.job_id, request.attempt, grace_seconds=1)
