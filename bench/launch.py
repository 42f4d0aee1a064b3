"""How fast the simulator starts a 64-instance job, next to starting the containers by hand.

    python bench/launch.py [--image paigraph/busybox:test] [--idle 30] [--sampling]

In one run, on the same engine and image:

  direct     64 containers (`sleep`) created and started with the Docker SDK from 16 threads,
             on one fresh bridge network, timed until Docker reports all 64 running;
  paigraph   a job of 4 roles x 16 instances (cpu 1, 128 MB, ssh + http ports each) launched
             on the simulator backend, timed from launch() until all 64 STARTED events arrived.

Then the backend watches its 64 idle containers for `--idle` seconds and the process's CPU
time over that window is printed as a share of one core; with `--sampling`, while it measures
what each container uses every 5 s as the server does (bench/sampling.py compares the ways).
Goals: ratio at most 1.25; idle CPU under 2% of one core. Prints figures only; removes
everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import (  # noqa: E402
    EventKind,
    LaunchRequest,
    PortRequest,
    ResourceRequest,
    RoleLaunch,
)
from backends.docker import DockerBackend  # noqa: E402
from simulator.settings import SimulatorSettings  # noqa: E402

ROLES = 4
PER_ROLE = 16
RATIO_GOAL = 1.25
IDLE_GOAL = 0.02


def direct(client: docker.DockerClient, image: str, count: int) -> float:
    network = client.networks.create(f"bench-direct-{time.monotonic_ns()}", driver="bridge")
    containers: list = []
    try:
        start = time.perf_counter()

        def one(i: int) -> None:
            container = client.containers.run(
                image,
                ["sleep", "600"],
                name=f"bench-direct-{network.id[:8]}-{i}",
                network=network.name,
                init=True,
                mem_limit="128m",
                nano_cpus=1_000_000_000,
                detach=True,
            )
            containers.append(container)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(count)))
        while True:
            running = client.containers.list(filters={"network": network.name, "status": "running"})
            if len(running) >= count:
                break
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda c: c.remove(force=True), containers))
        network.remove()


def job(image: str) -> LaunchRequest:
    roles = [
        RoleLaunch(
            name=f"role{r}",
            instances=PER_ROLE,
            image=image,
            resources=ResourceRequest(
                cpu=1,
                memory_mb=128,
                shm_mb=64,
                ports=[PortRequest(label="ssh"), PortRequest(label="http")],
            ),
            commands=["sleep 600"],
        )
        for r in range(ROLES)
    ]
    return LaunchRequest(job_id=f"bench-{time.monotonic_ns()}", job_name="bench", roles=roles)


SAMPLE_EVERY = 5.0


async def idle(backend: DockerBackend, seconds: float, sampling: bool) -> None:
    """Let the backend watch its idle containers; measure them every 5 s with `sampling`."""
    began = time.monotonic()
    while (left := seconds - (time.monotonic() - began)) > 0:
        if sampling:
            await backend.sample_usage()
        await asyncio.sleep(min(SAMPLE_EVERY, max(left, 0.0)))


async def simulated(image: str, idle_seconds: float, sampling: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as state:
        settings = SimulatorSettings(state_dir=Path(state))
        backend = DockerBackend(settings, owner=f"bench-{time.monotonic_ns()}")
        await backend.start()
        request = job(image)
        events = backend.events()
        try:
            start = time.perf_counter()
            await backend.launch(request)
            started = 0
            while started < request.total_instances:
                event = await anext(events)
                if event.kind is EventKind.STARTED:
                    started += 1
                elif event.kind not in (EventKind.PLACED, EventKind.WAITING):
                    raise SystemExit(f"instance did not start: {event}")
            elapsed = time.perf_counter() - start
            before = _cpu_seconds()
            await idle(backend, idle_seconds, sampling)
            idle_share = (_cpu_seconds() - before) / idle_seconds
            return elapsed, idle_share
        finally:
            await backend.stop(request.job_id, request.attempt, grace_seconds=0)
            ended = 0
            while ended < request.total_instances:
                event = await asyncio.wait_for(anext(events), 120)
                if event.kind in (EventKind.STOPPED, EventKind.EXITED, EventKind.START_FAILED):
                    ended += 1
            await backend.forget(request.job_id, request.attempt)
            await backend.close()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="paigraph/busybox:test")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--sampling", action="store_true", help="measure use every 5 s")
    args = parser.parse_args()
    client = docker.from_env()
    count = ROLES * PER_ROLE
    direct(client, args.image, 4)  # warm the engine up once, untimed
    baseline = direct(client, args.image, count)
    ours, idle_share = asyncio.run(simulated(args.image, args.idle, args.sampling))
    ratio = ours / baseline
    print(f"containers: {count} ({ROLES} roles x {PER_ROLE}), image {args.image}")
    print(f"    direct: {baseline:6.2f} s  (Docker SDK, 16 threads)")
    print(f"  paigraph: {ours:6.2f} s  (launch until every instance STARTED)")
    verdict = "met" if ratio <= RATIO_GOAL else "NOT met"
    print(f"     ratio: {ratio:.2f}  goal <= {RATIO_GOAL}: {verdict}")
    print(
        f"  idle cpu: {idle_share * 100:.2f}% of one core over {args.idle:.0f} s"
        f"{' measuring use every 5 s' if args.sampling else ''}  "
        f"goal < {IDLE_GOAL * 100:.0f}%: {'met' if idle_share < IDLE_GOAL else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
