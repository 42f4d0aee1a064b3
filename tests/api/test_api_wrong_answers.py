"""Wrong answers differential testing found (issue 18), each with the issue's own example,
run under the executor the tests are set to (scripts/test runs them under both)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from server.app.asgi import create_app
from server.store import Store
from tests.api_support import data, serving
from tests.marketplace_support import template
from tests.store_support import submit

pytestmark = pytest.mark.anyio
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def client(db_url: str, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(db_url=db_url, backend=None)) as http:
        yield http


async def test_a_field_error_beside_a_shared_loader_is_that_field_s_error_not_a_500(
    client: httpx.AsyncClient, store: Store
) -> None:
    # Both jobs' users come from one batch of the user loader; `a.events` fails with a bad
    # cursor, which nulls `a` and cancels what `a` still awaited, the shared user future
    # among them, which `b.user` awaits too.
    ann, token = store.create_user("ann")
    submit(store, ann.id, "x", T0)
    submit(store, ann.id, "y", T0)
    ids = await data(client, "{ jobs { edges { node { id name } } } }", token=token)
    by_name = {e["node"]["name"]: e["node"]["id"] for e in ids["jobs"]["edges"]}
    query = (
        "query($x: ID, $y: ID) { "
        'a: job(id: $x) { user { name } events(after: "bogus") { pageInfo { hasNextPage } } } '
        "b: job(id: $y) { name user { name } } }"
    )
    response = await client.post(
        "/graphql",
        json={"query": query, "variables": {"x": by_name["x"], "y": by_name["y"]}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"] == {"a": None, "b": {"name": "y", "user": {"name": "ann"}}}
    assert [e["path"] for e in body["errors"]] == [["a", "events"]]
    assert "after" in body["errors"][0]["message"]


async def test_star_then_unstar_in_one_request_answers_each_from_its_own_state(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, token = store.create_user("ann")
    published = await data(
        client,
        "mutation($c: String!) { publishMarketplaceItem(input: {content: $c}) "
        "{ item { id } errors { message } } }",
        {"c": template("hello")},
        token=token,
    )
    item_id = published["publishMarketplaceItem"]["item"]["id"]
    answer = await data(
        client,
        "mutation($id: ID!) { "
        "star: starMarketplaceItem(input: {id: $id}) { item { stars viewerHasStarred } } "
        "unstar: starMarketplaceItem(input: {id: $id, star: false}) "
        "{ item { stars viewerHasStarred } } }",
        {"id": item_id},
        token=token,
    )
    assert answer == {
        "star": {"item": {"stars": 1, "viewerHasStarred": True}},
        "unstar": {"item": {"stars": 0, "viewerHasStarred": False}},
    }


async def test_a_subscription_over_http_is_a_400_saying_to_use_the_websocket(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, token = store.create_user("ann")
    document = 'subscription { jobEvents(jobId: "x") { sequence } }'
    headers = {"Authorization": f"Bearer {token}"}
    posted = await client.post("/graphql", json={"query": document}, headers=headers)
    got = await client.get("/graphql", params={"query": document}, headers=headers)
    for response in (posted, got):
        assert response.status_code == 400, response.text
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST"
        assert "subscription" in error["message"]
        assert "websocket" in error["message"] and "graphql-transport-ws" in error["message"]
