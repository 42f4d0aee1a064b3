"""The fast executor and graphql-core's standard one give the same answers to random queries.

A store holds users, jobs in every phase (waiting, running with placed instances, succeeded)
with their event logs, and marketplace items. Two apps serve it, one per executor; random
valid queries from the schema (tests/query_generator.py: aliases, named fragments on types
and interfaces, inline fragments, `@skip`/`@include` with variables, ids that exist and that
do not, cursors, page sizes at and past their limits) go to both over HTTP, and the answers
must be the same: status, data, and errors with their messages, paths and codes. Replays of
`jobEvents` with random selections are compared the same way.

CI runs DIFFERENTIAL_QUERIES (a few hundred) with a fixed seed; `bench/executors.py` runs
thousands and says how long each executor took.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import build_schema

from server.api.context import Context, Runtime
from server.api.ids import global_id
from server.api.loaders import Loaders
from server.api.schema import executor_setting, schema_for
from server.api.types import event_cursor
from server.app import create_app
from server.store import Store, open_store
from tests.api_support import data, finish, place_and_start, runtime, serving
from tests.marketplace_support import data_item, template
from tests.query_generator import GeneratedQuery, QueryGenerator
from tests.store_support import submit

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        executor_setting() != "fast",
        reason="compares both executors itself; scripts/test's first pass runs it",
    ),
]
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schema.graphql"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SEED = 18
DIFFERENTIAL_QUERIES = int(os.environ.get("PAIGRAPH_DIFFERENTIAL_QUERIES", "300"))
EVENT_SELECTIONS = 40


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


def populate(store: Store) -> tuple[str, str, dict[str, list[Any]], list[str]]:
    """Users, jobs in each phase, their events; the admin's token, ann's, and values."""
    _, admin_token = store.create_user("root", admin=True)
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


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """The fast app and the standard one on one populated SQLite store, and what is in it."""
    url = f"sqlite:///{tmp_path / 'differential.db'}"
    store = open_store(url)
    try:
        admin_token, ann_token, values, job_ids = populate(store)
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


async def test_random_queries_get_the_same_answer_from_both_executors(world: World) -> None:
    queries = QueryGenerator(build_schema(SCHEMA_FILE.read_text()), world.values)
    rng = random.Random(SEED)
    seen = {"errors": 0, "null data": 0, "fragments": 0, "directives": 0}
    for n in range(DIFFERENTIAL_QUERIES):
        query = queries.query(rng)
        token = world.admin_token if n % 4 == 0 else world.token
        expected = await ask(world.standard, query, token)
        assert await ask(world.fast, query, token) == expected, (query.text, query.variables)
        seen["errors"] += bool(expected["errors"])
        seen["null data"] += expected["data"] is None
        seen["fragments"] += "fragment " in query.text
        seen["directives"] += bool(query.variables)
    # The comparison reached the paths that matter, not only plain successes.
    share = {key: count / DIFFERENTIAL_QUERIES for key, count in seen.items()}
    assert share["errors"] > 0.1 and share["fragments"] > 0.2 and share["directives"] > 0.3, share
    assert seen["null data"] > 0, share
    assert queries.rejected < DIFFERENTIAL_QUERIES, queries.rejected


async def test_replayed_job_events_are_the_same_from_both_executors(world: World) -> None:
    """`jobEvents` of a finished job, from the start: the replay ends with its final state.
    Random selections of JobEvent (fragments, directives) with random variables."""
    schema = build_schema(SCHEMA_FILE.read_text())
    event_type = schema.get_type("JobEvent")
    assert event_type is not None
    queries = QueryGenerator(schema, world.values)
    rng = random.Random(SEED)
    the_runtime = world.runtime
    viewer = await the_runtime.auth.user(world.token)
    compared = 0
    for _ in range(EVENT_SELECTIONS):
        draft = queries.selection_of(rng, event_type)
        declared = "".join(f", ${name}: Boolean!" for name in draft.variables)
        head = f"subscription S($id: ID!{declared}) {{ jobEvents(jobId: $id) {draft.text} }}"
        text = " ".join([head, *draft.fragments])
        variables = {"id": world.finished_job, **draft.variables}
        streams = []
        for executor in ("standard", "fast"):
            context = Context(
                request=None,  # type: ignore[arg-type]
                response=None,
                runtime=the_runtime,
                loaders=Loaders(the_runtime.store, cache=False),
                user=viewer,
            )
            results = await schema_for(executor).subscribe(
                text, variable_values=variables, context_value=context
            )
            stream = []
            async for result in results:  # type: ignore[union-attr]
                errors = [(e.message, e.path) for e in result.errors or []]
                stream.append((result.data, errors))
            streams.append(stream)
        assert streams[0] == streams[1], text
        assert streams[0] and streams[0][-1][1] == []
        compared += len(streams[0])
    assert compared >= EVENT_SELECTIONS * 3  # every replay has the job's whole log
