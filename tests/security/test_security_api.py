"""What a hostile client meets at /graphql: pages on other sites reaching the local admin,
oversized websocket messages, too many subscriptions, malformed bodies, and what the server
logs for them. Every test talks to a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from server.api.ids import global_id
from server.app.asgi import create_app
from server.events import JobNotice
from server.store import Store
from tests.api_support import finish, live_server, place_and_start, runtime, ws_connection
from tests.marketplace_support import template
from tests.store_support import submit

pytestmark = pytest.mark.anyio
VIEWER = "{ viewer { name admin } }"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB_EVENTS = "subscription($jobId: ID!) { jobEvents(jobId: $jobId) { sequence state } }"


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


# --- subscriptions at once ----------------------------------------------------------------


async def replies(ws: websockets.ClientConnection, ids: set[str], kind: str) -> list[dict]:
    """Read until a message of type `kind` came for each of `ids`; all messages read."""
    waiting, seen = set(ids), []
    while waiting:
        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
        seen.append(reply)
        if reply.get("type") == kind:
            waiting.discard(reply.get("id"))
    return seen


async def follow(ws: websockets.ClientConnection, job_id: str, ids: list[str]) -> None:
    """Subscribe to the job's events under each id, and wait until each delivered one."""
    for op_id in ids:
        payload = {"query": JOB_EVENTS, "variables": {"jobId": global_id("Job", job_id)}}
        await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))
    await replies(ws, set(ids), "next")


async def refused(ws: websockets.ClientConnection, job_id: str, op_id: str) -> str:
    """The message of the error a subscription over a limit gets."""
    payload = {"query": JOB_EVENTS, "variables": {"jobId": global_id("Job", job_id)}}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))
    (reply,) = [r for r in await replies(ws, {op_id}, "error") if r.get("id") == op_id]
    return reply["payload"][0]["message"]


async def test_one_connection_runs_at_most_100_subscriptions(db_url: str, store: Store) -> None:
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "followed", T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    app = create_app(db_url=db_url, backend=None)
    async with live_server(app) as url, ws_connection(url, {"token": token}) as ws:
        first = [f"s{n}" for n in range(100)]
        await follow(ws, job.id, first)
        message = await refused(ws, job.id, "s100")
        assert "(limit 100)" in message and "this connection runs 100 subscriptions" in message
        # completing one makes room for another
        await ws.send(json.dumps({"id": "s0", "type": "complete"}))
        await follow(ws, job.id, ["s101"])
        # and the running ones go on: each follows the job to its end
        last = await asyncio.to_thread(finish, store, job.id, machine, T0 + timedelta(minutes=1))
        await runtime(app).bus.publish(JobNotice(job_id=job.id, sequence=last, state="SUCCEEDED"))
        ended = await replies(ws, {*first[1:], "s101"}, "complete")
    finals = {
        r["id"]
        for r in ended
        if r["type"] == "next" and r["payload"]["data"]["jobEvents"]["state"] == "SUCCEEDED"
    }
    assert finals == {*first[1:], "s101"}


async def test_one_user_runs_at_most_500_subscriptions_over_all_connections(
    db_url: str, store: Store
) -> None:
    ann, ann_token = store.create_user("ann")
    _, bob_token = store.create_user("bob")
    job, _ = submit(store, ann.id, "followed", T0)
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        async with contextlib.AsyncExitStack() as stack:
            for c in range(5):
                ws = await stack.enter_async_context(ws_connection(url, {"token": ann_token}))
                await follow(ws, job.id, [f"c{c}-{n}" for n in range(100)])
            sixth = await stack.enter_async_context(ws_connection(url, {"token": ann_token}))
            message = await refused(sixth, job.id, "one-more")
            assert "you run 500 subscriptions over all your connections" in message
            assert "(limit 500)" in message
            other = await stack.enter_async_context(ws_connection(url, {"token": bob_token}))
            await follow(other, job.id, ["bob"])  # another user is not held to ann's count
        # ann's connections closed: her subscriptions ended and count no more
        async with ws_connection(url, {"token": ann_token}) as ws:
            await follow(ws, job.id, ["again"])


# --- malformed requests -------------------------------------------------------------------


@contextlib.contextmanager
def server_log() -> Iterator[list[logging.LogRecord]]:
    """What the server (uvicorn, strawberry, ours) logs in the block, at every level. Enter it
    once the server runs: uvicorn replaces the handlers of its loggers when it starts."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    root = logging.getLogger()
    level = root.level
    loggers = [root, logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.setLevel(level)
        for logger in loggers:
            logger.removeHandler(handler)


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= logging.ERROR or r.exc_info]


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


async def test_malformed_requests_get_400_naming_the_problem_and_log_no_traceback(
    db_url: str,
) -> None:
    viewer = json.dumps(VIEWER)
    bodies = {
        b"12": "the request body must be a JSON object",
        b'{"query": "\xff\xfe"}': "the request body is not UTF-8 text (byte 0xff at offset 11)",
        nested(500_000).encode(): "the request body nests JSON more than 64 levels deep",
        f'{{"query": {viewer}, "variables": {{"v": {nested(60_000)}}}}}'.encode(): (
            "the request body nests JSON more than 64 levels deep"
        ),
        f'{{"query": {viewer}, "variables": {{"v": {nested(900)}}}}}'.encode(): (
            "the request body nests JSON more than 64 levels deep"
        ),
        f'{{"query": {viewer}, "variables": 5}}'.encode(): "`variables` must be a JSON object",
        b'{"query": ': "the request body is not valid JSON",
    }
    async with (
        live_server(create_app(db_url=db_url, backend=None)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        with server_log() as logged:
            for body, expected in bodies.items():
                response = await client.post(
                    "/graphql", content=body, headers={"Content-Type": "application/json"}
                )
                assert response.status_code == 400, body[:40]
                (error,) = response.json()["errors"]
                assert error["message"].startswith(expected), error["message"]
            variables = nested(5000)
            deep = await client.get("/graphql", params={"query": VIEWER, "variables": variables})
            assert deep.status_code == 400
            assert deep.json()["errors"][0]["message"].startswith("the `variables` parameter")
        fine = await client.post("/graphql", json={"query": VIEWER, "variables": {"v": [[1]]}})
        assert fine.json()["data"]["viewer"]["name"] == "local"
    assert tracebacks(logged) == []


async def test_a_client_leaving_mid_body_is_one_quiet_log_line(db_url: str) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        with server_log() as logged:
            for _ in range(3):
                _, writer = await asyncio.open_connection(parts.hostname, parts.port)
                writer.write(
                    f"POST /graphql HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                    '{"query": '.encode()
                )
                await writer.drain()
                await asyncio.sleep(0.2)  # the server reads what came, then waits for the rest
                writer.close()
            await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=url) as client:  # and serves the next one
            answer = await client.post("/graphql", json={"query": VIEWER})
        assert answer.json()["data"]["viewer"]["name"] == "local"
    assert tracebacks(logged) == []
    left = [r for r in logged if "left before sending all of its request body" in r.msg]
    assert len(left) == 3 and all(r.levelno <= logging.INFO for r in left)


async def test_a_document_of_two_operations_needs_an_operation_name(db_url: str) -> None:
    two = "query Name { viewer { name } } query Admin { viewer { admin } }"
    standard = "Must provide operation name if query contains multiple operations."
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            unnamed = (await client.post("/graphql", json={"query": two})).json()
            assert unnamed["data"] is None
            assert [e["message"] for e in unnamed["errors"]] == [standard]
            for name, field, value in (("Name", "name", "local"), ("Admin", "admin", True)):
                chosen = await client.post("/graphql", json={"query": two, "operationName": name})
                assert chosen.json() == {"data": {"viewer": {field: value}}}
            again = (await client.post("/graphql", json={"query": two})).json()
            assert [e["message"] for e in again["errors"]] == [standard]
        async with ws_connection(url, {}) as ws:
            await ws.send(json.dumps({"id": "q", "type": "subscribe", "payload": {"query": two}}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert reply["type"] == "error" and reply["payload"][0]["message"] == standard


# --- what errors tell -----------------------------------------------------------------------

PUBLISH = """
mutation($input: PublishMarketplaceItemInput!) {
  publishMarketplaceItem(input: $input) { outcome errors { path code message } }
}"""


async def test_a_taken_name_reveals_nothing_of_a_private_item(db_url: str, store: Store) -> None:
    tokens = {name: store.create_user(name)[1] for name in ("ann", "bob")}

    async def publish(user: str, name: str, visibility: str) -> dict:
        variables = {"input": {"content": template(name), "visibility": visibility}}
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.post(
                "/graphql",
                json={"query": PUBLISH, "variables": variables},
                headers={"Authorization": f"Bearer {tokens[user]}"},
            )
        return answer.json()["data"]["publishMarketplaceItem"]

    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        assert (await publish("ann", "hidden-plan", "PRIVATE"))["errors"] == []
        assert (await publish("ann", "open-plan", "PUBLIC"))["errors"] == []
        private = await publish("bob", "hidden-plan", "PUBLIC")
        public = await publish("bob", "open-plan", "PUBLIC")
    assert private["errors"] == [
        {
            "path": ["content", "name"],
            "code": "name-taken",
            "message": "the name 'hidden-plan' is taken; publish under another name",
        }
    ]
    # the answer for a private item's name is the one for any taken name
    assert (
        public["errors"][0]["message"].replace("open-plan", "hidden-plan")
        == (private["errors"][0]["message"])
    )
    assert "ann" not in private["errors"][0]["message"]


async def test_a_json_config_with_a_key_given_twice_is_refused_over_the_api(db_url: str) -> None:
    config = '{"protocolVersion": 2,\n "name": "a",\n "name": "b", "taskRoles": {}}'
    query = "mutation($c: String!) { resolveJob(input: {config: $c}) { errors { code message } } }"
    async with (
        live_server(create_app(db_url=db_url, backend=None)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        answer = await client.post("/graphql", json={"query": query, "variables": {"c": config}})
    (error,) = answer.json()["data"]["resolveJob"]["errors"]
    assert error == {
        "code": "json-duplicate-key",
        "message": "invalid JSON at line 3, column 2: duplicate key 'name' (an object may hold "
        "each key once)",
    }


# --- files ----------------------------------------------------------------------------------


async def test_the_sqlite_database_a_server_creates_is_readable_by_its_owner_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "paigraph.db"
    before = os.umask(0o022)  # the usual umask, under which files come out world-readable
    try:
        app = create_app(db_url=f"sqlite:///{path}", backend=None)
        async with live_server(app) as url:
            answer = await post_viewer(url, {})
            assert answer.json()["data"]["viewer"]["name"] == "local"
            made = sorted(p.name for p in tmp_path.iterdir())
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        os.umask(before)
    assert "paigraph.db" in made and "paigraph.db-wal" in made
    assert modes == dict.fromkeys(made, 0o600)
