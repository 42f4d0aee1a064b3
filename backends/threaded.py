"""The async face of a backend whose work is blocking calls made from threads of its own.

Both backends drive their engine with blocking clients, so this base gives them the async
`Backend` methods once: blocking counterparts in worker threads, and events from any thread put
on the loop's one queue in order (docs/architecture.md, Adding a backend).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Protocol

from backends.base import (
    EventKind,
    InstanceEvent,
    InstanceKey,
    InstanceReport,
    LaunchRequest,
    LogChunk,
    utcnow,
)
from backends.log_stream import stream_log


def attempt_id(job_id: str, attempt: int) -> str:
    """The attempt's name in a backend's tables (and the simulator's holds and port owners)."""
    return f"{job_id}#{attempt}"


class LogSource(NamedTuple):
    """How to read one instance's output (see `stream_log`)."""

    read_from: Callable[[int], tuple[bytes, int]]
    tail_offset: Callable[[int], int]
    running: Callable[[], bool]


class Keyed(Protocol):
    """A backend's record of an instance: what an event about it needs."""

    @property
    def key(self) -> InstanceKey: ...

    @property
    def task_attempt(self) -> int:
        """The run its events are about (InstanceEvent.run)."""
        ...


class ThreadedBackend(ABC):
    """The Backend methods on top of blocking ones, and the event queue threads feed."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[InstanceEvent] | None = None

    def _open_events(self) -> None:
        """Make the queue `events()` reads, on the running loop; events emitted before are
        dropped (nobody could read them)."""
        self._loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()

    # --- Backend -------------------------------------------------------------------------------

    async def launch(self, request: LaunchRequest) -> None:
        await asyncio.to_thread(self._launch, request)

    async def stop(self, job_id: str, attempt: int, grace_seconds: float | None = None) -> None:
        grace = self._stop_grace_seconds() if grace_seconds is None else grace_seconds
        await asyncio.to_thread(self._stop, attempt_id(job_id, attempt), grace)

    async def events(self) -> AsyncIterator[InstanceEvent]:
        assert self._events is not None, "call start() first"
        while True:
            yield await self._events.get()

    async def logs(
        self,
        key: InstanceKey,
        *,
        offset: int = 0,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogChunk]:
        source = self._log_source(key)
        async for chunk in stream_log(
            key,
            read_from=source.read_from,
            tail_offset=source.tail_offset,
            running=source.running,
            offset=offset,
            tail=tail,
            follow=follow,
        ):
            yield chunk

    async def relaunch(self, key: InstanceKey, run: int | None = None) -> None:
        await asyncio.to_thread(self._relaunch, key, run)

    async def reconcile(self) -> list[InstanceReport]:
        return await asyncio.to_thread(self._reports)

    async def forget(self, job_id: str, attempt: int) -> None:
        await asyncio.to_thread(self._forget, attempt_id(job_id, attempt))

    # --- what a subclass does, blocking, in a worker thread ------------------------------------

    @abstractmethod
    def _launch(self, request: LaunchRequest) -> None:
        """Queue the attempt; LaunchRefused when it can never run here."""

    @abstractmethod
    def _stop(self, stopped_id: str, grace: float) -> None:
        """Stop every instance of the attempt named by `attempt_id`."""

    @abstractmethod
    def _relaunch(self, key: InstanceKey, run: int | None) -> None:
        """Start one ended instance again as run `run` (see `Backend.relaunch`)."""

    @abstractmethod
    def _reports(self) -> list[InstanceReport]:
        """Every instance known, for reconciling after a restart."""

    @abstractmethod
    def _forget(self, forgotten_id: str) -> None:
        """Release what the ended attempt named by `attempt_id` still holds."""

    @abstractmethod
    def _log_source(self, key: InstanceKey) -> LogSource:
        """How to read the instance's output; UnknownInstance when there is none."""

    @abstractmethod
    def _stop_grace_seconds(self) -> float:
        """The grace period of a stop that names none."""

    # --- events, from any thread ---------------------------------------------------------------

    def _event(self, instance: Keyed, kind: EventKind, **fields: Any) -> InstanceEvent:
        """An event about one instance's current run, at now unless `at` is given."""
        if fields.get("at") is None:
            fields["at"] = utcnow()
        fields.setdefault("run", instance.task_attempt)
        return InstanceEvent(
            job_id=instance.key.job_id,
            attempt=instance.key.attempt,
            role=instance.key.role,
            index=instance.key.index,
            kind=kind,
            **fields,
        )

    def _emit(self, event: InstanceEvent) -> None:
        """Hand the event to `events()`; dropped before `start()` and once the loop closes."""
        if self._loop is None or self._events is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
