"""The job-notice bus: in-process fan-out, coalescing, and LISTEN/NOTIFY between processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import psycopg
import pydantic
import pytest
from anyio import wait_all_tasks_blocked

from server.events import (
    ALL_JOBS,
    CHANNEL,
    RESYNC,
    BusClosedError,
    BusUnavailableError,
    EventBus,
    JobNotice,
    LocalBus,
    PostgresBus,
    Subscription,
    bus_for,
)

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg_url() -> str:
    url = os.environ.get("PAIGRAPH_TEST_PG")
    if not url:
        pytest.skip("PAIGRAPH_TEST_PG is not set (scripts/start-postgres prints the URL)")
    return url


def notice(job_id: str, sequence: int, state: str | None = None) -> JobNotice:
    return JobNotice(job_id=job_id, sequence=sequence, state=state, kind="event")


def unique_job() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


async def next_notice(notices: AsyncIterator[JobNotice], timeout: float = 5.0) -> JobNotice:
    with anyio.fail_after(timeout):
        return await anext(notices)


def drain(subscription: Subscription) -> list[JobNotice]:
    """Everything already queued, without waiting."""
    taken = []
    while (found := subscription.take_nowait()) is not None:
        taken.append(found)
    return taken


# --- the notice ----------------------------------------------------------------------------


def test_notice_round_trips_through_its_payload() -> None:
    sent = notice("job-1", 42, "RUNNING")
    payload = sent.to_payload()
    assert len(payload.encode()) < 8000
    assert JobNotice.from_payload(payload) == sent
    # a field a newer process adds does not break an older one
    assert JobNotice.from_payload(payload[:-1] + ', "extra": 1}') == sent


@pytest.mark.parametrize(
    ("fields", "field_named"),
    [
        ({"job_id": "x" * 300, "sequence": 1}, "job_id"),
        ({"job_id": "", "sequence": 1}, "job_id"),
        ({"job_id": "j", "sequence": -1}, "sequence"),
        ({"job_id": "j", "sequence": 1, "kind": "Not A Kind"}, "kind"),
        ({"job_id": ALL_JOBS, "sequence": 1, "kind": "event"}, "reserved"),
    ],
)
def test_bad_notices_are_rejected_with_the_field_named(fields: dict, field_named: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=field_named):
        JobNotice(**fields)


def test_bus_for_picks_the_bus_from_the_database_url() -> None:
    assert isinstance(bus_for(None), LocalBus)
    assert isinstance(bus_for("sqlite:////var/lib/paigraph/db.sqlite"), LocalBus)
    for url in (
        "postgresql://u:p@db/paigraph",
        "postgres://u:p@db/paigraph",
        "postgresql+psycopg://u:p@db/paigraph",
    ):
        bus = bus_for(url)
        assert isinstance(bus, PostgresBus)
        assert isinstance(bus, EventBus)
    with pytest.raises(ValueError, match="postgresql://") as raised:
        bus_for("mysql://root:hunter2@db/paigraph")
    assert "hunter2" not in str(raised.value)


# --- in-process bus ------------------------------------------------------------------------


@pytest.mark.alone  # it times the publishing
async def test_a_thousand_subscribers_on_one_job_all_get_every_notice() -> None:
    async with LocalBus() as bus, AsyncExitStack() as stack:
        subscriptions = [
            await stack.enter_async_context(bus.subscribe("job-1")) for _ in range(1000)
        ]
        started = time.perf_counter()
        for sequence in range(1, 21):
            await bus.publish(notice("job-1", sequence))
        elapsed = time.perf_counter() - started
        for subscription in subscriptions:
            assert [n.sequence for n in drain(subscription)] == list(range(1, 21))
        assert all(s.coalesced == 0 for s in subscriptions)
        # 20,000 deliveries: a per-subscriber await or copy per publish would show here
        assert elapsed < 2.0, f"publishing to 1,000 subscribers took {elapsed:.2f}s"


async def test_subscribers_of_one_job_hear_only_that_job() -> None:
    async with (
        LocalBus() as bus,
        bus.subscribe("a") as on_a,
        bus.subscribe("b") as on_b,
        bus.subscribe(None) as on_all,
    ):
        await bus.publish(notice("a", 1))
        await bus.publish(notice("b", 1, "RUNNING"))
        await bus.publish(notice("a", 2, "SUCCEEDED"))
        assert drain(on_a) == [notice("a", 1), notice("a", 2, "SUCCEEDED")]
        assert drain(on_b) == [notice("b", 1, "RUNNING")]
        assert [(n.job_id, n.sequence) for n in drain(on_all)] == [("a", 1), ("b", 1), ("a", 2)]


async def test_a_slow_subscriber_neither_blocks_others_nor_grows_and_gets_the_newest() -> None:
    async with LocalBus(queue_size=4) as bus, bus.subscribe("a") as slow:
        heard_by_fast: list[int] = []

        async def fast_reader() -> None:
            async with bus.subscribe("a") as fast:
                async for n in fast:
                    heard_by_fast.append(n.sequence)
                    if n.sequence == 50:
                        return

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(fast_reader)
            await wait_all_tasks_blocked()
            for sequence in range(1, 51):
                await bus.publish(notice("a", sequence, "RUNNING" if sequence < 50 else "FAILED"))
                assert slow.pending <= 4
                await wait_all_tasks_blocked()

        assert heard_by_fast == list(range(1, 51))
        assert drain(slow) == [notice("a", 50, "FAILED")]
        assert slow.coalesced == 49


async def test_a_slow_all_jobs_subscriber_keeps_the_newest_per_job_then_one_resync() -> None:
    async with LocalBus(queue_size=3) as bus, bus.subscribe(None) as slow:
        for sequence in (1, 2, 3):
            await bus.publish(notice("a", sequence))
        await bus.publish(notice("b", 1))
        await bus.publish(notice("a", 4))
        assert drain(slow) == [notice("a", 4), notice("b", 1)]

        for job in ("a", "b", "c", "d", "e"):  # more jobs behind than the queue holds
            await bus.publish(notice(job, 9))
        assert drain(slow) == [JobNotice.resync(ALL_JOBS)]
        assert drain(slow) == []


async def test_leaving_the_block_unsubscribes() -> None:
    async with LocalBus() as bus:
        async with bus.subscribe("a") as first, bus.subscribe(None):
            assert bus.subscriber_count == 2
            assert bus.watched_jobs == {"a"}
        assert bus.subscriber_count == 0
        assert bus.watched_jobs == frozenset()
        await bus.publish(notice("a", 1))
        assert first.pending == 0
        assert [n async for n in first] == []

        with pytest.raises(RuntimeError, match="boom"):
            async with bus.subscribe("a"):
                raise RuntimeError("boom")
        assert bus.subscriber_count == 0


async def test_closing_the_bus_ends_every_reader() -> None:
    bus = LocalBus()
    ended: list[str] = []

    async def reader(job_id: str) -> None:
        async with bus.subscribe(job_id) as notices:
            async for _ in notices:
                pass
        ended.append(job_id)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reader, "a")
            tasks.start_soon(reader, "b")
            await wait_all_tasks_blocked()
            await bus.close()
    assert sorted(ended) == ["a", "b"]
    with pytest.raises(BusClosedError):
        await bus.publish(notice("a", 1))
    with pytest.raises(BusClosedError):
        async with bus.subscribe("a"):
            pass


async def test_a_resync_reaches_every_subscriber_for_its_own_job() -> None:
    async with LocalBus() as bus, bus.subscribe("a") as on_a, bus.subscribe(None) as on_all:
        await bus.publish(JobNotice.resync())
        assert drain(on_a) == [JobNotice.resync("a")]
        assert drain(on_all) == [JobNotice.resync(ALL_JOBS)]


# --- PostgreSQL ----------------------------------------------------------------------------


async def test_an_unreachable_database_is_a_clear_error() -> None:
    bus = PostgresBus("postgresql://paigraph:secret@127.0.0.1:1/paigraph", connect_timeout=2)
    with pytest.raises(BusUnavailableError, match=r"127\.0\.0\.1:1/") as raised:
        async with bus.subscribe("a"):
            pass
    assert "secret" not in str(raised.value)
    with pytest.raises(BusUnavailableError, match="cannot publish"):
        await bus.publish(notice("a", 1))
    await bus.close()


@pytest.mark.postgres
async def test_a_notice_published_on_one_bus_reaches_another(pg_url: str) -> None:
    job = unique_job()
    async with (
        PostgresBus(pg_url) as listening,
        PostgresBus(pg_url.replace("postgresql://", "postgres://", 1)) as publishing,
        listening.subscribe(job) as notices,
        publishing.subscribe(job) as own_notices,
    ):
        await publishing.publish(notice(job, 3, "RUNNING"))
        assert await next_notice(notices) == notice(job, 3, "RUNNING")
        assert await next_notice(own_notices) == notice(job, 3, "RUNNING")


@pytest.mark.postgres
async def test_a_notice_published_by_another_process_reaches_this_one(pg_url: str) -> None:
    job = unique_job()
    child = textwrap.dedent(
        """
        import asyncio, os, sys
        from server.events import JobNotice, PostgresBus

        async def main() -> None:
            async with PostgresBus(os.environ["PAIGRAPH_TEST_PG"]) as bus:
                notice = JobNotice(job_id=sys.argv[1], sequence=7, state="SUCCEEDED")
                await bus.publish(notice)
            print(os.getpid())

        asyncio.run(main())
        """
    )
    async with PostgresBus(pg_url) as bus, bus.subscribe(job) as notices:
        done = await anyio.run_process(
            [sys.executable, "-c", child, job], cwd=REPO, check=False, stderr=subprocess.STDOUT
        )
        assert done.returncode == 0, done.stdout.decode()
        assert int(done.stdout) != os.getpid()
        assert await next_notice(notices) == JobNotice(job_id=job, sequence=7, state="SUCCEEDED")


@pytest.mark.postgres
async def test_after_the_listener_is_killed_it_resyncs_and_keeps_delivering(pg_url: str) -> None:
    job = unique_job()
    async with (
        PostgresBus(pg_url, reconnect_delay=0.05) as bus,
        PostgresBus(pg_url) as other,
        bus.subscribe(job) as notices,
        bus.subscribe(None) as everything,
    ):
        killed = bus.listener_pid
        assert killed is not None
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            cursor = await admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
            assert (await cursor.fetchone()) == (True,)

        assert await next_notice(notices) == JobNotice.resync(job)
        assert await first_resync(everything) == JobNotice.resync(ALL_JOBS)
        assert bus.reconnects == 1
        assert bus.listener_pid not in (None, killed)

        await other.publish(notice(job, 2, "RUNNING"))
        assert await next_notice(notices) == notice(job, 2, "RUNNING")


async def first_resync(notices: AsyncIterator[JobNotice]) -> JobNotice:
    """Skip notices other people's tests publish on the shared channel."""
    while (found := await next_notice(notices)).kind != RESYNC:
        pass
    return found


@pytest.mark.postgres
async def test_garbage_on_the_channel_is_skipped(pg_url: str) -> None:
    job = unique_job()
    async with PostgresBus(pg_url) as bus, bus.subscribe(job) as notices:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            for junk in ("not json", '{"job_id": 5}', f'{{"job_id": "{job}", "sequence": -3}}'):
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, junk))
        await bus.publish(notice(job, 1))
        assert await next_notice(notices) == notice(job, 1)
        assert bus.reconnects == 0


@pytest.mark.postgres
async def test_publishing_survives_a_lost_publishing_connection(pg_url: str) -> None:
    job, name = unique_job(), f"t{uuid.uuid4().hex[:8]}"
    async with PostgresBus(pg_url, name=name) as bus, bus.subscribe(job) as notices:
        await bus.publish(notice(job, 1))
        assert await next_notice(notices) == notice(job, 1)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            cursor = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (f"{name}-publish",),
            )
            assert (await cursor.fetchall()) == [(True,)]
        await bus.publish(notice(job, 2))
        assert await next_notice(notices) == notice(job, 2)
