"""One small query must not freeze the server: a document whose fragments expand to billions
of fields is refused at once, over HTTP and over the websocket, under either executor, while
other clients are served; documents that are large but reasonable are still answered; and a
document the server cannot check within its deadline gets an error saying so, the server
answering others meanwhile. Against real `paigraph serve` processes, as an ordinary user."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.servers import Server, served

pytestmark = pytest.mark.anyio
VIEWER = "query Me { viewer { name } }"
FIELD_LIMIT = "the field limit of this server is 10,000"
# A real stall lasts minutes (25 doubling fragments froze a server for over 20); these bounds
# only tell a refusal from one.
PROMPT = 5.0


def doubling(fragments: int) -> str:
    """`F0` spreads `F1` twice, `F1` spreads `F2` twice, ...: about 1 KB for 20 fragments,
    2**fragments fields once expanded."""
    parts = [
        f"fragment F{n} on Query {{ viewer {{ name }} ...F{n + 1} ...F{n + 1} }}"
        for n in range(fragments - 1)
    ]
    parts.append(f"fragment F{fragments - 1} on Query {{ viewer {{ name }} }}")
    return "query Q { ...F0 } " + " ".join(parts)


@pytest.fixture(params=["fast", "standard"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A started server with the executor of the parameter, and an ordinary user's token."""
    with served("sqlite", tmp_path) as started:
        started.serve_args = ("--executor", request.param)
        started.start()
        added = started.paigraph("users", "add", "ann")
        assert added.returncode == 0, added.stderr
        yield started, added.stdout.strip()


async def post(client: httpx.AsyncClient, token: str, query: str) -> dict[str, Any]:
    response = await client.post(
        "/graphql",
        json={"query": query},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_document_of_doubling_fragments_is_refused_while_others_are_served(
    server: tuple[Server, str],
) -> None:
    started, token = server
    async with httpx.AsyncClient(base_url=started.url, timeout=60) as client:
        for fragments in (20, 25, 40):
            bad = asyncio.create_task(post(client, token, doubling(fragments)))
            health = await client.get("/health", timeout=PROMPT)
            assert health.status_code == 200
            other = await asyncio.wait_for(post(client, token, VIEWER), PROMPT)
            assert other == {"data": {"viewer": {"name": "ann"}}}
            refused = await asyncio.wait_for(bad, PROMPT)
            (error,) = refused["errors"]
            assert refused["data"] is None
            assert error["message"] == (
                f"query 'Q' asks for {2 ** (fragments + 1) - 2:,} fields, counting a "
                f"fragment's fields once for every place it is spread; {FIELD_LIMIT}"
            )
            assert error["extensions"] == {"code": "QUERY_TOO_LARGE", "limit": 10_000}


async def test_over_the_websocket_the_same_document_is_refused_and_the_connection_goes_on(
    server: tuple[Server, str],
) -> None:
    started, token = server
    url = started.url.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await asyncio.wait_for(ws.recv(), PROMPT))["type"] == "connection_ack"
        for op_id, query in (("bad", doubling(40)), ("good", VIEWER)):
            message = {"id": op_id, "type": "subscribe", "payload": {"query": query}}
            await ws.send(json.dumps(message))
        replies: dict[str, list[dict[str, Any]]] = {"bad": [], "good": []}
        while not replies["bad"] or len(replies["good"]) < 2:
            reply = json.loads(await asyncio.wait_for(ws.recv(), PROMPT))
            replies[reply["id"]].append(reply)
    ((refused,),) = (replies["bad"],)
    assert refused["type"] == "error"
    (error,) = refused["payload"]
    assert FIELD_LIMIT in error["message"]
    assert [r["type"] for r in replies["good"]] == ["next", "complete"]
    assert replies["good"][0]["payload"] == {"data": {"viewer": {"name": "ann"}}}


async def test_wide_and_deep_documents_within_the_limits_are_answered_and_aliases_count_per_spread(
    server: tuple[Server, str],
) -> None:
    started, token = server
    async with httpx.AsyncClient(base_url=started.url, timeout=60) as client:
        # nearly a thousand sibling spreads of one fragment: within the token limit, 1,980
        # fields counted, answered
        wide = "query W { " + "...V " * 990 + "} fragment V on Query { viewer { name } }"
        assert await post(client, token, wide) == {"data": {"viewer": {"name": "ann"}}}
        # two thousand: past the token limit, refused while parsing
        wider = "query W { " + "...V " * 2000 + "} fragment V on Query { viewer { name } }"
        body = await post(client, token, wider)
        assert "more than 2000 tokens" in body["errors"][0]["message"]

        # twelve levels of selections through fragments, the deepest allowed, then thirteen
        def level(name: str, inner: str) -> str:
            return (
                f"fragment {name} on MarketplaceItem "
                f"{{ taskRoles {{ prerequisites {{ marketplaceItem {{ {inner} }} }} }} }}"
            )

        deepest = " ".join(
            (
                "query D { marketplaceItems { edges { node { ...R } } } }",
                level("R", "...S"),
                level("S", "...T"),
                level("T", "id"),
            )
        )
        assert "errors" not in await post(client, token, deepest)
        too_deep = deepest.replace(
            "marketplaceItem { id }", "marketplaceItem { taskRoles { name } }"
        )
        body = await post(client, token, too_deep)
        assert body["errors"][0]["message"] == (
            "query 'D' is nested 13 levels deep; the query depth limit of this server is 12"
        )

        # a costly field under ten aliases, in a fragment spread four times: 40 aliases
        jobs = " ".join(
            f"j{n}: jobs(first: 100) {{ edges {{ node {{ id }} }} }}" for n in range(10)
        )
        aliased = (
            f"query A {{ ...J ...K }} fragment J on Query {{ {jobs} }} "
            "fragment K on Query { viewer { name } ...J ...J ...J }"
        )
        body = await post(client, token, aliased)
        assert body["data"] is None
        assert body["errors"][0]["message"] == (
            "query 'A' uses 40 aliases, counting a fragment's once for every place it is "
            "spread; the alias limit of this server is 30"
        )


async def test_a_document_not_checked_within_the_deadline_gets_an_error_saying_so(
    tmp_path: Path,
) -> None:
    with served("sqlite", tmp_path) as started:
        # far below what checking the document below takes (its 450 sibling fields are
        # compared pairwise by the specification's overlapping-fields rule)
        started.settings["PAIGRAPH_QUERY_CHECK_SECONDS"] = "0.01"
        started.start()
        slow = "query S { " + "viewer { name } " * 450 + "}"
        async with httpx.AsyncClient(base_url=started.url, timeout=60) as client:
            bad = asyncio.create_task(client.post("/graphql", json={"query": slow}))
            health = await client.get("/health", timeout=PROMPT)
            assert health.status_code == 200
            response = await asyncio.wait_for(bad, PROMPT)
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "QUERY_CHECK_TIMEOUT"
        assert error["message"] == (
            "the server could not check this query within 0.01 seconds (its limit for parsing "
            "and validating a query, PAIGRAPH_QUERY_CHECK_SECONDS); send a smaller query, or "
            "split it"
        )
