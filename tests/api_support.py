"""Running the API for tests: in-process over httpx, or a real uvicorn server on loopback for
websockets, with small GraphQL and graphql-transport-ws clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import websockets
from starlette.applications import Starlette

from backends.base import EventKind, Placement, utcnow
from server.api.context import Runtime
from server.app.serving import on_loopback
from server.jobs import JobMachine
from server.jobs.recorder import load_machine
from server.store import Store
from tests.store_support import feed


def runtime(app: Starlette) -> Runtime:
    return app.state.runtime.get()


@asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """The app started (its lifespan run) and an HTTP client that talks to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://paigraph") as client:
            yield client


@asynccontextmanager
async def live_server(app: Starlette) -> AsyncIterator[str]:
    """The app under a real uvicorn server on a free loopback port; yields its base URL."""
    async with on_loopback(app, log_level="warning", lifespan="on") as url:
        yield url


async def gql(
    client: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = None,
) -> dict[str, Any]:
    """The JSON answer to one GraphQL request (errors included), status 200 asserted."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await client.post(
        "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()


async def data(
    client: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = None,
) -> dict[str, Any]:
    """The `data` of an answer that must have no errors."""
    body = await gql(client, query, variables, token=token)
    assert "errors" not in body, body["errors"]
    return body["data"]


class WsError(Exception):
    """The server answered a subscription with an error message."""

    def __init__(self, payload: Any) -> None:
        super().__init__(json.dumps(payload))
        self.payload = payload


@asynccontextmanager
async def ws_connection(
    base_url: str, params: dict[str, Any] | None = None
) -> AsyncIterator[websockets.ClientConnection]:
    """A graphql-transport-ws connection, acknowledged (raises if the server closes it)."""
    url = base_url.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": params or {}}))
        ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert ack["type"] == "connection_ack", ack
        yield ws


async def subscription(
    ws: websockets.ClientConnection,
    query: str,
    variables: dict[str, Any],
    *,
    op_id: str = "1",
    timeout: float = 60.0,
) -> AsyncIterator[dict[str, Any]]:
    """The `data` of each `next` message until `complete`; an `error` raises WsError."""
    message = {
        "id": op_id,
        "type": "subscribe",
        "payload": {"query": query, "variables": variables},
    }
    await ws.send(json.dumps(message))
    while True:
        reply = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if reply["type"] == "ping":
            await ws.send(json.dumps({"type": "pong"}))
            continue
        if reply.get("id") != op_id:
            continue
        if reply["type"] == "complete":
            return
        if reply["type"] == "error":
            raise WsError(reply["payload"])
        assert reply["type"] == "next", reply
        if reply["payload"].get("errors"):
            raise WsError(reply["payload"]["errors"])
        yield reply["payload"]["data"]


async def collect(agen: AsyncIterator[dict[str, Any]], limit: int | None = None) -> list[Any]:
    items = []
    async for item in agen:
        items.append(item)
        if limit is not None and len(items) >= limit:
            with contextlib.suppress(Exception):
                await agen.aclose()  # type: ignore[attr-defined]
            break
    return items


def place_and_start(store: Store, job_id: str, machine: JobMachine, at: datetime) -> None:
    """Place every instance (with real-looking ports) and start it, and save that."""
    saved = len(machine.transitions)
    machine.start(at=at)
    for n, view in enumerate(list(machine.instances)):
        where = Placement(
            node=f"node-{n % 2}",
            host_ip=f"10.0.0.{n + 1}",
            ports={"ssh": [21000 + n], "http": [22000 + n]},
        )
        feed(machine, EventKind.PLACED, view.role, view.index, at, placement=where)
    for view in list(machine.instances):
        feed(machine, EventKind.STARTED, view.role, view.index, at + timedelta(seconds=1))
    store.save_machine(job_id, machine.snapshot(), machine.transitions[saved:])


def finish(store: Store, job_id: str, machine: JobMachine, at: datetime) -> int:
    """Let every instance exit with 0 (the job SUCCEEDS) and save that; the last sequence."""
    saved = len(machine.transitions)
    for view in list(machine.instances):
        if not view.state.is_final:
            feed(machine, EventKind.EXITED, view.role, view.index, at, exit_code=0)
    events = store.save_machine(job_id, machine.snapshot(), machine.transitions[saved:])
    return events[-1].sequence


async def finish_elsewhere(url: str, job_id: str) -> None:
    """What another server process does: finish the stored job, then NOTIFY its subscribers."""
    from server.events import JobNotice, bus_for
    from server.store import open_store

    store = open_store(url, upgrade=False)
    try:
        machine = JobMachine.restore(load_machine(store, job_id))
        sequence = finish(store, job_id, machine, utcnow())
    finally:
        store.close()
    bus = bus_for(url)
    try:
        await bus.publish(JobNotice(job_id=job_id, sequence=sequence, state="SUCCEEDED"))
    finally:
        await bus.close()


def every_field(type_name: str, depth: int = 6) -> str:
    """A selection of every field of `type_name` and, to `depth`, of the types it links to
    (fields that need arguments are left out): what "everything a client can read" is."""
    from graphql import GraphQLObjectType, get_named_type, is_leaf_type, is_non_null_type

    from server.api.schema import current_schema

    graphql_schema = current_schema()._schema

    def select(named: GraphQLObjectType, left: int) -> str:
        parts = []
        for name, field in named.fields.items():
            if any(is_non_null_type(arg.type) for arg in field.args.values()):
                continue  # it needs an argument
            inner = get_named_type(field.type)
            if is_leaf_type(inner):
                parts.append(name)
            elif isinstance(inner, GraphQLObjectType) and left > 0:
                parts.append(f"{name} {{ {select(inner, left - 1)} }}")
        return " ".join(parts) or "__typename"

    found = graphql_schema.get_type(type_name)
    assert isinstance(found, GraphQLObjectType)
    return select(found, depth)
