"""What the simulator gives a job that asks for more than this machine has: simulated GPUs the
instance sees as the NVIDIA device plugin would show them (and that never become real
devices), and limits scaled to this machine, told on the job and in the exit reason."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import docker
import pytest

from backends.base import EventKind, InstanceKey, LaunchRequest
from backends.docker import DockerBackend
from simulator.containers import ContainerSpec, Engine, plain_runtime, simulated_gpus
from tests.simulated import Collector, job, log_text, remove_leftovers, role, settings

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SHOW_GPUS = [
    'echo "visible=$NVIDIA_VISIBLE_DEVICES"',
    'echo "cuda=${CUDA_VISIBLE_DEVICES-unset}"',
    'echo "count=$PAI_CURRENT_TASK_ROLE_GPU_COUNT/$PAI_TASK_GPU_NUM"',
    'echo "file=$(. /usr/local/pai/runtime_env.sh; echo $NVIDIA_VISIBLE_DEVICES)"',
]


class FakedEngine(Engine):
    """The real engine, reporting another machine: a default runtime and a size."""

    def __init__(
        self,
        runtimes: tuple[str, dict[str, str]] | None = None,
        capacity: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.faked_runtimes = runtimes
        self.faked_capacity = capacity

    def runtimes(self) -> tuple[str, dict[str, str]]:
        return self.faked_runtimes or super().runtimes()

    def host_capacity(self) -> tuple[int, int]:
        return self.faked_capacity or super().host_capacity()


@asynccontextmanager
async def simulator(
    tmp_path: Path, engine: Engine | None = None, **overrides: Any
) -> AsyncIterator[DockerBackend]:
    sim = DockerBackend(
        settings(tmp_path, **overrides), owner=f"test-{uuid.uuid4().hex[:8]}", engine=engine
    )
    await sim.start()
    try:
        yield sim
    finally:
        await sim.close()
        remove_leftovers(sim.owner)


def gpu_role(name: str, gpu: int, commands: list[str], *, instances: int = 1) -> Any:
    made = role(name, commands, instances=instances)
    return made.model_copy(update={"resources": made.resources.model_copy(update={"gpu": gpu})})


def values(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


async def logs_of(sim: DockerBackend, request: LaunchRequest) -> dict[tuple[str, int], str]:
    return {
        (r.name, i): await log_text(
            sim, InstanceKey(job_id=request.job_id, attempt=1, role=r.name, index=i)
        )
        for r in request.roles
        for i in range(r.instances)
    }


async def test_instances_see_their_simulated_gpus_and_none_is_handed_out_twice(
    tmp_path: Path,
) -> None:
    request = job(
        gpu_role("trainer", 3, SHOW_GPUS, instances=3),
        gpu_role("ps", 0, SHOW_GPUS),
    )
    async with simulator(tmp_path) as sim:  # the defaults: 4 nodes of 8 simulated GPUs
        assert sim.refusal(request) is None
        [warning] = [note.message for note in sim.launch_notes(request)]
        assert "task role(s) trainer ask for GPUs, which are simulated" in warning
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}, [e.reason for e in ended.values()]
        placed = {
            (e.key.role, e.key.index): e
            for e in events.of(request)
            if e.kind is EventKind.PLACED and e.key is not None
        }
        logs = await logs_of(sim, request)
        held: list[tuple[str, str]] = []
        for index in range(3):
            text = logs[("trainer", index)]
            [visible] = values(text, "visible")
            node = placed[("trainer", index)].placement.node  # type: ignore[union-attr]
            assert len(visible.split(",")) == 3 and all(g.isdigit() for g in visible.split(","))
            assert values(text, "file") == [visible]
            assert values(text, "cuda") == ["unset"]
            assert values(text, "count") == ["3/3"]
            note = f"[paigraph] GPUs {visible} of {node} are simulated"
            assert note in text
            assert note.removeprefix("[paigraph] ") in (placed[("trainer", index)].reason or "")
            held += [(node, g) for g in visible.split(",")]
        assert len(held) == len(set(held)) == 9  # no index of a node given to two instances
        ps = logs[("ps", 0)]
        assert values(ps, "visible") == ["none"] and values(ps, "count") == ["0/0"]
        assert "are simulated" not in ps
        await sim.forget(request.job_id, 1)

        # once they ended their GPUs are free again: a job asking for a whole node gets one
        whole = job(gpu_role("all", 8, SHOW_GPUS))
        await sim.launch(whole)
        [end] = (await events.all_ended(whole)).values()
        assert end.exit_code == 0, end.reason
        text = (await logs_of(sim, whole))[("all", 0)]
        assert values(text, "visible") == ["0,1,2,3,4,5,6,7"]
        await sim.forget(whole.job_id, 1)
        events.close()


async def test_a_cluster_without_gpus_still_refuses_gpu_jobs_and_says_none(tmp_path: Path) -> None:
    async with simulator(tmp_path, gpus_per_node=0) as sim:
        reason = sim.refusal(job(gpu_role("trainer", 1, ["true"])))
        assert reason is not None and "the cluster has no gpus" in reason
        assert "gpus_per_node" in reason
        request = job(role("cpu", SHOW_GPUS))
        assert sim.launch_notes(request) == []
        events = Collector(sim)
        await sim.launch(request)
        [end] = (await events.all_ended(request)).values()
        assert end.exit_code == 0, end.reason
        assert values((await logs_of(sim, request))[("cpu", 0)], "visible") == ["none"]
        await sim.forget(request.job_id, 1)
        events.close()


def test_only_a_default_nvidia_runtime_is_replaced_and_only_by_a_plain_one() -> None:
    assert plain_runtime("runc", {"runc": "runc", "nvidia": "nvidia-container-runtime"}) == (
        None,
        None,
    )
    both = {"nvidia": "nvidia-container-runtime", "runc": "runc"}
    assert plain_runtime("nvidia", both) == ("runc", None)
    # the NVIDIA runtime registered under another name is still known by its program
    renamed = {"gpu": "/usr/bin/nvidia-container-runtime", "crun": "crun"}
    assert plain_runtime("gpu", renamed) == ("crun", None)
    runtime, problem = plain_runtime("nvidia", {"nvidia": "nvidia-container-runtime"})
    assert runtime is None and problem is not None
    assert "register runc" in problem and "registered: nvidia" in problem


def test_simulated_gpus_are_indices_that_are_not_the_containers_devices() -> None:
    def spec(visible: str | None, devices: list[str]) -> ContainerSpec:
        env = {} if visible is None else {"NVIDIA_VISIBLE_DEVICES": visible}
        return ContainerSpec("c", "i", [], "n", "", [], {}, env=env, gpu_devices=devices)

    assert simulated_gpus(spec("0,1", []))
    assert simulated_gpus(spec("all", []))
    assert simulated_gpus(spec("0,1,2", ["0", "1"]))
    assert not simulated_gpus(spec("1,0", ["0", "1"]))  # real devices, named as given
    assert not simulated_gpus(spec("none", []))
    assert not simulated_gpus(spec(None, []))


NVIDIA_DEFAULT = (
    "nvidia",
    {"nvidia": "nvidia-container-runtime", "io.containerd.runc.v2": "runc"},
)


async def test_simulated_gpus_never_reach_an_nvidia_default_runtime(tmp_path: Path) -> None:
    """On a host whose default runtime is NVIDIA's, a container with simulated GPUs runs with
    plain runc (here the registered name io.containerd.runc.v2, to tell it from the real
    default), and one without GPUs says `none`, which that runtime honours."""
    hold = [*SHOW_GPUS, "until [ -e /work/out/go ]; do sleep 0.1; done"]
    request = job(
        gpu_role("trainer", 2, hold),
        gpu_role("ps", 0, SHOW_GPUS),
    )
    client = docker.from_env()
    async with simulator(tmp_path, FakedEngine(runtimes=NVIDIA_DEFAULT)) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: len(events.started(request)) == 2)
        [trainer] = client.containers.list(
            filters={"label": [f"io.paigraph.job={request.job_id}", "io.paigraph.role=trainer"]}
        )
        assert trainer.attrs["HostConfig"]["Runtime"] == "io.containerd.runc.v2"
        env = dict(e.split("=", 1) for e in trainer.attrs["Config"]["Env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
        assert not trainer.attrs["HostConfig"].get("DeviceRequests")
        trainer.exec_run(["sh", "-c", "mkdir -p /work/out && touch /work/out/go"])
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}, [e.reason for e in ended.values()]
        await sim.forget(request.job_id, 1)
        events.close()


async def test_simulated_gpus_do_not_start_where_only_the_nvidia_runtime_exists(
    tmp_path: Path,
) -> None:
    only_nvidia = ("nvidia", {"nvidia": "nvidia-container-runtime"})
    request = job(gpu_role("trainer", 1, ["true"]))
    async with simulator(tmp_path, FakedEngine(runtimes=only_nvidia)) as sim:
        events = Collector(sim)
        await sim.launch(request)
        [end] = (await events.all_ended(request)).values()
        assert end.kind is EventKind.START_FAILED
        assert "register runc" in (end.reason or "")
        await sim.forget(request.job_id, 1)
        events.close()


async def test_memory_beyond_this_machine_is_scaled_told_and_named_when_it_runs_out(
    tmp_path: Path,
) -> None:
    """A machine of 2 cpu and 600 MB (as the engine reports it): two instances asking
    1024 MB each get 300 MB each, the job is told, and one that uses more is killed with
    what it asked and what it got."""
    hog = "dd if=/dev/zero of=/dev/null bs=400M count=1"
    show = (
        "echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null"
        " || cat /sys/fs/cgroup/memory.max)"
    )
    request = job(role("big", [show, hog], instances=2, memory_mb=1024, cpu=4))
    async with simulator(tmp_path, FakedEngine(capacity=(2, 600))) as sim:
        [warning] = [note.message for note in sim.launch_notes(request)]
        assert "this machine has 2 cpu and 600 MB of memory" in warning
        assert "big (cpu 4 -> 2, memoryMB 1024 -> 300)" in warning
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        for key, end in ended.items():
            assert end.oom_killed and end.exit_code == 137, end.reason
            assert (end.reason or "").startswith(
                "killed because it used more memory than this machine gave it (out of memory: "
                "asked 1024 MB; this machine gave 300 MB"
            )
            assert f"memory={300 * 1024 * 1024}" in await log_text(sim, key)
        [placed, *_] = [e for e in events.of(request) if e.kind is EventKind.PLACED]
        assert "cpu 4 -> 2, memoryMB 1024 -> 300" in (placed.reason or "")
        await sim.forget(request.job_id, 1)
        events.close()


async def test_a_request_no_node_can_hold_is_still_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    async with simulator(tmp_path) as sim:
        assert sim.refusal(job(gpu_role("huge", 9, ["true"]))) == (
            "an instance asks 9 gpus, the largest node has 8 gpus (gpus_per_node, node.gpu, "
            "or gpu in nodes, in the simulator settings)"
        )
        assert sim.refusal(job(role("wide", ["true"], memory_mb=300_000))) == (
            "an instance asks 300000 MB memory, the largest node has 262144 MB memory "
            "(node.memory_mb, or memory_mb in nodes, in the simulator settings)"
        )
