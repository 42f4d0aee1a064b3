"""The simulator backend through Docker engine faults: its event stream cut while instances
exit, and the engine unreachable for a while (a fault-injecting proxy in front of the real
engine's socket, tests/docker_proxy.py). See docs/reliability.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest

from backends.base import EventKind, InstanceKey
from backends.docker import DockerBackend
from simulator.containers import Engine
from tests.docker_proxy import DockerProxy
from tests.simulated import Collector, job, role, settings

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture
def proxy() -> AsyncIterator[DockerProxy]:
    # a short path: unix socket paths are limited to about 100 bytes
    path = Path(f"/tmp/pg-proxy-{time.monotonic_ns()}.sock")
    running = DockerProxy(path)
    yield running
    running.close()


@asynccontextmanager
async def backend_through(
    proxy: DockerProxy, state_dir: Path, owner: str
) -> AsyncIterator[DockerBackend]:
    """A backend whose every Docker call (its event stream too) goes through the proxy."""
    client = docker.DockerClient(base_url=proxy.url, timeout=30)
    sim = DockerBackend(settings(state_dir), owner=owner, engine=Engine(client))
    await sim.start()
    try:
        yield sim
    finally:
        await sim.close()
        client.close()


async def until(check, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(0.05)


async def test_exits_while_the_event_stream_is_cut_arrive_with_their_codes_and_times(
    proxy: DockerProxy, tmp_path: Path, owner: str
) -> None:
    request = job(
        role("quick", ["sleep 1", "exit 3"]),
        role("slow", ["sleep 4"]),
    )
    async with backend_through(proxy, tmp_path, owner) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: len(events.started(request)) == 2)
        # the stream is cut, and every call (opening the stream again too) takes 2 s to pass:
        # `quick` exits while no stream is open
        proxy.delay = 2.0
        assert proxy.cut_events() == 1
        cut_at = datetime.now(UTC)
        await events.until(lambda: len(events.ended(request)) >= 1, timeout=30)
        found_at = datetime.now(UTC)
        proxy.delay = 0.0
        ended = await events.all_ended(request, timeout=30)
    quick = ended[InstanceKey(job_id=request.job_id, attempt=1, role="quick", index=0)]
    slow = ended[InstanceKey(job_id=request.job_id, attempt=1, role="slow", index=0)]
    assert (quick.kind, quick.exit_code) == (EventKind.EXITED, 3)
    assert (slow.kind, slow.exit_code) == (EventKind.EXITED, 0)
    # its real time of death (Docker's), not when the re-listing found it seconds later
    assert cut_at < quick.at
    assert (found_at - quick.at).total_seconds() > 1.0
    assert proxy.events_opened >= 2


async def test_while_the_engine_is_unreachable_launches_wait_and_exits_are_kept(
    proxy: DockerProxy, tmp_path: Path, owner: str
) -> None:
    running = job(role("main", ["sleep 1.5", "exit 0"]), role("other", ["sleep 1.5", "exit 7"]))
    async with backend_through(proxy, tmp_path, owner) as sim:
        events = Collector(sim)
        await sim.launch(running)
        await events.until(lambda: len(events.started(running)) == 2)
        proxy.refuse()
        await until(lambda: not sim.health().healthy, "the backend seeing the engine gone")
        health = sim.health()
        assert health.reason is not None and health.since is not None
        assert health.reason.startswith("Docker engine unreachable since ")
        assert health.reason.endswith(" UTC; waiting")
        assert f"{health.since:%H:%M:%S}" in health.reason

        later = job(role("late", ["echo late"]))
        await sim.launch(later)  # accepted: it waits for the engine, saying so
        await events.until(
            lambda: any(
                e.kind is EventKind.WAITING and e.reason == health.reason for e in events.of(later)
            )
        )
        await asyncio.sleep(3)  # both running instances exit meanwhile
        assert events.ended(running) == {}  # nothing is decided while the engine is away
        back, back_at = time.monotonic(), datetime.now(UTC)
        proxy.accept()
        ended = await events.all_ended(running, timeout=15)
        late = await events.all_ended(later, timeout=30)
        settled = time.monotonic() - back
        assert sim.health().healthy
    assert sorted((e.kind, e.exit_code) for e in ended.values()) == [
        (EventKind.EXITED, 0),
        (EventKind.EXITED, 7),
    ]
    # they ended while the engine was away, and say so with Docker's own times
    assert all(health.since < e.at < back_at for e in ended.values())
    assert [(e.kind, e.exit_code) for e in late.values()] == [(EventKind.EXITED, 0)]
    assert settled < 15
    assert proxy.refused > 0
