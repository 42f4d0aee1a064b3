"""What a hostile client meets at /graphql: pages on other sites reaching the local admin,
oversized websocket messages, too many subscriptions, malformed bodies, and what the server
logs for them. Every test talks to a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from server.app import create_app
from server.store import Store
from tests.api_support import live_server, ws_connection

pytestmark = pytest.mark.anyio
VIEWER = "{ viewer { name admin } }"


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


async def post_viewer(url: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url) as client:
        return await client.post("/graphql", json={"query": VIEWER}, headers=headers)


async def handshake_status(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """The status and body of a websocket handshake sent with exactly these extra headers
    (Host among them: a browser led here by DNS sends the name it looked up)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /graphql HTTP/1.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: graphql-transport-ws",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
    status = int(head.split(" ", 2)[1])
    body = ""
    length = [line for line in head.split("\r\n") if line.lower().startswith("content-length:")]
    if length:
        body = (await reader.readexactly(int(length[0].split(":")[1]))).decode()
    writer.close()
    return status, body


# --- the local admin of a fresh loopback server -------------------------------------------


async def test_a_request_naming_another_host_cannot_act_as_the_local_admin(db_url: str) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        refused = await post_viewer(url, {"Host": "attacker.example"})
        assert refused.status_code == 403
        (error,) = refused.json()["errors"]
        assert error["message"] == (
            "Host 'attacker.example' is not this server's loopback address; "
            "the local admin serves loopback clients only"
        )
        wrong_port = await post_viewer(url, {"Host": f"localhost:{port_of(url) + 1}"})
        assert wrong_port.status_code == 403
        for host in (f"localhost:{port_of(url)}", "localhost", f"127.0.0.1:{port_of(url)}"):
            allowed = await post_viewer(url, {"Host": host})
            assert allowed.status_code == 200, host
            assert allowed.json()["data"]["viewer"] == {"name": "local", "admin": True}


async def test_a_browser_page_on_another_origin_cannot_act_as_the_local_admin(
    db_url: str,
) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        port = port_of(url)
        refused = await post_viewer(url, {"Origin": f"http://attacker.example:{port}"})
        assert refused.status_code == 403
        message = refused.json()["errors"][0]["message"]
        assert message.startswith(f"Origin 'http://attacker.example:{port}' is not this server's")
        other_port = await post_viewer(url, {"Origin": f"http://127.0.0.1:{port + 1}"})
        assert other_port.status_code == 403
        for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
            page = await post_viewer(url, {"Origin": origin})
            assert page.json()["data"]["viewer"]["name"] == "local", origin
        # a tool that is no browser sends no Origin and goes on working
        assert (await post_viewer(url, {})).json()["data"]["viewer"]["name"] == "local"


async def test_a_rebound_websocket_is_refused_with_the_reason(db_url: str) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        # DNS rebinding: the page's origin and the Host agree, but neither is this server
        rebound = {"Host": "attacker.example:80", "Origin": "http://attacker.example"}
        status, body = await handshake_status(url, rebound)
        assert status == 403
        assert "'attacker.example:80' is not this server's loopback address" in body
        status, _ = await handshake_status(url, {"Host": f"localhost:{port_of(url)}"})
        assert status == 101
        async with ws_connection(url, {}) as ws:  # the usual client still gets in
            subscribe = {"id": "q", "type": "subscribe", "payload": {"query": VIEWER}}
            await ws.send(json.dumps(subscribe))
            reply = json.loads(await ws.recv())
        assert reply["payload"]["data"]["viewer"]["name"] == "local"


async def test_once_tokens_are_required_the_host_no_longer_matters(
    db_url: str, store: Store
) -> None:
    _, token = store.create_user("ann")
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        anonymous = await post_viewer(url, {"Host": "paigraph.example"})
        assert anonymous.status_code == 401
        proxied = await post_viewer(
            url, {"Host": "paigraph.example", "Authorization": f"Bearer {token}"}
        )
        assert proxied.json()["data"]["viewer"]["name"] == "ann"


# --- websocket messages -------------------------------------------------------------------


async def closed_by_server(ws: websockets.ClientConnection) -> websockets.frames.Close:
    """The close frame the server sent (after whatever it sent before it)."""
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd


async def test_a_websocket_message_over_the_body_limit_closes_the_connection(
    db_url: str,
) -> None:
    big = json.dumps({"id": "q", "type": "subscribe", "payload": {"query": "#" * (1 << 20)}})
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        async with ws_connection(url, {}) as ws:
            await ws.send(big)
            close = await closed_by_server(ws)
        assert (close.code, close.reason) == (4413, "a message may be at most 1 MiB")
        async with ws_connection(url, {}) as ws:  # far over: cut off while it arrives
            with contextlib.suppress(websockets.ConnectionClosed):
                await ws.send("x" * 12_000_000)
            assert (await closed_by_server(ws)).code in (1009, 4413)
        async with ws_connection(url, {}) as ws:  # the server goes on serving
            subscribe = {"id": "q", "type": "subscribe", "payload": {"query": VIEWER}}
            await ws.send(json.dumps(subscribe))
            reply = json.loads(await ws.recv())
        assert reply["payload"]["data"]["viewer"]["name"] == "local"
