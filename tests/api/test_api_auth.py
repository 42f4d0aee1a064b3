"""Who may ask, and how much: tokens over HTTP and websockets, the local admin of a fresh
loopback server, body size and query shape limits."""

from __future__ import annotations

import json

import pytest
import websockets

from server.app.asgi import create_app
from server.store import Store
from tests.api_support import data, gql, live_server, serving, ws_connection

pytestmark = pytest.mark.anyio
VIEWER = "{ viewer { name admin } }"


async def test_a_fresh_loopback_server_treats_requests_as_the_local_admin_until_a_user_exists(
    db_url: str, store: Store
) -> None:
    async with serving(create_app(db_url=db_url, backend=None)) as client:
        assert (await data(client, VIEWER))["viewer"] == {"name": "local", "admin": True}
        assert (await data(client, VIEWER))["viewer"] == {"name": "local", "admin": True}
        _, token = store.create_user("ann")
        response = await client.post("/graphql", json={"query": VIEWER})
        assert response.status_code == 401
        assert (await data(client, VIEWER, token=token))["viewer"] == {
            "name": "ann",
            "admin": False,
        }


async def test_without_a_valid_token_http_gets_401_with_a_readable_error(
    db_url: str, store: Store
) -> None:
    store.create_user("ann")
    async with serving(create_app(db_url=db_url, backend=None)) as client:
        for headers in (
            {},
            {"Authorization": "Bearer pgt_not-a-token"},
            {"Authorization": "Basic YW5uOnB3"},
        ):
            response = await client.post("/graphql", json={"query": VIEWER}, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"] == "Bearer"
            (error,) = response.json()["errors"]
            assert error["extensions"]["code"] == "UNAUTHENTICATED"
            assert error["message"] in (
                "this server needs a token: send the header `Authorization: Bearer <token>` "
                "(a token comes from `paigraph users add NAME`)",
                "the token is not valid on this server",
                "the Authorization header must be `Bearer <token>`",
            )
        # a GET with a query is a request like any other
        response = await client.get("/graphql", params={"query": VIEWER})
        assert response.status_code == 401
        # the GraphiQL page itself is not (503 saying how to build it when the UI is not built)
        page = await client.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code in (200, 503) and "graphiql" in page.text.lower()


async def test_a_server_reachable_from_other_hosts_always_needs_a_token(db_url: str) -> None:
    async with serving(create_app(db_url=db_url, backend=None, host="0.0.0.0")) as client:
        response = await client.post("/graphql", json={"query": VIEWER})
        assert response.status_code == 401


async def test_websockets_authenticate_in_connection_init(db_url: str, store: Store) -> None:
    _, token = store.create_user("ann")
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url:
        for params in ({"Authorization": f"Bearer {token}"}, {"token": token}):
            async with ws_connection(url, params) as ws:
                await ws.send(
                    json.dumps({"id": "q", "type": "subscribe", "payload": {"query": VIEWER}})
                )
                reply = json.loads(await ws.recv())
                assert reply["payload"]["data"]["viewer"]["name"] == "ann"

        for params in ({}, {"token": "pgt_wrong"}, {"Authorization": "Bearer pgt_wrong"}):
            ws_url = url.replace("http://", "ws://") + "/graphql"
            async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": params}))
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == 4401, params


async def test_a_body_over_the_limit_gets_413_with_a_clear_message(db_url: str) -> None:
    async with serving(create_app(db_url=db_url, backend=None)) as client:
        config = "x" * (1024 * 1024 + 1)
        response = await client.post(
            "/graphql",
            json={
                "query": "mutation($c: String!) { resolveJob(input: {config: $c}) { errors "
                "{ code } } }",
                "variables": {"c": config},
            },
        )
        assert response.status_code == 413
        message = response.json()["errors"][0]["message"]
        assert message.startswith("the request body is larger than 1 MiB")


async def test_aliases_tokens_and_depth_are_limited(db_url: str) -> None:
    async with serving(create_app(db_url=db_url, backend=None)) as client:
        allowed = "{ " + " ".join(f"a{n}: viewer {{ name }}" for n in range(30)) + " }"
        assert "errors" not in await gql(client, allowed)
        aliases = "{ " + " ".join(f"a{n}: viewer {{ name }}" for n in range(31)) + " }"
        body = await gql(client, aliases)
        assert body["errors"][0]["message"] == (
            "the unnamed query uses 31 aliases, counting a fragment's once for every place it "
            "is spread; the alias limit of this server is 30"
        )
        assert body["errors"][0]["extensions"] == {"code": "TOO_MANY_ALIASES", "limit": 30}

        tokens = "{ viewer { " + " ".join("name" for _ in range(2100)) + " } }"
        body = await gql(client, tokens)
        assert "more than 2000 tokens" in body["errors"][0]["message"]

        def nested(levels: int) -> str:  # an item's roles' prerequisites' items, and so on
            inner = "name"
            for _ in range(levels):
                inner = f"marketplaceItem {{ taskRoles {{ prerequisites {{ {inner} }} }} }}"
            roles = f"taskRoles {{ prerequisites {{ {inner} }} }}"
            return f"{{ marketplaceItems {{ edges {{ node {{ {roles} }} }} }} }}"

        assert "errors" not in await gql(client, nested(2))  # depth 11
        body = await gql(client, nested(3))
        assert body["errors"][0]["message"] == (
            "the unnamed query is nested 14 levels deep; the query depth limit of this server is 12"
        )


async def test_a_fresh_loopback_server_accepts_websockets_without_a_token(db_url: str) -> None:
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url, ws_connection(url, {}) as ws:
        await ws.send(json.dumps({"id": "q", "type": "subscribe", "payload": {"query": VIEWER}}))
        reply = json.loads(await ws.recv())
    assert reply["payload"]["data"]["viewer"] == {"name": "local", "admin": True}


async def test_a_page_on_another_origin_cannot_open_a_websocket(db_url: str) -> None:
    """Browsers apply no CORS to websockets; without this a web page could act as the local
    admin of a fresh loopback server."""
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        ws_url = url.replace("http://", "ws://") + "/graphql"
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(
                ws_url, subprotocols=["graphql-transport-ws"], origin="http://evil.example"
            ):
                pass
        assert refused.value.response.status_code == 403
        async with websockets.connect(
            ws_url, subprotocols=["graphql-transport-ws"], origin=url
        ) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
