"""What a job's instances used, read through GraphQL from the store: per instance, per role
(sums and the spread between instances), averaged over a coarser `step`, and what is said when
nothing measures. The app runs in-process on a real database, without a backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from backends.base import InstanceKey
from backends.usage import UsageSample
from server.api.ids import global_id
from server.app.asgi import create_app
from server.store import Store
from tests.api_support import data, gql, place_and_start, serving
from tests.store_support import submit

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
MB = 1 << 20

QUERY = """query($id: ID!, $step: Int) { job(id: $id) {
  metrics(step: $step) { source step roles { taskRole instances request { cpuCores gpus }
    cpuCores { times sums mins maxes instances } memoryBytes { sums }
    networkRxBytesPerSecond { times sums } gpuUtilization { sums } } }
  taskRoles { name instances { index metrics(step: $step) {
    step gpuNote cpuCores { times values } networkRxBytesPerSecond { values } } } }
} }"""


@pytest.fixture
async def client(db_url: str, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(db_url=db_url, backend=None)) as http:
        yield http


def measured(store: Store) -> tuple[str, str]:
    """A running ps/worker job (ps x1, worker x2 with a GPU each, simulated) with six rounds
    5 s apart: worker i uses i + 1 cores and receives 1000 * (i + 1) bytes a second."""
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "train", T0)
    place_and_start(store, job.id, machine, T0)
    for n in range(6):
        at = T0 + timedelta(seconds=10 + 5 * n)
        store.add_usage(
            [
                UsageSample(
                    key=InstanceKey(job_id=job.id, attempt=1, role=role, index=index),
                    at=at,
                    cpu_cores=float(index + 1),
                    memory_bytes=(index + 1) * 100 * MB,
                    network_rx_bytes=5 * n * 1000 * (index + 1),
                )
                for role, index in (("ps", 0), ("worker", 0), ("worker", 1))
            ],
            step=5,
        )
    return global_id("Job", job.id), token


async def test_roles_sum_their_instances_and_show_the_least_and_most_used(
    client: httpx.AsyncClient, store: Store
) -> None:
    job_id, token = measured(store)
    found = (await data(client, QUERY, {"id": job_id}, token=token))["job"]

    metrics = found["metrics"]
    assert metrics["source"] == "not measured: this server runs no backend"
    assert metrics["step"] == 5
    ps, worker = metrics["roles"]
    assert (ps["taskRole"], worker["taskRole"]) == ("ps", "worker")
    assert worker["instances"] == 2 and worker["request"] == {"cpuCores": 2.0, "gpus": 1}
    cpu = worker["cpuCores"]
    assert cpu["times"] == [(T0 + timedelta(seconds=10 + 5 * n)).timestamp() for n in range(6)]
    assert (cpu["sums"], cpu["mins"], cpu["maxes"]) == ([3.0] * 6, [1.0] * 6, [2.0] * 6)
    assert cpu["instances"] == [2] * 6
    assert worker["memoryBytes"]["sums"] == [300.0 * MB] * 6
    # rates from consecutive totals: none for the first point, then 1000 + 2000 a second
    assert worker["networkRxBytesPerSecond"]["sums"] == [3000.0] * 5
    assert worker["gpuUtilization"]["sums"] == []

    workers = {
        i["index"]: i["metrics"]
        for r in found["taskRoles"]
        for i in r["instances"]
        if r["name"] == "worker"
    }
    assert workers[1]["cpuCores"]["values"] == [2.0] * 6
    # GPUs asked for, and no figures: why is said (the Docker backend's are simulated)
    assert workers[1]["gpuNote"] == "not measured: no GPU figures from the cluster"


async def test_a_coarser_step_averages_and_a_bad_one_is_refused_naming_it(
    client: httpx.AsyncClient, store: Store
) -> None:
    job_id, token = measured(store)
    key = job_id
    found = (await data(client, QUERY, {"id": key, "step": 60}, token=token))["job"]
    worker = found["metrics"]["roles"][1]
    assert found["metrics"]["step"] == 60
    assert worker["cpuCores"]["times"] == [T0.timestamp()]  # the minute's start
    assert worker["cpuCores"]["sums"] == [3.0]

    refused = await gql(client, QUERY, {"id": key, "step": 0}, token=token)
    assert refused["errors"][0]["message"] == "step: must be from 1 to 86400 seconds, got 0"
