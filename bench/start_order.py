"""How soon workers that wait for a ready ps start their commands once the ps listens.

    python bench/start_order.py [--image paigraph/busybox:test] [--rounds 5]

Each round launches a ps/worker job on the simulator backend: the ps opens its http port after
a second, the workers (`dependsOn: ready`, readiness `port: http`, period 1 s as by default)
wait at the gate. A thread on the host polls the ps's port every 10 ms and notes when it first
accepts a connection; the workers' STARTED events say when their gate opened. Prints, per round
and as the median, the time from the port opening to the last worker starting. Goal: under 1 s.
Removes everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import (  # noqa: E402
    EventKind,
    LaunchRequest,
    PortRequest,
    ReadinessCheck,
    ResourceRequest,
    RoleLaunch,
    StartDependency,
)
from backends.docker import DockerBackend  # noqa: E402
from simulator.settings import SimulatorSettings  # noqa: E402

GOAL_SECONDS = 1.0


def role(
    name: str, commands: list[str], image: str, instances: int, **fields: object
) -> RoleLaunch:
    return RoleLaunch(
        name=name,
        instances=instances,
        image=image,
        resources=ResourceRequest(
            cpu=1, memory_mb=128, shm_mb=16, ports=[PortRequest(label="http", count=1)]
        ),
        commands=commands,
        **fields,  # type: ignore[arg-type]
    )


def request(image: str, n: int) -> LaunchRequest:
    ps = role(
        "ps",
        ["sleep 1", "mkdir -p /tmp/www", "httpd -f -p $PAI_CONTAINER_HOST_PORT -h /tmp/www"],
        image,
        1,
        readiness=ReadinessCheck(port="http"),
        min_succeeded=-1,
    )
    wait = [StartDependency(role="ps", when="ready", instances=1)]
    worker = role("worker", ["true"], image, 2, depends_on=wait)
    return LaunchRequest(job_id=f"bench-order-{n}", job_name="bench", roles=[ps, worker])


def watch_port(host: str, port: int, opened: list[datetime], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=0.05):
                opened.append(datetime.now(UTC))
                return
        except OSError:
            time.sleep(0.01)


async def one_round(sim: DockerBackend, image: str, n: int) -> float:
    job = request(image, n)
    events = sim.events()
    await sim.launch(job)
    opened: list[datetime] = []
    stop = threading.Event()
    started: dict[tuple[str, int], datetime] = {}
    watcher: threading.Thread | None = None
    try:
        async for event in events:
            if event.job_id != job.job_id or event.role is None or event.index is None:
                continue
            if event.kind is EventKind.PLACED and event.role == "ps" and watcher is None:
                assert event.placement is not None
                host, port = event.placement.host_ip, event.placement.ports["http"][0]
                watcher = threading.Thread(
                    target=watch_port, args=(host, port, opened, stop), daemon=True
                )
                watcher.start()
            if event.kind is EventKind.STARTED and event.role == "worker":
                started[(event.role, event.index)] = event.at
                if len(started) == 2:
                    break
    finally:
        stop.set()
        await sim.stop(job.job_id, 1, grace_seconds=1)
        await sim.forget(job.job_id, 1)
    if not opened:
        raise SystemExit("the ps's port was never seen open")
    return (max(started.values()) - opened[0]).total_seconds()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default="paigraph/busybox:test")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        sim = DockerBackend(
            SimulatorSettings(state_dir=Path(state), use_host_gpus=False),
            owner=f"bench-order-{time.monotonic_ns()}",
        )
        await sim.start()
        try:
            figures = []
            for n in range(args.rounds):
                seconds = await one_round(sim, args.image, n)
                figures.append(seconds)
                print(f"round {n + 1}: port open -> last worker started {seconds:.3f} s")
        finally:
            await sim.close()
    median = statistics.median(figures)
    verdict = "within" if median < GOAL_SECONDS else "over"
    print(f"median {median:.3f} s ({verdict} the goal of {GOAL_SECONDS:g} s)")


if __name__ == "__main__":
    asyncio.run(main())
