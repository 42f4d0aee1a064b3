"""Many subscribers of one job over real websockets, on SQLite and PostgreSQL: each gets every
event once and in order up to the final state, and a change is read from the event log once
for all of them rather than once per subscriber."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import pytest
import websockets

from backends.base import EventKind, InstanceEvent
from server.api.ids import global_id
from server.api.jobs.types import event_cursor
from server.app.asgi import create_app
from server.events import JobNotice
from server.jobs import JobMachine
from server.store import Store
from tests.api_support import live_server, place_and_start, runtime, subscription, ws_connection
from tests.store_support import StatementLog, submit
from tests.waiting import until_async

pytestmark = pytest.mark.anyio
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SUBSCRIBERS = 20
JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { sequence state }
}
"""


def end_next_instance(store: Store, machine: JobMachine, at: datetime) -> int:
    """Let the first instance still running exit with 0, save that; the last sequence."""
    view = next(v for v in machine.instances if not v.state.is_final)
    saved = len(machine.transitions)
    machine.apply(
        InstanceEvent(
            job_id=machine.job_id,
            attempt=machine.attempt,
            kind=EventKind.EXITED,
            role=view.role,
            index=view.index,
            at=at,
            exit_code=0,
        )
    )
    events = store.save_machine(machine.job_id, machine.snapshot(), machine.transitions[saved:])
    return events[-1].sequence


async def test_every_subscriber_gets_every_event_and_a_change_is_read_once(
    db_url: str, store: Store
) -> None:
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "watched", T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    stored = store.get_job(job.id)
    assert stored is not None
    variables = {"jobId": global_id("Job", job.id), "after": event_cursor(stored.last_sequence)}
    app = create_app(db_url=db_url, backend=None)
    received: list[list[tuple[int, str | None]]] = [[] for _ in range(SUBSCRIBERS)]

    async def follow(ws: websockets.ClientConnection, into: list[tuple[int, str | None]]) -> None:
        async for item in subscription(ws, JOB_EVENTS, variables):
            into.append((item["jobEvents"]["sequence"], item["jobEvents"]["state"]))

    def everyone_has(sequence: int) -> bool:
        return all(seen and seen[-1][0] >= sequence for seen in received)

    async def change(minute: int) -> int:
        last = await asyncio.to_thread(
            end_next_instance, store, machine, T0 + timedelta(minutes=minute)
        )
        bus = runtime(app).bus
        await bus.publish(JobNotice(job_id=job.id, sequence=last, state=machine.state.value))
        await until_async(
            lambda: everyone_has(last), "every subscriber has the last event", 30, 0.01
        )
        return last

    async with live_server(app) as url, AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(ws_connection(url, {"token": token}))
            for _ in range(SUBSCRIBERS)
        ]
        pairs = zip(sockets, received, strict=True)
        tasks = [asyncio.create_task(follow(ws, into)) for ws, into in pairs]
        await until_async(
            lambda: runtime(app).broadcasts.members == SUBSCRIBERS,
            "every subscriber listening",
            30,
            0.01,
        )
        await change(1)  # after it, every subscriber is waiting for the next notice
        log = StatementLog(runtime(app).store.engine)
        changes, last = 1, 0
        try:
            while not machine.is_final:
                changes += 1
                last = await change(changes)
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
        finally:
            log.close()

    assert changes >= 2 and machine.state.value == "SUCCEEDED"
    expected = list(range(stored.last_sequence + 1, last + 1))
    for seen in received:
        assert [sequence for sequence, _ in seen] == expected
        assert seen[-1][1] == "SUCCEEDED"
    log_reads = [s for s in log.statements if "FROM job_events" in s]
    assert 1 <= len(log_reads) < SUBSCRIBERS  # per change one read, not one per subscriber


async def test_subscribers_of_one_document_with_different_variables_get_their_own_shape(
    db_url: str, store: Store
) -> None:
    # One document, so one parsed query shared by both; `withText` decides whether the
    # fragment's fields are collected. A shared completion keyed by the field's nodes alone
    # gave one subscriber the other's shape.
    document = """
    subscription S($id: ID!, $after: String, $withText: Boolean!) {
      jobEvents(jobId: $id, after: $after) {
        sequence ... @include(if: $withText) { type message }
      }
    }
    """
    ann, token = store.create_user("ann")
    job, machine = submit(store, ann.id, "watched", T0)
    place_and_start(store, job.id, machine, T0 + timedelta(seconds=5))
    stored = store.get_job(job.id)
    assert stored is not None
    after = event_cursor(stored.last_sequence)
    app = create_app(db_url=db_url, backend=None)
    received: dict[bool, list[dict[str, object]]] = {True: [], False: []}

    async def follow(ws: websockets.ClientConnection, with_text: bool) -> None:
        variables = {"id": global_id("Job", job.id), "after": after, "withText": with_text}
        async for item in subscription(ws, document, variables):
            received[with_text].append(item["jobEvents"])

    async with live_server(app) as url, AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(ws_connection(url, {"token": token})) for _ in "ab"
        ]
        tasks = [
            asyncio.create_task(follow(ws, with_text))
            for ws, with_text in zip(sockets, (True, False), strict=True)
        ]
        bus = runtime(app).bus
        await until_async(
            lambda: runtime(app).broadcasts.members == 2,
            "both subscribers listening",
            30,
            0.01,
        )
        last = await asyncio.to_thread(end_next_instance, store, machine, T0 + timedelta(minutes=1))
        await bus.publish(JobNotice(job_id=job.id, sequence=last, state=machine.state.value))
        await until_async(
            lambda: all(seen and seen[-1]["sequence"] == last for seen in received.values()),
            "both subscribers have the last event",
            30,
            0.01,
        )
        for task in tasks:
            task.cancel()

    assert received[True] and len(received[True]) == len(received[False])
    for with_text, without in zip(received[True], received[False], strict=True):
        assert set(with_text) == {"sequence", "type", "message"} and with_text["type"]
        assert without == {"sequence": with_text["sequence"]}
