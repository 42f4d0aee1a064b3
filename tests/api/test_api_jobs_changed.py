"""The jobsChanged subscription over graphql-transport-ws against a real server, on SQLite and
PostgreSQL: a list's changesCursor picks up what happens after the list was read, a change's
cursor resumes after a reconnect without losing or repeating anything, the list's filter and
the `job_visibility` setting decide whose jobs are told."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from server.app.asgi import create_app
from server.events import JobNotice
from server.store import Store
from tests.api_support import (
    data,
    live_server,
    place_and_start,
    runtime,
    subscription,
    ws_connection,
)
from tests.store_support import submit

pytestmark = pytest.mark.anyio
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
CHANGED = """
subscription($filter: JobFilter, $after: String) {
  jobsChanged(filter: $filter, after: $after) { cursor job { name state user { name } } }
}
"""
LIST = (
    "query($filter: JobFilter) { jobs(filter: $filter) { changesCursor edges { node { name } } } }"
)


async def _announce(app: Starlette, job_id: str, store: Store) -> None:
    """Tell the bus, as the service does after it saved a job's events."""
    job = store.get_job(job_id)
    assert job is not None
    await runtime(app).bus.publish(
        JobNotice(job_id=job_id, sequence=job.last_sequence, state=job.state.value)
    )


async def _new_job(app: Starlette, store: Store, owner_id: int, name: str) -> Any:
    job, machine = await asyncio.to_thread(submit, store, owner_id, name, T0)
    await _announce(app, job.id, store)
    return job, machine


def _told(item: dict[str, Any]) -> tuple[str, str, str]:
    job = item["jobsChanged"]["job"]
    return job["name"], job["state"], job["user"]["name"]


async def test_a_list_hears_of_new_and_changed_jobs_and_resumes_from_a_cursor(
    db_url: str, store: Store
) -> None:
    ann, ann_token = store.create_user("ann")
    bob, _ = store.create_user("bob")
    await asyncio.to_thread(submit, store, ann.id, "before", T0)  # in the list already
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            listed = await data(client, LIST, {}, token=ann_token)
            mine = await data(client, LIST, {"filter": {"user": "ann"}}, token=ann_token)
        assert [e["node"]["name"] for e in listed["jobs"]["edges"]] == ["before"]
        async with ws_connection(url, {"token": ann_token}) as ws:
            everyone = subscription(
                ws, CHANGED, {"after": listed["jobs"]["changesCursor"]}, op_id="all"
            )
            own = subscription(
                ws,
                CHANGED,
                {"filter": {"user": "ann"}, "after": mine["jobs"]["changesCursor"]},
                op_id="own",
            )
            # a job submitted after the list was read: another user's, then ann's
            await _new_job(app, store, bob.id, "bobs")
            first = await anext(everyone)
            assert _told(first) == ("bobs", "WAITING", "bob")
            job, machine = await _new_job(app, store, ann.id, "anns")
            assert _told(await anext(everyone)) == ("anns", "WAITING", "ann")
            # the filtered list hears only of ann's job, not of bob's
            assert _told(await anext(own)) == ("anns", "WAITING", "ann")
            resume_after = first["jobsChanged"]["cursor"]
        # disconnected: ann's job runs meanwhile
        await asyncio.to_thread(place_and_start, store, job.id, machine, T0 + timedelta(seconds=5))
        await _announce(app, job.id, store)
        async with ws_connection(url, {"token": ann_token}) as ws:
            resumed = subscription(ws, CHANGED, {"after": resume_after})
            # from the cursor: bob's job is not told again, ann's as it is now
            assert _told(await anext(resumed)) == ("anns", "RUNNING", "ann")


async def test_under_visibility_own_a_user_hears_only_of_their_own_jobs(
    db_url: str, store: Store
) -> None:
    ann, _ = store.create_user("ann")
    bob, bob_token = store.create_user("bob")
    app = create_app(db_url=db_url, backend=None, job_visibility="own")
    async with live_server(app) as url, ws_connection(url, {"token": bob_token}) as ws:
        async with httpx.AsyncClient(base_url=url) as client:
            listed = await data(client, LIST, {}, token=bob_token)
        changes = subscription(ws, CHANGED, {"after": listed["jobs"]["changesCursor"]})
        await _new_job(app, store, ann.id, "anns")  # told to nobody but ann and admins
        await _new_job(app, store, bob.id, "bobs")
        assert _told(await anext(changes)) == ("bobs", "WAITING", "bob")
        # ann's job is not told later either: the next one told is bob's next
        await _new_job(app, store, bob.id, "bobs-second")
        assert _told(await anext(changes)) == ("bobs-second", "WAITING", "bob")
