"""What measuring 64 idle containers every 5 s costs, each way the Docker backend can.

    python bench/sampling.py [--image paigraph/busybox:test] [--seconds 30] [--every 5]
                             [--rounds 3]

In one run, on the same 64 running instances (a job of 4 roles x 16, as bench/launch.py
starts), windows of `--seconds` each, the three ways taking turns `--rounds` times:

  none     the backend watches its containers and nothing is measured (the baseline);
  cgroup   every `--every` seconds, each container's cgroup files and /proc network counters
           are read (backends/cgroup_usage.py);
  stream   every `--every` seconds, the latest figures of Docker's streaming stats API, one
           stream per container read on one thread (backends/docker_stats_stream.py).

For each window it prints the CPU time used, as a share of one core: this process, and the
Docker engine's own processes (dockerd, containerd) where this machine shows them, since the
stats API makes the engine collect figures every second for every stream. The cost of a way is
its windows less the baseline's. Goal: under 2% of one core. Prints figures only; removes
everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.docker import DockerBackend  # noqa: E402
from backends.docker_usage import DockerUsage  # noqa: E402
from bench.launch import job, launched, stopped  # noqa: E402
from simulator.settings import SimulatorSettings  # noqa: E402

GOAL = 0.02
WAYS = ("none", "cgroup", "stream")
ENGINE_PROGRAMS = ("dockerd", "containerd")
TICKS = os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def engine_pids() -> list[int]:
    """The engine's processes this machine shows (none when it runs elsewhere)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ENGINE_PROGRAMS:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def engine_cpu(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


async def window(
    backend: DockerBackend, meter: DockerUsage | None, seconds: float, every: float
) -> tuple[float, float, int]:
    """(own share, engine share, samples taken) over one window."""
    pids = engine_pids()
    own, engine, began = own_cpu(), engine_cpu(pids), time.monotonic()
    taken = 0
    if meter is not None:
        backend.usage_meter = meter
    while time.monotonic() - began < seconds:
        if meter is not None:
            taken += len(await backend.sample_usage())
        await asyncio.sleep(max(0.0, min(every, seconds - (time.monotonic() - began))))
    elapsed = time.monotonic() - began
    result = (own_cpu() - own) / elapsed, (engine_cpu(pids) - engine) / elapsed, taken
    if meter is not None:
        await asyncio.to_thread(meter.close)
    return result


async def run(image: str, seconds: float, every: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        settings = SimulatorSettings(state_dir=Path(state))
        backend = DockerBackend(settings, owner=f"bench-{time.monotonic_ns()}")
        await backend.start()
        request = job(image)
        events = backend.events()
        try:
            await launched(backend, request, events)
            await asyncio.sleep(5)  # the starts' own work settles
            api = backend.engine.api
            # the ways take turns, so a drift in what else the machine does hits each alike
            runs: dict[str, list[tuple[float, float, int]]] = {w: [] for w in WAYS}
            for _ in range(rounds):
                for way in WAYS:
                    meter = None if way == "none" else DockerUsage(api, way)
                    runs[way].append(await window(backend, meter, seconds, every))
            figures = {way: _mean(found) for way, found in runs.items()}
        finally:
            await stopped(backend, request, events)
    report(figures, request.total_instances, seconds, every, rounds)


def _mean(found: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return (
        sum(f[0] for f in found) / len(found),
        sum(f[1] for f in found) / len(found),
        sum(f[2] for f in found),
    )


def report(
    figures: dict[str, tuple[float, float, int]],
    count: int,
    seconds: float,
    every: float,
    rounds: int,
) -> None:
    base_own, base_engine, _ = figures["none"]
    print(
        f"{count} idle containers, a sample every {every:g} s, "
        f"{rounds} windows of {seconds:g} s per way, taking turns"
    )
    print("  way      process (over none)   engine (over none)   samples")
    for name, (own, engine, taken) in figures.items():
        line = f"  {name:7} {own * 100:6.2f}% ({(own - base_own) * 100:+6.2f}%)"
        line += f"   {engine * 100:6.2f}% ({(engine - base_engine) * 100:+6.2f}%)   {taken:6}"
        if name != "none":
            cost = own - base_own
            line += f"   process goal < {GOAL * 100:.0f}%: {'met' if cost < GOAL else 'NOT met'}"
        print(line)
    print(
        "  (the engine's figure counts everything the engine does: on a shared machine other "
        "programs' containers move it more than sampling does)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="paigraph/busybox:test")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.image, args.seconds, args.every, args.rounds))


if __name__ == "__main__":
    main()
