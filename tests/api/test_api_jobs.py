"""Jobs through the API end to end: a real uvicorn server, the job service on the Docker
simulator, HTTP for queries and mutations and graphql-transport-ws for the live parts."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.docker import DockerBackend
from server.app.asgi import create_app
from server.events import bus_for
from server.jobs.service import JobService
from server.store import Store, open_store
from tests.api_support import (
    collect,
    data,
    every_field,
    gql,
    live_server,
    subscription,
    ws_connection,
)
from tests.service_support import job_config, ps_worker
from tests.simulated import nothing_left, settings
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SUBMIT = """
mutation($config: String!, $vc: String) {
  submitJob(input: {config: $config, virtualCluster: $vc}) {
    job { id name state } errors { path code message }
  }
}
"""
STOP = """
mutation($id: ID!) { stopJob(input: {id: $id}) { job { id state } errors { path code message } } }
"""
JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { cursor sequence type state taskRole index message }
}
"""
TASK_LOGS = """
subscription($jobId: ID!, $role: String!, $index: Int!, $follow: Boolean) {
  taskLogs(jobId: $jobId, taskRole: $role, index: $index, follow: $follow) { offset data }
}
"""
INSTANCES = """
query($id: ID) { job(id: $id) { state stateReason taskRoles { name instances {
  index state exitCode node hostIp ports { label ports } } } } }
"""


class Served:
    def __init__(self, url: str, store: Store, client: httpx.AsyncClient) -> None:
        self.url = url
        self.store = store
        self.client = client

    def user(self, name: str, *vcs: str, admin: bool = False) -> str:
        """A new user's token."""
        found, token = self.store.create_user(name, admin=admin)
        for vc in vcs:
            self.store.add_membership(found.id, vc)
        return token

    async def submit(self, token: str, config: str) -> dict[str, Any]:
        payload = (await data(self.client, SUBMIT, {"config": config}, token=token))["submitJob"]
        assert payload["errors"] == [], payload
        assert payload["job"]["state"] == "WAITING"
        return payload["job"]

    async def job(self, token: str, job_id: str) -> dict[str, Any]:
        return (await data(self.client, INSTANCES, {"id": job_id}, token=token))["job"]

    async def until(self, token: str, job_id: str, check: Any, timeout: float = 90) -> dict:
        """The job as `token`'s user sees it, once `check` holds for it."""

        async def checked() -> dict[str, Any] | None:
            found = await self.job(token, job_id)
            return found if check(found) else None

        return await until_async(checked, f"job {job_id} as awaited", timeout)


@asynccontextmanager
async def served(db_url: str, state_dir: Path, owner: str) -> AsyncIterator[Served]:
    """The server as `paigraph serve` runs it, with a backend of this test's own."""
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(store, DockerBackend(settings(state_dir), owner=owner), bus)
    try:
        async with (
            live_server(create_app(service)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            yield Served(url, store, client)
    finally:
        await bus.close()
        store.close()


def instance(job: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    found = next(r for r in job["taskRoles"] if r["name"] == role)
    return found["instances"][index]


async def test_a_ps_worker_job_runs_to_success_with_live_events_and_logs(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    worker = ["echo worker $PAI_TASK_INDEX start", "sleep 2", "echo worker $PAI_TASK_INDEX done"]
    async with served(db_url, tmp_path / "state", owner) as server:
        token = server.user("ann", "default")
        job = await server.submit(token, ps_worker("api_psworker", worker=worker))
        async with ws_connection(server.url, {"token": token}) as events_ws:
            events = asyncio.create_task(
                collect(subscription(events_ws, JOB_EVENTS, {"jobId": job["id"]}, timeout=120))
            )
            await server.until(
                token, job["id"], lambda j: instance(j, "worker", 0)["state"] == "RUNNING"
            )
            async with ws_connection(server.url, {"Authorization": f"Bearer {token}"}) as logs_ws:
                variables = {"jobId": job["id"], "role": "worker", "index": 0, "follow": True}
                chunks = [
                    c["taskLogs"]
                    for c in await collect(subscription(logs_ws, TASK_LOGS, variables))
                ]
            delivered = [item["jobEvents"] for item in await events]

        followed = "".join(c["data"] for c in chunks)
        assert "worker 0 start" in followed and "worker 0 done" in followed
        assert followed.index("worker 0 start") < followed.index("worker 0 done")
        offsets = [c["offset"] for c in chunks]
        sizes = [len(c["data"].encode()) for c in chunks]
        assert offsets == [sum(sizes[:n]) for n in range(len(chunks))]  # no gap, no overlap

        assert [e["sequence"] for e in delivered] == list(range(1, len(delivered) + 1))
        assert (delivered[0]["type"], delivered[0]["state"]) == ("JOB_STATE", "WAITING")
        assert (delivered[-1]["type"], delivered[-1]["state"]) == ("JOB_STATE", "SUCCEEDED")
        assert {(e["taskRole"], e["index"]) for e in delivered if e["state"] == "RUNNING"} >= {
            ("ps", 0),
            ("worker", 0),
            ("worker", 1),
        }

        final = await server.job(token, job["id"])
        assert final["state"] == "SUCCEEDED", final["stateReason"]
        for index in (0, 1):
            done = instance(final, "worker", index)
            assert (done["state"], done["exitCode"]) == ("SUCCEEDED", 0)
            assert done["hostIp"] and done["node"]
            labels = {p["label"]: p["ports"] for p in done["ports"]}
            assert set(labels) >= {"ssh", "http"} and all(labels.values())

        # replay from a cursor after the job ended: the rest, then the end
        async with ws_connection(server.url, {"token": token}) as ws:
            middle = delivered[len(delivered) // 2]
            rest = await collect(
                subscription(ws, JOB_EVENTS, {"jobId": job["id"], "after": middle["cursor"]})
            )
            logs = await collect(
                subscription(
                    ws,
                    TASK_LOGS,
                    {"jobId": job["id"], "role": "worker", "index": 1, "follow": False},
                    op_id="2",
                )
            )
        assert [e["jobEvents"] for e in rest] == delivered[len(delivered) // 2 + 1 :]
        assert "worker 1 done" in "".join(c["taskLogs"]["data"] for c in logs)
        await nothing_left(owner)


async def test_only_the_owner_or_an_admin_stops_and_no_field_shows_a_secret(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    config = json.loads(
        job_config(
            {"sleeper": {"commands": ['test "<% $secrets.token %>" != "" && sleep 600']}},
            name="guarded",
        )
    )
    config["secrets"] = {"token": secret}
    text = json.dumps(config)
    async with served(db_url, tmp_path / "state", owner) as server:
        ann = server.user("ann", "default")
        bob = server.user("bob", "default")
        submitted = await data(server.client, SUBMIT, {"config": text}, token=ann)
        job = submitted["submitJob"]["job"]
        await server.until(
            ann, job["id"], lambda j: instance(j, "sleeper", 0)["state"] == "RUNNING"
        )

        # bob sees the job but may not stop it, nor submit to a virtual cluster there is not
        refused = (await data(server.client, STOP, {"id": job["id"]}, token=bob))["stopJob"]
        assert [(e["path"], e["code"]) for e in refused["errors"]] == [(["id"], "forbidden")]
        elsewhere = await data(server.client, SUBMIT, {"config": text, "vc": "research"}, token=bob)
        assert [(e["path"], e["code"]) for e in elsewhere["submitJob"]["errors"]] == [
            (["virtualCluster"], "unknown-virtual-cluster")
        ]
        assert (await server.job(ann, job["id"]))["state"] == "RUNNING"

        everything = f"query($id: ID) {{ job(id: $id) {{ {every_field('Job')} }} }}"
        listing = f"{{ jobs {{ edges {{ node {{ {every_field('Job')} }} }} }} }}"
        replies = []
        for token in (ann, bob):
            replies.append(await gql(server.client, everything, {"id": job["id"]}, token=token))
            replies.append(await gql(server.client, listing, token=token))
        assert all("errors" not in reply for reply in replies), replies
        answers = [json.dumps(submitted), *map(json.dumps, replies)]
        assert '"config": "' in answers[1] and "secrets" in answers[1]
        assert not [a for a in answers if secret in a], "a field returned the secret"

        # the owner stops it; the event stream ends with STOPPED
        async with ws_connection(server.url, {"token": bob}) as ws:
            events = asyncio.create_task(
                collect(subscription(ws, JOB_EVENTS, {"jobId": job["id"]}))
            )
            stopped = (await data(server.client, STOP, {"id": job["id"]}, token=ann))["stopJob"]
            assert stopped["errors"] == [] and stopped["job"]["state"] in ("STOPPING", "STOPPED")
            delivered = [item["jobEvents"] for item in await events]
        assert delivered[-1]["state"] == "STOPPED"
        assert "stop requested by ann" in delivered[-1]["message"]
        again = (await data(server.client, STOP, {"id": job["id"]}, token=ann))["stopJob"]
        assert [e["code"] for e in again["errors"]] == ["final"]
        await nothing_left(owner)
