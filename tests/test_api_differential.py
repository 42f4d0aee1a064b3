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

import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from graphql import build_schema

from server.api.context import Context
from server.api.loaders import Loaders
from server.api.schema import executor_setting, schema_for
from tests.differential_support import SCHEMA_FILE, World, ask, two_executors
from tests.query_generator import QueryGenerator

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
