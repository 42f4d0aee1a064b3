"""The Kubernetes backend through the API server's faults, on the fake API server (no cluster
can run on this machine): a watch cut mid-way, a watch that expired (410 Gone), and the API
server going away for a while. Nothing that happens to the pods meanwhile is lost, jobs know
the server is away, and launches made meanwhile wait and then run."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import EventKind
from backends.kubernetes import KubernetesBackend
from server.events import bus_for
from server.jobs.service import JobService
from server.shapes.job_states import JobState
from server.store import Store
from tests.backends.test_kubernetes_fake_cluster import (
    Events,
    _pingpong,
    allowed_by_role,
    backend_on,
    pod_of,
    ps_worker,
    settings,
)
from tests.fake_kube_api import FakeKubeAPI
from tests.waiting import until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake
    used = fake.verbs()
    assert used <= allowed_by_role(), f"calls the Role does not allow: {used - allowed_by_role()}"


async def running_job(api: FakeKubeAPI, events: Events, backend: object, job_id: str) -> None:
    """Launch a ps-worker job and bring its three pods to running."""
    await backend.launch(ps_worker(job_id))  # type: ignore[attr-defined]
    await asyncio.to_thread(api.wait_for_pods, 3)
    for host in ("ps-0", "worker-0", "worker-1"):
        api.schedule(pod_of(api, host), node="node-a", ip=f"10.0.0.{len(host)}")
        api.run(pod_of(api, host))
    await events.until(lambda: len(events.of(EventKind.STARTED)) == 3)


async def test_fake_cluster_a_cut_watch_loses_no_exit(api: FakeKubeAPI, tmp_path: Path) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await running_job(api, events, backend, "cut-0000aaaa")
        api.break_watches()
        api.exit(pod_of(api, "worker-0"), 3)
        api.break_watches()
        api.exit(pod_of(api, "worker-1"), 0)
        ended = await events.until(lambda: len(events.ended()) == 2 and events.ended())
        assert {k: (e.kind, e.exit_code) for k, e in ended.items()} == {
            "worker-0": (EventKind.EXITED, 3),
            "worker-1": (EventKind.EXITED, 0),
        }
        assert backend.health().healthy
        events.close()


async def test_fake_cluster_an_expired_watch_is_listed_again(
    api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backends.kubernetes")
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await running_job(api, events, backend, "gone-0000bbbb")
        api.expire_watches()
        api.exit(pod_of(api, "ps-0"), 0)
        ended = await events.until(lambda: events.ended())
        assert (ended["ps-0"].kind, ended["ps-0"].exit_code) == (EventKind.EXITED, 0)
        # an expired watch is routine: listed again without a warning, and no outage
        assert "410 Gone" in caplog.text
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        assert backend.health().healthy
        events.close()


async def test_fake_cluster_the_api_server_away_then_back(api: FakeKubeAPI, tmp_path: Path) -> None:
    async with backend_on(api, tmp_path, gang_timeout_seconds=1) as backend:
        events = Events(backend)
        await running_job(api, events, backend, "away-0000cccc")
        with api.away():
            health = await until_async(
                lambda: not (h := backend.health()).healthy and h, "the outage seen", 10, 0.05
            )
            assert health.reason.startswith("Kubernetes API server unreachable since ")
            assert health.reason.endswith(" UTC; waiting")
            assert health.detail  # the client's error, for operators
            # the pods go on without the server's clients: two end while it is away
            api.exit(pod_of(api, "worker-0"), 7)
            api.exit(pod_of(api, "ps-0"), 0)
            # a job launched meanwhile waits (its gang clock too) instead of failing
            waiting = asyncio.create_task(backend.launch(ps_worker("later-0000dddd")))
            await asyncio.sleep(2.5)  # longer than the gang timeout
            assert not waiting.done()
            assert not events.ended().get("worker-1")
            assert not [e for e in events.seen if e.kind is EventKind.START_FAILED]
        await until_async(lambda: backend.health().healthy, "the server back", 10, 0.05)
        # what happened meanwhile arrives with the pods' own exit codes
        ended = await events.until(lambda: len(events.ended()) >= 2 and events.ended())
        assert (ended["worker-0"].kind, ended["worker-0"].exit_code) == (EventKind.EXITED, 7)
        assert (ended["ps-0"].kind, ended["ps-0"].exit_code) == (EventKind.EXITED, 0)
        await asyncio.wait_for(waiting, 10)
        assert len(await asyncio.to_thread(api.wait_for_pods, 6)) == 6  # the later job's too
        assert not [e for e in events.seen if e.kind is EventKind.START_FAILED]
        events.close()


async def test_fake_cluster_a_stop_while_the_server_is_away_deletes_on_its_return(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await running_job(api, events, backend, "stop-0000eeee")
        with api.away():
            await until_async(lambda: not backend.health().healthy, "the outage seen", 10, 0.05)
            await backend.stop("stop-0000eeee", 1, grace_seconds=0)
            assert len(api.pods()) == 3  # nothing could be deleted yet
        await until_async(lambda: api.pods() == [], "the pods deleted on return", 15, 0.1)
        events.close()


async def test_fake_cluster_jobs_show_the_api_server_away_and_end_as_they_should(
    api: FakeKubeAPI, tmp_path: Path, store: Store, db_url: str
) -> None:
    bus = bus_for(db_url)
    service = JobService(store, KubernetesBackend(settings(api, tmp_path)), bus)
    await service.start()
    try:
        user = store.create_user("kate", admin=True)[0]
        outcome = await service.submit(user, json.dumps(_pingpong()))
        assert outcome.errors == [] and outcome.job is not None
        job_id = outcome.job.id
        names = await asyncio.to_thread(api.wait_for_pods, 3)
        for number, name in enumerate(names):
            api.schedule(name, node=f"node-{number}", ip=f"10.2.0.{number + 1}")
            api.run(name)

        def job() -> Any:
            return store.get_job(job_id)

        await until_async(lambda: job().state is JobState.RUNNING, "the job running", 15, 0.05)
        with api.away():
            told = await until_async(
                lambda: (
                    "Kubernetes API server unreachable since" in (job().state_reason or "")
                    and job()
                ),
                "the job telling the outage",
                15,
                0.05,
            )
            assert told.state is JobState.RUNNING  # nothing is decided for the outage itself
            for name in names:
                api.exit(name, 0)  # while the server is away
        ended = await until_async(lambda: job().state.is_final and job(), "the job ended", 20, 0.1)
        assert ended.state is JobState.SUCCEEDED
    finally:
        await service.close()
        await bus.close()
