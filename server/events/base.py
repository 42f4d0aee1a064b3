"""The EventBus interface shared by the in-process and the PostgreSQL bus."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from server.events.notice import JobNotice


class BusClosedError(RuntimeError):
    """The bus was closed; it neither publishes nor accepts subscribers any more."""


class BusUnavailableError(RuntimeError):
    """The shared bus (its database) cannot be reached."""


@runtime_checkable
class EventBus(Protocol):
    """Publish job notices; subscribe to one job's notices or to every job's.

    Subscribe before reading the event log, then re-read from your cursor on every notice:
    a notice published between the read and the subscription is then never missed.
    """

    async def publish(self, notice: JobNotice) -> None:
        """Hand `notice` to every subscriber of its job (and of all jobs); never blocks on them."""
        ...

    def subscribe(
        self, job_id: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[JobNotice]]:
        """`async with bus.subscribe(job_id) as notices: async for notice in notices: ...`

        `job_id=None` subscribes to every job. Leaving the block unsubscribes; iteration ends
        when the bus is closed.
        """
        ...

    async def close(self) -> None:
        """End every subscription and release connections; idempotent."""
        ...
