"""The simulator backend through Docker engine faults: its event stream cut while instances
exit, and the engine unreachable for a while (a fault-injecting proxy in front of the real
engine's socket, tests/docker_proxy.py). See docs/reliability.md."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from backends.base import EventKind, InstanceKey
from backends.docker import DockerBackend
from server.client.remote import Client
from simulator.containers import Engine
from tests.docker_proxy import DockerProxy
from tests.servers import (
    Server,
    containers,
    event_log,
    final_job,
    instances,
    job_containers,
    nothing_left,
    served,
)
from tests.servers import job as job_of
from tests.simulated import Collector, job, job_config, role, settings
from tests.waiting import until, until_async
from tests.worker_support import unique_name

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture
def proxy() -> AsyncIterator[DockerProxy]:
    # a short path: unix socket paths are limited to about 100 bytes
    path = Path(f"/tmp/{unique_name('pg-proxy')}.sock")
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
        await until_async(
            lambda: not sim.health().healthy, "the backend seeing the engine gone", 30, 0.05
        )
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
        await until_async(  # both running instances exit meanwhile (Docker says so directly)
            lambda: asyncio.to_thread(lambda: len(containers(owner, "exited")) == 2),
            "both running instances exiting",
            30,
        )
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


# --- a real `paigraph serve` whose Docker engine is behind the proxy ----------------------------

CUT_WHILE_EXITING = job_config(
    name="cut",
    roles={
        "checker": {"commands": ["sleep 1", "exit 3"], "completion": {"minFailedInstances": -1}},
        "worker": {"commands": ["sleep 5"]},
    },
)
SHORT = job_config(name="short", roles={"main": {"commands": ["sleep 0.5"]}})
OUTLIVES = job_config(name="outlives", roles={"main": {"commands": ["sleep 2", "exit 0"]}})
UNREACHABLE = "Docker engine unreachable since "


def states(found: dict[str, Any]) -> dict[str, tuple[str, int | None]]:
    return {name: (i["state"], i["exitCode"]) for name, i in instances(found).items()}


def submitted(client: Client, config: str) -> str:
    answer = client.submit(config, {})
    assert answer["errors"] == [], answer["errors"]
    return answer["job"]["id"]


def running(client: Client, job_id: str) -> bool:
    return all(i["state"] == "RUNNING" for i in instances(job_of(client, job_id)).values())


def health(server: Server) -> httpx.Response:
    return httpx.get(f"{server.url}/health", timeout=5)


@pytest.mark.alone  # it times the recovery once the engine is back
def test_a_server_keeps_its_word_through_a_cut_stream_and_an_unreachable_engine(
    proxy: DockerProxy, tmp_path: Path
) -> None:
    with served("sqlite", tmp_path) as server:
        server.settings["DOCKER_HOST"] = proxy.url
        server.start()
        client = server.client()
        assert health(server).json() == {"status": "ok", "backend": "docker"}

        # the event stream is cut, and opening it again takes seconds: `checker` exits meanwhile
        cut = submitted(client, CUT_WHILE_EXITING)
        until(lambda: running(client, cut), "both instances running")
        proxy.delay = 2.0
        assert proxy.cut_events() == 1
        after_cut = submitted(client, SHORT)
        proxy.delay = 0.0
        ended = final_job(client, cut, timeout=60)
        assert ended["state"] == "SUCCEEDED", ended["stateReason"]
        assert states(ended) == {"checker-0": ("FAILED", 3), "worker-0": ("SUCCEEDED", 0)}
        assert final_job(client, after_cut, timeout=60)["state"] == "SUCCEEDED"

        # the engine stops answering while a job runs: it waits, saying why, and so does a
        # job submitted meanwhile; /health and doctor say so; nothing is decided meanwhile
        outlives = submitted(client, OUTLIVES)
        until(lambda: running(client, outlives), "the job running")
        proxy.refuse()
        shown = until(
            lambda: (j := job_of(client, outlives))["stateReason"].startswith(UNREACHABLE) and j,
            "the job showing the engine unreachable",
            timeout=10,
        )
        assert shown["state"] == "RUNNING" and shown["stateReason"].endswith(" UTC; waiting")
        answer = health(server)
        assert answer.status_code == 503
        assert answer.json()["reason"] == shown["stateReason"]
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200  # alive
        doctor = subprocess.run(
            [sys.executable, "-m", "server.cli", "doctor"],
            env=server.env(COLUMNS="400"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert doctor.returncode == 1
        assert f"{server.url}: {shown['stateReason']}" in doctor.stdout, doctor.stdout
        meanwhile = submitted(client, SHORT)
        waits = job_of(client, meanwhile)
        assert waits["state"] == "WAITING"
        until(
            lambda: job_of(client, meanwhile)["stateReason"] == shown["stateReason"],
            "the new job showing the engine unreachable",
            timeout=10,
        )
        until(  # `outlives` exits while the engine is away
            lambda: job_containers(outlives, "exited"), "outlives' instance exiting", 30
        )
        assert job_of(client, outlives)["state"] == "RUNNING"

        proxy.accept()
        back = time.monotonic()
        done = final_job(client, outlives, timeout=20)
        assert final_job(client, meanwhile, timeout=20)["state"] == "SUCCEEDED"
        assert time.monotonic() - back < 10
        assert done["state"] == "SUCCEEDED" and states(done) == {"main-0": ("SUCCEEDED", 0)}
        assert health(server).status_code == 200
        # the job's log tells the outage, then what happened meanwhile
        types = [e["type"] for e in event_log(client, outlives)]
        assert types.count("BACKEND_UNREACHABLE") == 1 and types.count("BACKEND_REACHABLE") == 1
        assert types.index("BACKEND_REACHABLE") < len(types) - 2, types
        assert types[-1] == "JOB_STATE"
        nothing_left(server.owner)
