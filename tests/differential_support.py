"""Two apps on one populated store, one per GraphQL executor, for differential testing
(tests/api/test_api_differential.py, bench/executors.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from server.api.context import Runtime
from server.api.ids import global_id
from server.api.jobs.types import event_cursor
from server.app.asgi import create_app
from server.store import Store, open_store
from tests.api_support import data, finish, place_and_start, runtime, serving
from tests.marketplace_support import data_item, template
from tests.query_generator import GeneratedQuery
from tests.store_support import submit

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schema.graphql"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@dataclass
class World:
    """Both apps' clients, and what the random queries are about: the tokens they are sent
    with, the values their arguments take, a job whose event log ends in its final state."""

    fast: httpx.AsyncClient
    standard: httpx.AsyncClient
    runtime: Runtime
    token: str
    admin_token: str
    values: dict[str, list[Any]]
    finished_job: str  # its global id


def populate(
    store: Store, more_running: int = 0
) -> tuple[str, str, dict[str, list[Any]], list[str]]:
    """Users, jobs in each phase, their events, and `more_running` running jobs of the admin
    (older than the others); the admin's token, ann's, and values for arguments."""
    root, admin_token = store.create_user("root", admin=True)
    for n in range(more_running):
        job, machine = submit(store, root.id, f"page{n}", T0 - timedelta(hours=1, minutes=n))
        place_and_start(store, job.id, machine, T0 - timedelta(minutes=59 + n))
    ann, ann_token = store.create_user("ann")
    bob, _ = store.create_user("bob")
    ids = []
    for n, (owner, phase) in enumerate(
        [(ann, "waiting"), (ann, "running"), (ann, "done"), (bob, "running"), (bob, "done")]
    ):
        at = T0 + timedelta(minutes=n)
        job, machine = submit(store, owner.id, f"job{n}", at)
        if phase != "waiting":
            place_and_start(store, job.id, machine, at + timedelta(seconds=5))
        if phase == "done":
            finish(store, job.id, machine, at + timedelta(seconds=30))
        ids.append(job.id)
    job_ids = [global_id("Job", key) for key in ids]
    values: dict[str, list[Any]] = {
        "ID": [*job_ids, global_id("Job", "missing"), global_id("User", str(ann.id)), "bogus"],
        "first": [None, 0, 1, 2, 100, 101, -1],
        "after": [None, "bogus", event_cursor(1), event_cursor(3), event_cursor(999)],
        "name": [None, "job1", "job4", "bob~job3", "nope", "hello"],
        "version": [None, "1.0.0", "9.9.9"],
        "user": [None, "ann", "bob", "nobody"],
        "owner": [None, "ann", "nobody"],
        "virtualCluster": [None, "default", "nope"],
        "nameContains": [None, "job", "zz"],
        "tag": [None, "demo", "none"],
        "category": [None, "demo"],
        "search": [None, "hello", "zz"],
        "String": [None, "x"],
        "Int": [None, 0, 1],
    }
    return admin_token, ann_token, values, job_ids


async def publish_items(client: httpx.AsyncClient, token: str) -> list[str]:
    """A template and a data item, published over the API; their global ids."""
    ids = []
    for content, tags in ((template("hello"), ["demo"]), (data_item("mnist"), [])):
        answer = await data(
            client,
            "mutation($c: String!, $t: [String!]) { publishMarketplaceItem("
            "input: {content: $c, tags: $t}) { item { id } errors { message } } }",
            {"c": content, "t": tags},
            token=token,
        )
        payload = answer["publishMarketplaceItem"]
        assert payload["errors"] == [], payload
        ids.append(payload["item"]["id"])
    return ids


async def more_cursors(client: httpx.AsyncClient, token: str) -> list[str]:
    """Real cursors of the job and item lists, for `after`."""
    pages = await data(
        client,
        "{ jobs(first: 2) { edges { cursor } } marketplaceItems(first: 1) { edges { cursor } } }",
        token=token,
    )
    return [e["cursor"] for key in pages for e in pages[key]["edges"]]


@asynccontextmanager
async def two_executors(folder: Path, more_running: int = 0) -> AsyncIterator[World]:
    """The fast app and the standard one on one populated SQLite store in `folder` (see
    `populate`), and what is in it."""
    url = f"sqlite:///{folder / 'differential.db'}"
    store = open_store(url)
    try:
        admin_token, ann_token, values, job_ids = populate(store, more_running)
    finally:
        store.close()
    fast_app = create_app(db_url=url, backend=None, executor="fast")
    standard_app = create_app(db_url=url, backend=None, executor="standard")
    async with serving(fast_app) as fast, serving(standard_app) as standard:
        values["ID"] += await publish_items(fast, ann_token)
        values["after"] += await more_cursors(fast, ann_token)
        # Most queries as ann, who sees her own jobs and public items; some as the admin.
        yield World(fast, standard, runtime(fast_app), ann_token, admin_token, values, job_ids[2])


def normalized(response: httpx.Response) -> dict[str, Any]:
    """Status, data and errors; errors sorted (sibling fields fail in any order)."""
    body = response.json()
    errors = sorted(body.get("errors") or [], key=lambda e: json.dumps(e, sort_keys=True))
    return {"status": response.status_code, "data": body.get("data"), "errors": errors}


async def ask(client: httpx.AsyncClient, query: GeneratedQuery, token: str) -> dict[str, Any]:
    response = await client.post(
        "/graphql",
        json={"query": query.text, "variables": query.variables},
        headers={"Authorization": f"Bearer {token}"},
    )
    return normalized(response)
