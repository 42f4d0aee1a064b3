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

import asyncio
import os
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from graphql import build_schema

from server.api.context import Context
from server.api.ids import global_id
from server.api.jobs.types import event_cursor
from server.api.loaders import Loaders
from server.api.schema import executor_setting, schema_for
from server.events import JobNotice
from tests.api_support import finish, place_and_start
from tests.differential_support import SCHEMA_FILE, T0, World, ask, two_executors
from tests.query_generator import GeneratedSelection, QueryGenerator
from tests.store_support import submit
from tests.waiting import until_async

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        executor_setting() != "fast",
        reason="compares both executors itself; scripts/test's first pass runs it",
    ),
]
SEED = 18
DIFFERENTIAL_QUERIES = int(os.environ.get("PAIGRAPH_DIFFERENTIAL_QUERIES", "300"))
EVENT_SELECTIONS = 40
LIVE_SELECTIONS = 12


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with two_executors(tmp_path) as opened:
        yield opened


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


def event_subscription(draft: GeneratedSelection) -> str:
    """`jobEvents(jobId: $id, after: $after)` with the drawn selection of JobEvent."""
    declared = "".join(f", ${name}: Boolean!" for name in draft.variables)
    head = (
        f"subscription S($id: ID!, $after: String{declared}) "
        f"{{ jobEvents(jobId: $id, after: $after) {draft.text} }}"
    )
    return " ".join([head, *draft.fragments])


async def follow(
    world: World, executor: str, text: str, variables: dict[str, Any]
) -> list[tuple[Any, list[Any]]]:
    """Every result of the subscription until it ends (after the job's final state)."""
    viewer = await world.runtime.auth.user(world.token)
    context = Context(
        request=None,  # type: ignore[arg-type]
        response=None,
        runtime=world.runtime,
        loaders=Loaders(world.runtime.store, cache=False),
        user=viewer,
    )
    results = await schema_for(executor).subscribe(
        text, variable_values=variables, context_value=context
    )
    stream = []
    async for result in results:  # type: ignore[union-attr]
        stream.append((result.data, [(e.message, e.path) for e in result.errors or []]))
    return stream


def event_selections(
    world: World, count: int, *, field_conditions: bool = True
) -> list[GeneratedSelection]:
    schema = build_schema(SCHEMA_FILE.read_text())
    event_type = schema.get_type("JobEvent")
    assert event_type is not None
    queries = QueryGenerator(schema, world.values, field_conditions=field_conditions)
    rng = random.Random(SEED)
    return [queries.selection_of(rng, event_type) for _ in range(count)]


async def test_replayed_job_events_are_the_same_from_both_executors(world: World) -> None:
    """`jobEvents` of a finished job, from the start: the replay ends with its final state.
    Random selections of JobEvent (fragments, directives) with random variables."""
    compared = 0
    for draft in event_selections(world, EVENT_SELECTIONS):
        text = event_subscription(draft)
        variables = {"id": world.finished_job, "after": None, **draft.variables}
        fast = await follow(world, "fast", text, variables)
        assert fast == await follow(world, "standard", text, variables), text
        assert fast and fast[-1][1] == []
        compared += len(fast)
    assert compared >= EVENT_SELECTIONS * 3  # every replay has the job's whole log


async def test_live_subscribers_of_one_document_agree_with_the_standard_executor(
    world: World,
) -> None:
    """Two live subscribers of one document, with opposite values of its variables, woken by
    one notice: they share the rows read and the events made of them (and, with the fast
    executor, the completion of each event), and each must get what graphql-core's executor
    gives for its own variables (replayed afterwards)."""
    store, bus = world.runtime.store, world.runtime.bus
    owner = await world.runtime.auth.user(world.token)
    # Conditions on fragments only: a field with a directive of its own is never completed
    # in place, so these are the selections the fast executor's shared completion serves.
    drafts = event_selections(world, LIVE_SELECTIONS * 10, field_conditions=False)
    drafts = [d for d in drafts if d.variables]
    assert len(drafts) >= LIVE_SELECTIONS
    for n, draft in enumerate(drafts[:LIVE_SELECTIONS]):
        job, machine = submit(store, owner.id, f"live{n}", T0 + timedelta(hours=1, minutes=n))
        place_and_start(store, job.id, machine, T0 + timedelta(hours=1, minutes=n, seconds=5))
        stored = store.get_job(job.id)
        assert stored is not None
        base = {"id": global_id("Job", job.id), "after": event_cursor(stored.last_sequence)}
        flipped = {name: not value for name, value in draft.variables.items()}
        variable_sets = [{**base, **draft.variables}, {**base, **flipped}]
        text = event_subscription(draft)
        listening = getattr(bus, "local", bus).subscriber_count
        live = [asyncio.create_task(follow(world, "fast", text, v)) for v in variable_sets]
        await until_listening(bus, listening + 2)
        last = await asyncio.to_thread(
            finish, store, job.id, machine, T0 + timedelta(hours=1, minutes=n, seconds=30)
        )
        await bus.publish(JobNotice(job_id=job.id, sequence=last, state="SUCCEEDED"))
        streams = await asyncio.wait_for(asyncio.gather(*live), 30)
        for variables, stream in zip(variable_sets, streams, strict=True):
            assert stream == await follow(world, "standard", text, variables), (text, variables)
            assert stream and stream[-1][1] == []


async def until_listening(bus: Any, count: int) -> None:
    """Until `count` subscribers listen on the bus (the in-process one, else its local part)."""
    await until_async(
        lambda: getattr(bus, "local", bus).subscriber_count == count,
        f"{count} subscribers listening",
        30,
        0.01,
    )
