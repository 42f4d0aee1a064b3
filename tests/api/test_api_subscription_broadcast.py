"""Subscribers alike share one frame per change (server.api.broadcast), over real websockets
on SQLite and PostgreSQL: every one gets the same payload under its own operation id, a viewer
who may not read the job gets none, and a subscriber that stops reading neither holds up the
others nor loses anything once it resumes from its cursor."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import websockets

from server.api.broadcast import FELL_BEHIND
from server.api.ids import global_id
from server.api.jobs.types import event_cursor
from server.app.asgi import create_app
from server.events import JobNotice
from server.shapes.values import NewEvent
from server.store import Store
from tests.api.test_api_subscription_fanout import end_next_instance
from tests.api_support import live_server, place_and_start, runtime, ws_connection
from tests.store_support import submit
from tests.waiting import until_async

pytestmark = pytest.mark.anyio
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { cursor sequence type state message }
}
"""


async def subscribe(ws: websockets.ClientConnection, op_id: str, variables: dict[str, Any]) -> None:
    payload = {"query": JOB_EVENTS, "variables": variables}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))


async def frames(ws: websockets.ClientConnection, into: list[dict[str, Any]]) -> None:
    """Every message of the connection but pings, as it arrives, until it closes."""
    async for raw in ws:
        message = json.loads(raw)
        if message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
        else:
            into.append(message)


def sequences(messages: list[dict[str, Any]]) -> list[int]:
    return [m["payload"]["data"]["jobEvents"]["sequence"] for m in messages if m["type"] == "next"]


async def followed_job(store: Store, owner_id: int, name: str) -> tuple[Any, Any, str]:
    job, machine = submit(store, owner_id, name, T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    stored = store.get_job(job.id)
    assert stored is not None
    return job, machine, event_cursor(stored.last_sequence)


async def test_subscribers_alike_get_the_same_payload_under_their_own_ids(
    db_url: str, store: Store
) -> None:
    ann, token = store.create_user("ann")
    job, machine, after = await followed_job(store, ann.id, "shared")
    variables = {"jobId": global_id("Job", job.id), "after": after}
    app = create_app(db_url=db_url, backend=None)
    received: list[list[dict[str, Any]]] = [[] for _ in range(6)]
    async with live_server(app) as url, AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(ws_connection(url, {"token": token})) for _ in received
        ]
        readers = [
            asyncio.create_task(frames(ws, into))
            for ws, into in zip(sockets, received, strict=True)
        ]
        for n, ws in enumerate(sockets):
            await subscribe(ws, f"op-{n}", variables)
        await until_async(lambda: runtime(app).broadcasts.members == 6, "all subscribed", 30, 0.01)
        last = await asyncio.to_thread(end_next_instance, store, machine, T0 + timedelta(minutes=1))
        await runtime(app).bus.publish(
            JobNotice(job_id=job.id, sequence=last, state=machine.state.value)
        )
        await until_async(
            lambda: all(sequences(seen)[-1:] == [last] for seen in received),
            "every subscriber has the change",
            30,
            0.01,
        )
        for reader in readers:
            reader.cancel()

    first = received[0]
    assert sequences(first) and sequences(first)[-1] == last
    for n, seen in enumerate(received):
        assert {m["id"] for m in seen} == {f"op-{n}"}
        assert [m["payload"] for m in seen] == [m["payload"] for m in first]


async def test_a_viewer_who_may_not_read_the_job_gets_no_frames_of_it(
    db_url: str, store: Store
) -> None:
    ann, ann_token = store.create_user("ann")
    _, bob_token = store.create_user("bob")
    _, root_token = store.create_user("root", admin=True)
    job, machine, after = await followed_job(store, ann.id, "private")
    variables = {"jobId": global_id("Job", job.id), "after": after}
    app = create_app(db_url=db_url, backend=None, job_visibility="own")
    tokens = {"ann": ann_token, "ann again": ann_token, "root": root_token, "bob": bob_token}
    received: dict[str, list[dict[str, Any]]] = {name: [] for name in tokens}
    async with live_server(app) as url, AsyncExitStack() as stack:
        for name, token in tokens.items():
            ws = await stack.enter_async_context(ws_connection(url, {"token": token}))
            stack.callback(asyncio.create_task(frames(ws, received[name])).cancel)
            await subscribe(ws, "1", variables)
        await until_async(
            lambda: received["bob"] and runtime(app).broadcasts.members == 3,
            "bob refused, the others subscribed",
            30,
            0.01,
        )
        last = await asyncio.to_thread(end_next_instance, store, machine, T0 + timedelta(minutes=1))
        await runtime(app).bus.publish(
            JobNotice(job_id=job.id, sequence=last, state=machine.state.value)
        )
        readers = ("ann", "ann again", "root")
        await until_async(
            lambda: all(sequences(received[name])[-1:] == [last] for name in readers),
            "the readers have the change",
            30,
            0.01,
        )

    refusal, end = received["bob"]  # graphql-transport-ws: the resolver's error, then the end
    assert refusal["type"] == "next" and refusal["payload"]["data"] is None
    assert refusal["payload"]["errors"][0]["message"] == "jobId: no job has that ID"
    assert end == {"id": "1", "type": "complete"}
    assert received["ann"] == received["ann again"] == received["root"]


@asynccontextmanager
async def reluctant_reader(base_url: str, token: str) -> AsyncIterator[websockets.ClientConnection]:
    """A connection whose client takes frames only when asked to (`recv`): a small receive
    buffer, and the websockets library reads ahead one message at most."""
    where = urlsplit(base_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (where.hostname, where.port))
    url = base_url.replace("http://", "ws://") + "/graphql"
    async with websockets.connect(
        url, sock=sock, subprotocols=["graphql-transport-ws"], max_queue=1, max_size=None
    ) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {"token": token}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        yield ws


async def test_a_subscriber_that_stops_reading_holds_no_one_up_and_resumes_from_its_cursor(
    db_url: str, store: Store
) -> None:
    ann, token = store.create_user("ann")
    job, _, after = await followed_job(store, ann.id, "busy")
    variables = {"jobId": global_id("Job", job.id), "after": after}
    app = create_app(db_url=db_url, backend=None)
    notes = [
        NewEvent(type="NOTE", at=T0 + timedelta(minutes=1), message=f"{n} " + "x" * 16_000)
        for n in range(400)  # more than the kernel's socket buffers take in
    ]
    fast: list[dict[str, Any]] = []
    async with live_server(app) as url:
        runtime(app).outbox_limit = 64 * 1024  # four of those events
        async with (
            ws_connection(url, {"token": token}) as quick,
            reluctant_reader(url, token) as slow,
        ):
            reader = asyncio.create_task(frames(quick, fast))
            await subscribe(slow, "slow", variables)
            await subscribe(quick, "quick", variables)
            await until_async(lambda: runtime(app).broadcasts.members == 2, "subscribed", 30, 0.01)
            saved = await asyncio.to_thread(store.append_events, job.id, notes)
            last = saved[-1].sequence
            await runtime(app).bus.publish(JobNotice(job_id=job.id, sequence=last, state="RUNNING"))
            # the quick one has everything while the slow one has not read a thing
            await until_async(
                lambda: sequences(fast)[-1:] == [last], "the quick one is done", 60, 0.01
            )
            reader.cancel()

            taken: list[dict[str, Any]] = []
            while not taken or taken[-1]["type"] == "next":
                taken.append(json.loads(await asyncio.wait_for(slow.recv(), 30)))
            told = taken[-1]
            assert told["id"] == "slow" and told["type"] == "error"
            assert told["payload"][0]["extensions"]["code"] == FELL_BEHIND
            got = sequences(taken)
            resume = taken[-2]["payload"]["data"]["jobEvents"]["cursor"] if got else after
            await subscribe(slow, "slow", {**variables, "after": resume})
            rest: list[dict[str, Any]] = []
            while sequences(rest)[-1:] != [last]:
                rest.append(json.loads(await asyncio.wait_for(slow.recv(), 30)))

    everything = [event.sequence for event in saved]
    assert sequences(fast) == everything
    assert len(got) < len(everything)  # it did fall behind
    assert got + sequences(rest) == everything  # and lost nothing


async def test_a_newcomer_at_the_cursor_a_group_stands_at_joins_it_and_an_earlier_one_replays(
    db_url: str, store: Store
) -> None:
    ann, token = store.create_user("ann")
    job, machine, after = await followed_job(store, ann.id, "joined")
    job_id = global_id("Job", job.id)
    app = create_app(db_url=db_url, backend=None)
    first: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    replaying: list[dict[str, Any]] = []

    async def change(minute: int) -> int:
        last = await asyncio.to_thread(
            end_next_instance, store, machine, T0 + timedelta(minutes=minute)
        )
        await runtime(app).bus.publish(
            JobNotice(job_id=job.id, sequence=last, state=machine.state.value)
        )
        return last

    async with live_server(app) as url, AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(ws_connection(url, {"token": token})) for _ in "abc"
        ]
        for ws, into in zip(sockets, (first, later, replaying), strict=True):
            stack.callback(asyncio.create_task(frames(ws, into)).cancel)
        bus = runtime(app).bus
        await subscribe(sockets[0], "1", {"jobId": job_id, "after": after})
        await until_async(lambda: runtime(app).broadcasts.members == 1, "subscribed", 30, 0.01)
        one = await change(1)
        await until_async(lambda: sequences(first)[-1:] == [one], "the first change", 30, 0.01)
        cursor = first[-1]["payload"]["data"]["jobEvents"]["cursor"]
        await subscribe(sockets[1], "1", {"jobId": job_id, "after": cursor})
        await subscribe(sockets[2], "1", {"jobId": job_id, "after": after})
        await until_async(
            lambda: runtime(app).broadcasts.members == 3 and sequences(replaying)[-1:] == [one],
            "the newcomers subscribed, the earlier one replayed",
            30,
            0.01,
        )
        listening = getattr(bus, "local", bus).subscriber_count
        two = await change(2)
        await until_async(
            lambda: all(sequences(seen)[-1:] == [two] for seen in (first, later, replaying)),
            "everyone has the second change",
            30,
            0.01,
        )

    assert listening == 2  # the newcomer at the group's cursor joined it; the other replays
    caught_up = len(first) - len(later)
    assert [m["payload"] for m in later] == [m["payload"] for m in first[caught_up:]]
    assert sequences(replaying) == sequences(first)
    assert sequences(later)[0] == sequences(first)[caught_up - 1] + 1
