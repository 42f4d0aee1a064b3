"""GET /metrics as a Prometheus server reads it, from apps served by real uvicorn servers on
loopback: its own route (and 404 for other paths that are no page of the UI), jobs counted by
state and virtual cluster, API latency by operation type, live subscriptions, per-instance
series with their setting and cap, and the job engine's counters as a job's changes are
stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from backends.base import EventKind, InstanceEvent, InstanceKey, utcnow
from backends.usage import UsageSample
from server.app.asgi import create_app
from server.jobs import JobMachine
from server.jobs.policy import JobPolicy, RetryPolicy, RolePolicy
from server.metrics import MetricsSettings, metrics_settings
from server.metrics.jobs import JobMetrics
from server.store import Store
from tests.api_support import (
    data,
    finish,
    live_server,
    place_and_start,
    runtime,
    subscription,
    ws_connection,
)
from tests.store_support import submit

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def series(text: str) -> Samples:
    """Every sample of a /metrics answer: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def names(found: Samples) -> set[str]:
    return {name for name, _ in found}


@asynccontextmanager
async def scraping(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """The app on a real loopback server, and a client of it (a loopback client: it may read
    /metrics without a token)."""
    async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return series(response.text)


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "webui"
    (where / "assets").mkdir(parents=True)
    (where / "index.html").write_text("<!doctype html><title>app</title>")
    monkeypatch.setenv("PAIGRAPH_WEBUI_DIR", str(where))
    return where


# --- the route ---------------------------------------------------------------------------------


async def test_metrics_has_its_own_route_before_the_apps_pages(build: Path) -> None:
    async with scraping(create_app(db_url="sqlite://", backend=None)) as client:
        answer = await client.get("/metrics", headers=HTML)  # a browser too gets the series
        assert answer.status_code == 200
        assert "<title>app</title>" not in answer.text
        assert "# TYPE paigraph_api_request_duration_seconds histogram" in answer.text
        missed = await client.get("/metrics/x", headers=HTML)
        assert missed.status_code == 404 and "<title>app</title>" not in missed.text


# --- what is read at each scrape ---------------------------------------------------------------


async def test_jobs_are_counted_by_state_and_virtual_cluster_with_the_queue(
    tmp_path: Path,
) -> None:
    app = create_app(db_url=f"sqlite:///{tmp_path / 'jobs.db'}", backend=None)
    async with scraping(app) as client:
        store = runtime(app).store
        owner, _ = store.create_user("ann")
        at = utcnow()
        waiting = [submit(store, owner.id, f"w{n}", at, vc="default")[0] for n in range(3)]
        submit(store, owner.id, "gpu-queue", at, vc="gpu")
        job, machine = submit(store, owner.id, "ran", at, vc="gpu")
        place_and_start(store, job.id, machine, at)
        done, machine = submit(store, owner.id, "done", at, vc="default")
        place_and_start(store, done.id, machine, at)
        finish(store, done.id, machine, at + timedelta(seconds=5))

        found = await scrape(client)
        assert len(waiting) == 3
        assert value(found, "paigraph_jobs", state="WAITING", virtual_cluster="default") == 3
        assert value(found, "paigraph_jobs", state="SUCCEEDED", virtual_cluster="default") == 1
        assert value(found, "paigraph_jobs", state="RUNNING", virtual_cluster="default") == 0
        assert value(found, "paigraph_jobs", state="WAITING", virtual_cluster="gpu") == 1
        assert value(found, "paigraph_jobs", state="RUNNING", virtual_cluster="gpu") == 1
        assert value(found, "paigraph_queue_length", virtual_cluster="default") == 3
        assert value(found, "paigraph_queue_length", virtual_cluster="gpu") == 1


async def test_two_apps_in_one_process_keep_their_own_series(tmp_path: Path) -> None:
    first = create_app(db_url=f"sqlite:///{tmp_path / 'a.db'}", backend=None)
    second = create_app(db_url=f"sqlite:///{tmp_path / 'b.db'}", backend=None)
    async with scraping(first) as one, scraping(second) as two:
        store = runtime(first).store
        owner, token = store.create_user("ann")
        submit(store, owner.id, "only-here", utcnow())
        await data(one, "query Version { version }", token=token)
        one_found, two_found = await scrape(one), await scrape(two)
    assert value(one_found, "paigraph_queue_length", virtual_cluster="default") == 1
    assert value(two_found, "paigraph_queue_length", virtual_cluster="default") is None
    assert value(one_found, "paigraph_api_request_duration_seconds_count", operation="query")
    assert value(two_found, "paigraph_api_request_duration_seconds_count", operation="query") == 0


async def test_operations_are_timed_by_type_and_live_subscriptions_counted(
    tmp_path: Path,
) -> None:
    app = create_app(db_url=f"sqlite:///{tmp_path / 'api.db'}", backend=None)
    async with scraping(app) as client:
        before = await scrape(client)
        for _ in range(3):
            await data(client, "query Me { viewer { name } }")
        refused = await client.post(  # a mutation answered with an error is still timed
            "/graphql",
            json={"query": 'mutation Stop { stopJob(input: {id: "nope"}) { errors { message } } }'},
        )
        assert refused.status_code == 200
        url = str(client.base_url)
        async with ws_connection(url, {}) as socket:
            events = subscription(socket, "subscription All { jobsChanged { job { id } } }", {})
            waiting = asyncio.ensure_future(anext(events))
            during = await wait_for_value(client, "paigraph_subscriptions", 1)
            waiting.cancel()
        after = await wait_for_value(client, "paigraph_subscriptions", 0)

    def count(found: Samples, operation: str) -> float:
        return (
            value(found, "paigraph_api_request_duration_seconds_count", operation=operation) or 0.0
        )

    assert count(before, "query") == 0 and count(before, "mutation") == 0
    assert count(after, "query") == 3
    assert count(after, "mutation") == 1
    assert value(during, "paigraph_subscriptions") == 1
    assert count(after, "subscription") == 1
    assert (value(after, "paigraph_api_request_duration_seconds_sum", operation="query") or 0) > 0


async def wait_for_value(client: httpx.AsyncClient, name: str, wanted: float) -> Samples:
    """The scrape in which `name` (without labels) first reads `wanted` (within 10 s)."""
    for _ in range(200):
        found = await scrape(client)
        if value(found, name) == wanted:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never read {wanted}: {value(found, name)}")


# --- per-instance series -----------------------------------------------------------------------


def sample(job_id: str, role: str, index: int, *, cpu: float, memory: int) -> UsageSample:
    return UsageSample(
        key=InstanceKey(job_id=job_id, attempt=1, role=role, index=index),
        at=utcnow(),
        cpu_cores=cpu,
        memory_bytes=memory,
        memory_limit_bytes=128 * 2**20,
        network_rx_bytes=1000 + index,
        network_tx_bytes=2000 + index,
    )


def stored_jobs(store: Store) -> tuple[str, str, str]:
    """A running job, a job that ended an hour ago and one that ended a minute ago."""
    owner, _ = store.create_user("ann")
    now = utcnow()
    running, machine = submit(store, owner.id, "running", now)
    place_and_start(store, running.id, machine, now)
    ids = []
    for name, ended in (("old", now - timedelta(hours=1)), ("recent", now - timedelta(minutes=1))):
        job, machine = submit(store, owner.id, name, ended - timedelta(minutes=5))
        place_and_start(store, job.id, machine, ended - timedelta(minutes=5))
        finish(store, job.id, machine, ended)
        ids.append(job.id)
    return running.id, ids[0], ids[1]


async def test_each_instance_has_its_resource_series_labelled_with_job_role_index_and_user(
    tmp_path: Path,
) -> None:
    given: list[tuple[UsageSample, str]] = []
    app = create_app(
        db_url=f"sqlite:///{tmp_path / 'use.db'}", backend=None, latest_usage=lambda: given
    )
    async with scraping(app) as client:
        running, _, _ = stored_jobs(runtime(app).store)
        given += [
            (sample(running, "worker", 0, cpu=1.5, memory=200 * 2**20), "ann"),
            (sample(running, "worker", 1, cpu=0.25, memory=10 * 2**20), "ann"),
        ]
        found = await scrape(client)
    labels = {"job": running, "role": "worker", "index": "0", "user": "ann"}
    assert value(found, "paigraph_instance_cpu_cores", **labels) == 1.5
    assert value(found, "paigraph_instance_memory_bytes", **labels) == 200 * 2**20
    assert value(found, "paigraph_instance_memory_limit_bytes", **labels) == 128 * 2**20
    assert value(found, "paigraph_instance_network_receive_bytes_total", **labels) == 1000
    assert value(found, "paigraph_instance_network_transmit_bytes_total", **labels) == 2000
    other = labels | {"index": "1"}
    assert value(found, "paigraph_instance_cpu_cores", **other) == 0.25
    assert value(found, "paigraph_instance_series_dropped") == 0


async def test_the_cap_leaves_out_the_instances_of_the_jobs_that_ended_longest_ago_first(
    tmp_path: Path,
) -> None:
    given: list[tuple[UsageSample, str]] = []
    app = create_app(
        db_url=f"sqlite:///{tmp_path / 'cap.db'}",
        backend=None,
        metrics=MetricsSettings(max_instances=2),
        latest_usage=lambda: given,
    )
    async with scraping(app) as client:
        running, old, recent = stored_jobs(runtime(app).store)
        given += [
            (sample(old, "worker", 0, cpu=1, memory=1), "bob"),
            (sample(recent, "worker", 0, cpu=1, memory=1), "bob"),
            (sample(running, "worker", 0, cpu=1, memory=1), "ann"),
        ]
        found = await scrape(client)
    kept = {dict(labels)["job"] for name, labels in found if name == "paigraph_instance_cpu_cores"}
    assert kept == {running, recent}
    assert value(found, "paigraph_instance_series_dropped") == 1


async def test_per_instance_series_can_be_turned_off(tmp_path: Path) -> None:
    asked = []

    def usage() -> Sequence[tuple[UsageSample, str]]:
        asked.append(True)
        return [(sample("some-job", "worker", 0, cpu=1, memory=1), "ann")]

    app = create_app(
        db_url=f"sqlite:///{tmp_path / 'off.db'}",
        backend=None,
        metrics=metrics_settings({"PAIGRAPH_METRICS_PER_INSTANCE": "false"}),
        latest_usage=usage,
    )
    async with scraping(app) as client:
        found = await scrape(client)
    assert not {n for n in names(found) if n.startswith("paigraph_instance_")}
    assert asked == []  # not even read
    assert "paigraph_subscriptions" in names(found)


def test_malformed_settings_are_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="PAIGRAPH_METRICS_OPEN must be true or false"):
        metrics_settings({"PAIGRAPH_METRICS_OPEN": "maybe"})
    with pytest.raises(ValueError, match="PAIGRAPH_METRICS_MAX_INSTANCES must be a whole"):
        metrics_settings({"PAIGRAPH_METRICS_MAX_INSTANCES": "-3"})
    assert metrics_settings({}) == MetricsSettings(open=False, per_instance=True)


# --- the job engine's counters -----------------------------------------------------------------


class Journalled:
    """A job machine whose every change is handed to JobMetrics as the service's journal
    hands it once stored."""

    def __init__(self, policy: JobPolicy, at: datetime) -> None:
        self.registry = CollectorRegistry()
        self.metrics = JobMetrics(self.registry)
        self.at = at
        self.machine = JobMachine(policy, "job-1", at=at)
        self.saved = 0
        self.machine.start(at=at)
        self.save()

    def save(self) -> None:
        changes = self.machine.transitions[self.saved :]
        self.saved = len(self.machine.transitions)
        self.metrics.saved(self.machine.snapshot(), changes)

    def event(self, kind: EventKind, after: float, **fields: object) -> None:
        view = self.machine.instances[0]
        self.machine.apply(
            InstanceEvent(
                job_id="job-1",
                attempt=self.machine.attempt,
                kind=kind,
                role=view.role,
                index=view.index,
                run=view.task_attempt,
                at=self.at + timedelta(seconds=after),
                **fields,  # type: ignore[arg-type]
            )
        )
        self.save()

    def found(self) -> Samples:
        return series(generate_latest(self.registry).decode())


def test_launches_queue_waits_and_exits_by_class_are_counted_from_stored_changes() -> None:
    policy = JobPolicy(
        roles=(RolePolicy(name="worker", instances=1, min_failed=1, min_succeeded=1),),
        retry=RetryPolicy.for_job(1),
    )
    job = Journalled(policy, utcnow())
    job.event(EventKind.PLACED, 5)  # queued at 0, placed at 5, running at 7
    job.event(EventKind.STARTED, 7)
    job.event(EventKind.EXITED, 8, exit_code=1)  # unknown: retried as a new attempt at once
    job.at += timedelta(seconds=8)
    job.event(EventKind.PLACED, 1)
    job.event(EventKind.STARTED, 2)
    job.event(EventKind.EXITED, 3, exit_code=137)  # SIGKILL: transient, retried uncounted
    job.at += timedelta(seconds=3)
    job.event(EventKind.PLACED, 1)
    job.event(EventKind.STARTED, 1)
    job.event(EventKind.EXITED, 9, exit_code=0)
    assert job.machine.state.value == "SUCCEEDED"

    found = job.found()
    assert value(found, "paigraph_launches_total") == 3
    assert value(found, "paigraph_queue_wait_seconds_count") == 3
    assert value(found, "paigraph_queue_wait_seconds_sum") == 5 + 1 + 1
    assert value(found, "paigraph_launch_duration_seconds_count") == 3
    assert value(found, "paigraph_launch_duration_seconds_sum") == 2 + 1 + 0
    assert value(found, "paigraph_instance_exits_total", exit_class="unknown") == 1
    assert value(found, "paigraph_instance_exits_total", exit_class="transient") == 1
    assert value(found, "paigraph_instance_exits_total", exit_class="succeeded") == 1


def test_an_oom_kill_is_a_permanent_exit_and_outages_are_counted_once_each() -> None:
    from backends.base import BackendHealth

    policy = JobPolicy(
        roles=(RolePolicy(name="worker", instances=1, min_failed=1, min_succeeded=1),),
        retry=RetryPolicy.for_job(3),
    )
    job = Journalled(policy, utcnow())
    job.event(EventKind.PLACED, 1)
    job.event(EventKind.STARTED, 2)
    job.event(EventKind.EXITED, 3, exit_code=137, oom_killed=True)
    assert job.machine.state.value == "FAILED"
    down = BackendHealth(healthy=False, reason="the engine does not answer")
    for health in (down, down.model_copy(update={"reason": "still not"}), BackendHealth(), down):
        job.metrics.backend_health(health)
    found = job.found()
    assert value(found, "paigraph_instance_exits_total", exit_class="permanent") == 1
    assert value(found, "paigraph_launches_total") == 1
    assert value(found, "paigraph_backend_outages_total") == 2
