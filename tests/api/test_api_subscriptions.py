"""jobEvents over graphql-transport-ws against a real server, on SQLite and PostgreSQL: replay
from a cursor, live follow to the final state, and (PostgreSQL) events written and announced by
another process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from server.api.ids import global_id
from server.app.asgi import create_app
from server.events import JobNotice
from server.store import Store, open_store
from tests.api_support import (
    WsError,
    collect,
    data,
    finish,
    live_server,
    place_and_start,
    runtime,
    subscription,
    ws_connection,
)
from tests.store_support import fresh_database, submit

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { cursor sequence type state taskRole index }
}
"""


async def test_job_events_replay_from_a_cursor_then_follow_live_to_the_end(
    db_url: str, store: Store
) -> None:
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "follow", T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    stored = store.get_job(job.id)
    assert stored is not None and stored.last_sequence > 3
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url, ws_connection(url, {"token": token}) as ws:
        async with httpx.AsyncClient(base_url=url) as client:
            page = await data(
                client,
                "query($id: ID) { job(id: $id) { events(first: 2) { pageInfo { endCursor } } } }",
                {"id": global_id("Job", job.id)},
                token=token,
            )
        after = page["job"]["events"]["pageInfo"]["endCursor"]
        events = subscription(ws, JOB_EVENTS, {"jobId": global_id("Job", job.id), "after": after})
        replayed = [(await anext(events))["jobEvents"] for _ in range(stored.last_sequence - 2)]
        assert [e["sequence"] for e in replayed] == list(range(3, stored.last_sequence + 1))

        # the subscriber now waits; the job ends, and the bus says so
        last = await asyncio.to_thread(finish, store, job.id, machine, T0 + timedelta(minutes=1))
        await runtime(app).bus.publish(JobNotice(job_id=job.id, sequence=last, state="SUCCEEDED"))
        live = [item["jobEvents"] for item in await collect(events)]
    sequences = [e["sequence"] for e in replayed + live]
    assert sequences == list(range(3, last + 1))
    assert live[-1]["type"] == "JOB_STATE" and live[-1]["state"] == "SUCCEEDED"
    assert ("ps", 0, "SUCCEEDED") in [(e["taskRole"], e["index"], e["state"]) for e in live]


async def test_job_events_of_an_ended_job_replay_and_complete(db_url: str, store: Store) -> None:
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "done", T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    last = finish(store, job.id, machine, T0 + timedelta(minutes=1))
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url, ws_connection(url, {"token": token}) as ws:
        everything = await collect(
            subscription(ws, JOB_EVENTS, {"jobId": global_id("Job", job.id)}, op_id="a")
        )
        assert [e["jobEvents"]["sequence"] for e in everything] == list(range(1, last + 1))
        end = everything[-1]["jobEvents"]["cursor"]
        nothing = await collect(
            subscription(
                ws, JOB_EVENTS, {"jobId": global_id("Job", job.id), "after": end}, op_id="b"
            )
        )
        assert nothing == []
        with pytest.raises(WsError) as error:
            await collect(
                subscription(ws, JOB_EVENTS, {"jobId": global_id("Job", "nope")}, op_id="c")
            )
        assert "jobId: no job has that ID" in str(error.value)


@pytest.mark.postgres
async def test_events_written_by_another_process_reach_this_ones_subscribers(
    tmp_path: Path,
) -> None:
    with fresh_database("postgres", tmp_path) as url:
        store = open_store(url)
        try:
            ann, token = store.create_user("ann")
            job, machine = submit(store, ann.id, "shared", T0)
            place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
            start = store.get_job(job.id)
            assert start is not None
            app = create_app(db_url=url, backend=None)
            async with live_server(app) as base, ws_connection(base, {"token": token}) as ws:
                events = subscription(
                    ws,
                    JOB_EVENTS,
                    {"jobId": global_id("Job", job.id)},
                )
                replayed = [await anext(events) for _ in range(start.last_sequence)]
                other = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    "import asyncio, sys; from tests.api_support import finish_elsewhere; "
                    "asyncio.run(finish_elsewhere(sys.argv[1], sys.argv[2]))",
                    url,
                    job.id,
                    cwd=ROOT,
                    stderr=subprocess.PIPE,
                )
                _, err = await other.communicate()
                assert other.returncode == 0, err.decode()
                live = [item["jobEvents"] for item in await collect(events)]
        finally:
            store.close()
    assert len(replayed) == start.last_sequence
    assert live[0]["sequence"] == start.last_sequence + 1
    assert live[-1]["state"] == "SUCCEEDED"


async def test_a_subscription_masks_unexpected_failures_but_not_the_users_mistakes(
    db_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann, token = store.create_user("ann")
    job, _ = submit(store, ann.id, "broken", T0)
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url, ws_connection(url, {"token": token}) as ws:
        with pytest.raises(WsError) as mistake:
            await collect(subscription(ws, JOB_EVENTS, {"jobId": global_id("Job", "nope")}))
        assert mistake.value.payload[0]["message"] == "jobId: no job has that ID"

        def failing_read(*_: object, **__: object) -> None:
            raise RuntimeError("disk /var/secret/db is unreadable")

        monkeypatch.setattr(runtime(app).store, "events_after", failing_read)
        variables = {"jobId": global_id("Job", job.id)}
        with pytest.raises(WsError) as fault:
            await collect(subscription(ws, JOB_EVENTS, variables, op_id="2"))
        assert [e["message"] for e in fault.value.payload] == ["Unexpected error."]
        assert "secret" not in str(fault.value.payload)
