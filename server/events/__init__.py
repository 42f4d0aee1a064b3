"""Publish/subscribe of job notices, the wake-up behind GraphQL subscriptions.

What travels is a `JobNotice` ("job X has events up to sequence N"), never the events
themselves. The append-only event log in the database is the source of truth; a subscriber:

1. subscribes (`async with bus.subscribe(job_id) as notices`),
2. reads the log after its cursor and advances the cursor,
3. on every notice (`async for notice in notices`) reads the log after its cursor again.

Because of step 3, a notice that is coalesced with a newer one, or missed while a connection
was down (the bus then sends a `resync` notice), loses nothing. A notice whose `sequence` is not
beyond the cursor may be skipped, except a resync.

`bus_for(url)` picks the bus for a database URL: in-process for SQLite (one server process),
PostgreSQL LISTEN/NOTIFY when several server processes share a PostgreSQL database.
"""

from __future__ import annotations

from server.events.base import BusClosedError, BusUnavailableError, EventBus
from server.events.local import LocalBus, Subscription
from server.events.notice import ALL_JOBS, CHANNEL, EVENT, RESYNC, JobNotice
from server.events.postgres import PostgresBus, is_postgres_url, redact

__all__ = [
    "ALL_JOBS",
    "CHANNEL",
    "EVENT",
    "RESYNC",
    "BusClosedError",
    "BusUnavailableError",
    "EventBus",
    "JobNotice",
    "LocalBus",
    "PostgresBus",
    "Subscription",
    "bus_for",
]


def bus_for(url: str | None) -> EventBus:
    """LocalBus for no URL or a SQLite URL; PostgresBus for a PostgreSQL URL.

    Creating a bus does no I/O; a PostgresBus connects on its first use.
    """
    if not url:
        return LocalBus()
    if is_postgres_url(url):
        return PostgresBus(url)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme.split("+", 1)[0] == "sqlite":
        return LocalBus()
    raise ValueError(
        f"database URL {redact(url)!r}: the event bus supports sqlite:// (in-process) and "
        "postgresql:// or postgres:// (shared between processes)"
    )
