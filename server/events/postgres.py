"""The event bus shared by server processes of one PostgreSQL database (LISTEN/NOTIFY).

Each process listens on one connection and fans out through a LocalBus; NOTIFY is not durable,
so after a reconnection every subscriber is told to resync from the event log
(docs/architecture.md). `pg_notify` may also be sent inside a transaction that appends events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pydantic
from psycopg import sql

from server.events.base import BusClosedError, BusUnavailableError
from server.events.local import DEFAULT_QUEUE_SIZE, LocalBus, Subscription
from server.events.notice import CHANNEL, JobNotice

log = logging.getLogger(__name__)

POSTGRES_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(url: str) -> bool:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    return scheme.split("+", 1)[0] in POSTGRES_SCHEMES


def postgres_conninfo(url: str) -> str:
    """The libpq URI for a postgresql:// or postgres:// URL (a "+driver" suffix is dropped)."""
    if not is_postgres_url(url):
        raise ValueError(
            f"not a PostgreSQL URL: {redact(url)!r}; expected postgresql://user:pass@host/db"
        )
    return "postgresql://" + url.partition("://")[2]


def redact(url: str) -> str:
    """`url` with its password replaced, fit for logs and error messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


class PostgresBus:
    """EventBus across processes: NOTIFY to publish, one LISTEN connection per process.

    No I/O happens until the first `start()`, `subscribe()` or `publish()`. `start()` (implied
    by `subscribe`) connects the listener and raises BusUnavailableError if it cannot; later
    drops are repaired in the background, followed by a resync notice to every subscriber.
    """

    def __init__(
        self,
        url: str,
        *,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        name: str = "paigraph",
        connect_timeout: float = 10.0,
        reconnect_delay: float = 0.2,
        reconnect_max_delay: float = 10.0,
    ) -> None:
        self._conninfo = postgres_conninfo(url)
        self._shown_url = redact(url)
        self._local = LocalBus(queue_size)
        self._name = name
        self._connect_timeout = connect_timeout
        self._reconnect_delay = reconnect_delay
        self._reconnect_max_delay = reconnect_max_delay
        self._start_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        self._listener_task: asyncio.Task[None] | None = None
        self._listener_pid: int | None = None
        self._publisher: psycopg.AsyncConnection | None = None
        self._reconnects = 0
        self._closed = False

    @property
    def listener_pid(self) -> int | None:
        """The backend pid of the listening connection while it is up (for operators)."""
        return self._listener_pid

    @property
    def reconnects(self) -> int:
        """How many times the listening connection was re-established."""
        return self._reconnects

    @property
    def local(self) -> LocalBus:
        """The in-process fan-out (subscriber counts, watched jobs)."""
        return self._local

    async def start(self) -> None:
        """Connect the listener once; a no-op when it already runs."""
        async with self._start_lock:
            self._check_open()
            if self._listener_task is not None:
                return
            try:
                conn = await self._connect_listener()
            except (psycopg.Error, OSError) as exc:
                raise BusUnavailableError(
                    f"cannot listen for job events on {self._shown_url}: {exc}"
                ) from exc
            self._listener_task = asyncio.create_task(
                self._listen(conn), name=f"{self._name} job-event listener"
            )

    async def publish(self, notice: JobNotice) -> None:
        """NOTIFY every process listening on this database (this one included)."""
        self._check_open()
        payload = notice.to_payload()
        async with self._publish_lock:
            for attempt in (1, 2):  # a connection that died since last time is replaced once
                try:
                    conn = await self._publishing_connection()
                    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                    return
                except (psycopg.Error, OSError) as exc:
                    await self._drop_publisher()
                    if attempt == 2:
                        raise BusUnavailableError(
                            f"cannot publish job events on {self._shown_url}: {exc}"
                        ) from exc

    @asynccontextmanager
    async def subscribe(self, job_id: str | None = None) -> AsyncIterator[Subscription]:
        """Subscribe once the listener is up, so nothing published afterwards is missed."""
        await self.start()
        async with self._local.subscribe(job_id) as subscription:
            yield subscription

    async def close(self) -> None:
        self._closed = True
        task, self._listener_task = self._listener_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        async with self._publish_lock:
            await self._drop_publisher()
        await self._local.close()

    async def __aenter__(self) -> PostgresBus:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise BusClosedError("the event bus is closed")

    async def _connect(self, role: str) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self._connect_timeout)),
            application_name=f"{self._name}-{role}"[:63],
            # libpq notices a peer that vanished without closing the socket (a dead host, a cut
            # network) after about idle + interval * count seconds; a terminated backend is
            # noticed at once.
            keepalives=1,
            keepalives_idle=15,
            keepalives_interval=5,
            keepalives_count=3,
        )

    async def _connect_listener(self) -> psycopg.AsyncConnection:
        conn = await self._connect("listen")
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        except BaseException:
            await conn.close()
            raise
        self._listener_pid = conn.info.backend_pid
        return conn

    async def _publishing_connection(self) -> psycopg.AsyncConnection:
        if self._publisher is None or self._publisher.closed:
            self._publisher = await self._connect("publish")
        return self._publisher

    async def _drop_publisher(self) -> None:
        conn, self._publisher = self._publisher, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def _listen(self, conn: psycopg.AsyncConnection) -> None:
        """Fan notifications out until cancelled; reconnect and resync whenever the link drops."""
        try:
            while True:
                try:
                    async for notify in conn.notifies():
                        self._dispatch(notify.payload)
                    log.warning("job-event listener on %s stopped; reconnecting", self._shown_url)
                except (psycopg.Error, OSError) as exc:
                    log.warning("job-event listener on %s lost: %s", self._shown_url, exc)
                except Exception:  # a fault here must not leave subscribers waiting forever
                    log.exception("job-event listener on %s failed; reconnecting", self._shown_url)
                await _close_quietly(conn)
                self._listener_pid = None
                conn = await self._reconnect()
                self._reconnects += 1
                self._local.resync_all()
        finally:
            self._listener_pid = None
            await _close_quietly(conn)

    async def _reconnect(self) -> psycopg.AsyncConnection:
        delay = self._reconnect_delay
        while True:
            await asyncio.sleep(delay * random.uniform(0.75, 1.25))
            try:
                conn = await self._connect_listener()
            except (psycopg.Error, OSError) as exc:
                log.warning("job-event listener cannot reconnect to %s: %s", self._shown_url, exc)
                delay = min(delay * 2, self._reconnect_max_delay)
                continue
            log.info("job-event listener reconnected to %s", self._shown_url)
            return conn

    def _dispatch(self, payload: str) -> None:
        try:
            notice = JobNotice.from_payload(payload)
        except pydantic.ValidationError:
            log.warning("ignoring a malformed payload on channel %s: %.200r", CHANNEL, payload)
            return
        if not self._local.closed:
            self._local.publish_nowait(notice)


async def _close_quietly(conn: psycopg.AsyncConnection) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        await conn.close()
