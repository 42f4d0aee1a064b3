"""In-process fan-out of job notices on one asyncio event loop.

Publishing never awaits a subscriber and each subscriber's queue is bounded (coalescing, then a
single resync), so many subscribers stay cheap and a stuck one holds up no other.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from server.events.base import BusClosedError
from server.events.notice import ALL_JOBS, JobNotice, newest

DEFAULT_QUEUE_SIZE = 100


class Subscription:
    """One subscriber's bounded queue of notices; read it with `async for`.

    Meant for a single reading task. Iteration ends once the subscription is closed and its
    pending notices are read.
    """

    def __init__(self, job_id: str | None, capacity: int) -> None:
        self.job_id = job_id
        self.coalesced = 0  # notices merged into a newer one because this reader fell behind
        self._capacity = capacity
        self._queue: deque[JobNotice] = deque()
        self._latest: dict[str, JobNotice] | None = None  # set while coalescing
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Notices waiting to be read (never more than the queue size)."""
        return len(self._queue) + len(self._latest or ())

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, notice: JobNotice) -> None:
        """Queue `notice` without ever blocking; coalesce when the queue is full."""
        if self._closed:
            return
        if self._latest is None:
            if len(self._queue) < self._capacity:
                self._queue.append(notice)
                self._wake()
                return
            self._latest = {}
            while self._queue:
                self._merge(self._queue.popleft())
        self._merge(notice)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _merge(self, notice: JobNotice) -> None:
        latest = self._latest
        assert latest is not None
        if ALL_JOBS in latest:  # a pending "re-read everything" covers whatever comes next
            self.coalesced += 1
            return
        if notice.job_id == ALL_JOBS or (
            notice.job_id not in latest and len(latest) >= self._capacity
        ):
            self.coalesced += len(latest) + (notice.job_id != ALL_JOBS)
            latest.clear()
            latest[ALL_JOBS] = JobNotice.resync()
            return
        kept = latest.get(notice.job_id)
        if kept is None:
            latest[notice.job_id] = notice
        else:
            latest[notice.job_id] = newest(kept, notice)
            self.coalesced += 1

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def take_nowait(self) -> JobNotice | None:
        """The next pending notice, or None when there is none yet."""
        if self._queue:
            return self._queue.popleft()
        if self._latest:
            job_id = next(iter(self._latest))
            notice = self._latest.pop(job_id)
            if not self._latest:
                self._latest = None
            return notice
        return None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> JobNotice:
        while True:
            notice = self.take_nowait()
            if notice is not None:
                return notice
            if self._closed:
                raise StopAsyncIteration
            if self._waiter is not None and not self._waiter.done():
                raise RuntimeError("a subscription is read by one task at a time")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class LocalBus:
    """EventBus within one process: fan-out to subscribers by job id, or to all jobs."""

    def __init__(self, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self._queue_size = queue_size
        # job id -> its subscribers; the key None holds the all-jobs subscribers
        self._subscribers: dict[str | None, set[Subscription]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscriber_count(self) -> int:
        return sum(len(group) for group in self._subscribers.values())

    @property
    def pending_notices(self) -> int:
        """Notices handed to subscribers that they have not read yet: how far readers lag."""
        return sum(s.pending for group in self._subscribers.values() for s in group)

    @property
    def watched_jobs(self) -> frozenset[str]:
        """Job ids that have at least one subscriber of their own (all-jobs ones not counted)."""
        return frozenset(key for key in self._subscribers if key is not None)

    async def publish(self, notice: JobNotice) -> None:
        self.publish_nowait(notice)

    def publish_nowait(self, notice: JobNotice) -> None:
        """Deliver `notice` now, from synchronous code on the loop's thread.

        A resync for `ALL_JOBS` goes to everyone: per-job subscribers get it for their job.
        """
        if self._closed:
            raise BusClosedError("the event bus is closed")
        if notice.job_id == ALL_JOBS:
            self.resync_all()
            return
        for key in (notice.job_id, None):
            for subscription in self._subscribers.get(key, ()):
                subscription.offer(notice)

    def resync_all(self) -> None:
        """Tell every subscriber to re-read from its cursor (after missed notifications)."""
        for key, group in self._subscribers.items():
            notice = JobNotice.resync(ALL_JOBS if key is None else key)
            for subscription in group:
                subscription.offer(notice)

    @asynccontextmanager
    async def subscribe(self, job_id: str | None = None) -> AsyncIterator[Subscription]:
        subscription = self.open_subscription(job_id)
        try:
            yield subscription
        finally:
            self.close_subscription(subscription)

    def open_subscription(self, job_id: str | None = None) -> Subscription:
        """Register a subscriber; pair with `close_subscription` (or use `subscribe`)."""
        if self._closed:
            raise BusClosedError("the event bus is closed")
        if job_id is not None and (not job_id or job_id == ALL_JOBS):
            raise ValueError(f"job_id must be a job's id or None for all jobs, got {job_id!r}")
        subscription = Subscription(job_id, self._queue_size)
        self._subscribers.setdefault(job_id, set()).add(subscription)
        return subscription

    def close_subscription(self, subscription: Subscription) -> None:
        subscription.close()
        group = self._subscribers.get(subscription.job_id)
        if group is not None:
            group.discard(subscription)
            if not group:
                del self._subscribers[subscription.job_id]

    async def close(self) -> None:
        self._closed = True
        subscribers, self._subscribers = self._subscribers, {}
        for group in subscribers.values():
            for subscription in group:
                subscription.close()

    async def __aenter__(self) -> LocalBus:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
