"""How fast the simulator starts a 64-instance job, next to starting the containers by hand.

    python bench/launch.py [--image paigraph/busybox:test] [--idle 30] [--runs 1] [--sampling]

In one run, on the same engine and image, one after another:

  direct     64 containers (`sleep`) created and started with the Docker SDK from 16 threads,
             on one fresh bridge network, timed until Docker reports all 64 running;
  direct+    the same, each container also given what the simulator gives its containers (two
             published ports, three bind mounts, capabilities dropped, no-new-privileges, a
             pids limit, memory without swap, 64 MB of shm): Docker's own price for those;
  compose    Debian's docker-compose (/usr/bin/docker-compose, never pulling) bringing up the
             same 64 services from a generated compose file: same image and command, two
             published ports each, one network; timed until Docker reports all 64 running;
  paigraph   a job of 4 roles x 16 instances (cpu 1, 128 MB, ssh + http ports each) launched
             on the simulator backend, timed from launch() until all 64 STARTED events arrived.

Published ports come from a window of the port range picked at random for each run, so that
another program scanning the range from its start (a test run beside this one) does not take
them between check and start and make the gang start again. The Docker API calls each client
makes are counted (the SDK's HTTP requests; docker-compose is its own process and is not).
With `--runs N` the four are measured N times, in turn, and the medians are compared.

Then the backend watches its 64 idle containers for `--idle` seconds and the process's CPU
time over that window is printed as a share of one core; with `--sampling`, while it measures
what each container uses every 5 s as the server does (bench/sampling.py compares the ways).
Goals: paigraph / direct at most 1.10, paigraph faster than docker-compose; idle CPU under 2%
of one core. Prints figures only and the load average beside them; removes everything it
started.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import (  # noqa: E402
    EventKind,
    InstanceEvent,
    LaunchRequest,
    PortRequest,
    ResourceRequest,
    RoleLaunch,
)
from backends.docker import DockerBackend  # noqa: E402
from simulator.capabilities import KEPT_CAPABILITIES, SECURITY_OPTIONS  # noqa: E402
from simulator.ports import bind_problem  # noqa: E402
from simulator.settings import SimulatorSettings  # noqa: E402

ROLES = 4
PER_ROLE = 16
PORTS_EACH = 2
RATIO_GOAL = 1.10
IDLE_GOAL = 0.02
COMPOSE = "/usr/bin/docker-compose"
PORT_LOW, PORT_HIGH = 20000, 39000  # inside the simulator's default range, above its start


# --- counting Docker API calls -----------------------------------------------------------------

_calls: collections.Counter[str] = collections.Counter()
_counting = threading.local()
_request = requests.Session.request


def _counted(self: requests.Session, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
    path = re.sub(r"^.*?/v[0-9.]+/", "/", str(url).split("?")[0])
    path = re.sub(r"/(containers|networks|exec)/(?!create$|json$)[^/]+", r"/\1/<id>", path)
    path = re.sub(r"^/images/.+/json$", "/images/<name>/json", path)
    _calls[f"{method} {path}"] += 1
    return _request(self, method, url, *args, **kwargs)


requests.Session.request = _counted  # type: ignore[method-assign,assignment]


_timed: collections.Counter[str] = collections.Counter()  # the calls of the last timed span


@contextmanager
def timed_calls() -> Iterator[None]:
    """Keep the Docker API calls this process makes while the block runs (a timed span) in
    `_timed`, leaving out those of setting up and cleaning up around it."""
    before = collections.Counter(_calls)
    try:
        yield
    finally:
        _timed.clear()
        _timed.update(collections.Counter(_calls) - before)


def per_container(counted: collections.Counter[str], count: int) -> str:
    """`create 1, start 1, ...` per container, the calls made once per run after a `+`."""
    each = {k: v / count for k, v in counted.items() if v >= count}
    once = {k: v for k, v in counted.items() if v < count}
    total = sum(counted.values()) / count
    text = ", ".join(f"{k} {v:g}" for k, v in sorted(each.items()))
    extra = ", ".join(f"{k} {v}" for k, v in sorted(once.items()))
    return f"{total:.2f} calls per container: {text}" + (f" + once: {extra}" if extra else "")


# --- ports -------------------------------------------------------------------------------------


def free_window(size: int) -> range:
    """`size` consecutive ports that can be bound now, from a random place in the range."""
    for _ in range(50):
        start = random.randrange(PORT_LOW, PORT_HIGH - size)
        if all(bind_problem(p) is None for p in range(start, start + size)):
            return range(start, start + size)
    raise SystemExit(f"no {size} free consecutive ports found in {PORT_LOW}-{PORT_HIGH}")


# --- the baselines -----------------------------------------------------------------------------


def direct(client: docker.DockerClient, image: str, count: int, *, dressed: bool) -> float:
    """Seconds until `count` containers run, created and started from 16 threads; `dressed`
    gives each what the simulator gives its containers (see the module's docstring)."""
    prefix = f"bench-direct-{time.monotonic_ns()}"
    network = client.networks.create(prefix, driver="bridge")
    ports = free_window(count * PORTS_EACH) if dressed else range(0)
    with tempfile.TemporaryDirectory(prefix="bench-direct-") as folder:
        try:

            def one(i: int) -> None:
                extra: dict[str, Any] = {}
                if dressed:
                    mounts = {}
                    for name, mode in (("runtime", "ro"), ("work", "rw"), ("dfs", "rw")):
                        path = Path(folder) / f"{i}-{name}"
                        path.mkdir()
                        mounts[str(path)] = {"bind": f"/bench/{name}", "mode": mode}
                    mine = ports[i * PORTS_EACH : (i + 1) * PORTS_EACH]
                    extra = {
                        "ports": {f"{p}/tcp": ("127.0.0.1", p) for p in mine},
                        "volumes": mounts,
                        "cap_drop": ["ALL"],
                        "cap_add": list(KEPT_CAPABILITIES),
                        "security_opt": list(SECURITY_OPTIONS),
                        "pids_limit": 1024,
                        "memswap_limit": "128m",
                        "shm_size": "64m",
                    }
                client.containers.run(
                    image,
                    ["sleep", "600"],
                    name=f"{prefix}-{i}",
                    network=prefix,
                    init=True,
                    mem_limit="128m",
                    nano_cpus=1_000_000_000,
                    detach=True,
                    **extra,
                )

            start = time.perf_counter()
            with timed_calls(), ThreadPoolExecutor(16) as pool:
                list(pool.map(one, range(count)))
                wait_running(client, {"network": prefix}, count)
            return time.perf_counter() - start
        finally:  # every container of the run, also one made but not started
            made = client.containers.list(all=True, filters={"name": prefix})
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda c: c.remove(force=True), made))
            remove_network(network)


def remove_network(network: Any, patience: float = 60.0) -> None:
    """Remove the network once the engine has let go of its removed containers' endpoints; an
    engine still holding some after `patience` seconds (seen under load) has them
    disconnected by force."""
    deadline = time.monotonic() + patience
    while True:
        try:
            network.remove()
            return
        except docker.errors.APIError as exc:
            if "active endpoints" not in str(exc):
                raise
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    network.reload()
    for container in network.containers:
        with contextlib.suppress(docker.errors.NotFound):
            network.disconnect(container, force=True)
    network.remove()


def measured(run: Callable[[], float], name: str) -> float:
    """`run`'s seconds, measured again (at most twice) when another program took a port the
    run had checked free (the engine refuses to start that container)."""
    for _ in range(2):
        try:
            return run()
        except docker.errors.APIError as exc:
            if "address already in use" not in str(exc) and "already allocated" not in str(exc):
                raise
            print(f"  {name}: a port was taken by another program meanwhile; measuring again")
    return run()


def wait_running(client: docker.DockerClient, filters: dict[str, str], count: int) -> None:
    while True:
        running = client.containers.list(filters={**filters, "status": "running"})
        if len(running) >= count:
            return
        time.sleep(0.01)


def compose_file(image: str, count: int, ports: range) -> str:
    """A compose file of `count` services like the job's instances, on the project's network."""
    lines = ['version: "2.4"', "services:"]
    for i in range(count):
        mine = ports[i * PORTS_EACH : (i + 1) * PORTS_EACH]
        lines += [
            f"  role{i // PER_ROLE}-{i % PER_ROLE}:",
            f"    image: {image}",
            '    command: ["sleep", "600"]',
            "    init: true",
            "    mem_limit: 128m",
            "    cpus: 1",
            "    ports:",
            *(f'      - "127.0.0.1:{p}:{p}"' for p in mine),
        ]
    return "\n".join(lines) + "\n"


def compose(client: docker.DockerClient, image: str, count: int) -> float:
    """Seconds docker-compose takes to bring the services up, until all of them run."""
    project = f"benchcompose{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="bench-compose-") as folder:
        path = Path(folder) / "docker-compose.yml"
        path.write_text(compose_file(image, count, free_window(count * PORTS_EACH)))
        command = [COMPOSE, "-p", project, "-f", str(path)]
        env = {**os.environ, "COMPOSE_INTERACTIVE_NO_CLI": "1"}
        try:
            start = time.perf_counter()
            up = subprocess.run(
                [*command, "up", "-d", "--no-build"], capture_output=True, text=True, env=env
            )
            if up.returncode != 0:
                raise SystemExit(f"docker-compose up failed: {up.stderr[-2000:]}")
            wait_running(client, {"label": f"com.docker.compose.project={project}"}, count)
            return time.perf_counter() - start
        finally:
            subprocess.run([*command, "down", "-t", "0"], capture_output=True, text=True, env=env)


# --- paigraph ----------------------------------------------------------------------------------


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


async def launched(
    backend: DockerBackend, request: LaunchRequest, events: AsyncIterator[InstanceEvent]
) -> None:
    """Launch the job and wait until every instance STARTED (anything else ends the bench)."""
    await backend.launch(request)
    started = 0
    while started < request.total_instances:
        event = await anext(events)
        if event.kind is EventKind.STARTED:
            started += 1
        elif event.kind not in (EventKind.PLACED, EventKind.WAITING):
            raise SystemExit(f"instance did not start: {event}")


async def stopped(
    backend: DockerBackend, request: LaunchRequest, events: AsyncIterator[InstanceEvent]
) -> None:
    """Stop the job, wait until every instance ended, and leave nothing behind."""
    await backend.stop(request.job_id, request.attempt, grace_seconds=0)
    ended = 0
    while ended < request.total_instances:
        event = await asyncio.wait_for(anext(events), 120)
        if event.kind in (EventKind.STOPPED, EventKind.EXITED, EventKind.START_FAILED):
            ended += 1
    await backend.forget(request.job_id, request.attempt)
    await backend.close()


async def simulated(image: str, idle_seconds: float, sampling: bool) -> tuple[float, float]:
    window = free_window(2000)
    with tempfile.TemporaryDirectory() as state:
        settings = SimulatorSettings(
            state_dir=Path(state), port_range={"start": window.start, "end": window.stop}
        )
        backend = DockerBackend(settings, owner=f"bench-{time.monotonic_ns()}")
        await backend.start()
        request = job(image)
        events = backend.events()
        try:
            start = time.perf_counter()
            with timed_calls():
                await launched(backend, request, events)
            elapsed = time.perf_counter() - start
            idle_share = 0.0
            if idle_seconds > 0:
                before = _cpu_seconds()
                await idle(backend, idle_seconds, sampling)
                idle_share = (_cpu_seconds() - before) / idle_seconds
            return elapsed, idle_share
        finally:
            await stopped(backend, request, events)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="paigraph/busybox:test")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--sampling", action="store_true", help="measure use every 5 s")
    parser.add_argument("--runs", type=int, default=1, help="measurements of each, in turn")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    client = docker.from_env()
    count = ROLES * PER_ROLE
    direct(client, args.image, 4, dressed=False)  # warm the engine up once, untimed
    print(f"containers: {count} ({ROLES} roles x {PER_ROLE}), image {args.image}; {load()}")
    figures: dict[str, list[float]] = {"direct": [], "direct+": [], "compose": [], "paigraph": []}
    counted: dict[str, collections.Counter[str]] = {}
    idle = 0.0
    runs: dict[str, Callable[[], float]] = {
        "direct": lambda: direct(client, args.image, count, dressed=False),
        "direct+": lambda: direct(client, args.image, count, dressed=True),
        "compose": lambda: compose(client, args.image, count),
    }
    for n in range(args.runs):
        for name, run in runs.items():
            figures[name].append(measured(run, name))
            counted[name] = collections.Counter(_timed)
        last = n == args.runs - 1
        took, idle_now = asyncio.run(simulated(args.image, args.idle if last else 0, args.sampling))
        figures["paigraph"].append(took)
        counted["paigraph"] = collections.Counter(_timed)
        idle = idle_now if last else idle
        print(
            f"  run {n + 1}: "
            + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in figures.items())
            + f"; {load()}"
        )
    median = {name: statistics.median(values) for name, values in figures.items()}
    baseline, ours = median["direct"], median["paigraph"]
    ratio = ours / baseline
    of = f"median of {args.runs}" if args.runs > 1 else "one run"
    print(f"    direct: {baseline:6.2f} s  (Docker SDK, 16 threads; {of})")
    print(f"   direct+: {median['direct+']:6.2f} s  (the same, dressed as paigraph's containers)")
    print(f"   compose: {median['compose']:6.2f} s  ({COMPOSE} up -d, until all run)")
    print(f"  paigraph: {ours:6.2f} s  (launch until every instance STARTED)")
    verdict = "met" if ratio <= RATIO_GOAL else "NOT met"
    print(f"     ratio: {ratio:.2f}  goal <= {RATIO_GOAL:.2f}: {verdict}")
    dressed = median["direct+"] / baseline
    print(
        f"            of which Docker's price for the containers' settings (direct+ / direct): "
        f"{dressed:.2f}; paigraph / direct+: {ours / median['direct+']:.2f}"
    )
    faster = "met" if ours < median["compose"] else "NOT met"
    print(f"   compose: paigraph / compose {ours / median['compose']:.2f}  goal < 1: {faster}")
    print("Docker API calls (last run):")
    for name in ("direct", "direct+", "paigraph"):
        print(f"  {name:>8}: {per_container(counted[name], count)}")
    if args.idle > 0:
        print(
            f"  idle cpu: {idle * 100:.2f}% of one core over {args.idle:.0f} s"
            f"{' measuring use every 5 s' if args.sampling else ''}  "
            f"goal < {IDLE_GOAL * 100:.0f}%: {'met' if idle < IDLE_GOAL else 'NOT met'}"
        )
    print(load())


if __name__ == "__main__":
    main()
