"""Publish/subscribe of job notices, the wake-up behind GraphQL subscriptions.

A notice says only "job X has events up to sequence N": the event log in the database is the
truth and subscribers re-read it after their cursor, so a coalesced or missed notice loses
nothing (docs/architecture.md, Threads and the event loop). `bus_for(url)` picks the bus.
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
