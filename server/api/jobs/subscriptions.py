"""The Subscription type: a job's events from a cursor on, the jobs of a list that change,
and a task instance's output.

They subscribe first and then read the stored log after their cursor, again on every notice,
so a notice lost or coalesced costs nothing; subscribers woken by one notice share one read.
Why that is safe, and `jobsChanged`'s cursor: docs/architecture.md ("Threads and the event loop").
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Hashable

import strawberry

from backends.base import BackendError
from server.api.context import Info
from server.api.errors import ApiError
from server.api.ids import expect_global_id
from server.api.jobs.metrics_types import InstanceUsage, JobUsage
from server.api.jobs.queries import store_filter
from server.api.jobs.types import (
    Job,
    JobChange,
    JobEvent,
    JobFilter,
    LogChunk,
    changes_cursor,
    not_found,
    parse_changes_cursor,
    parse_event_cursor,
)
from server.api.usage_source import source_of
from server.app.usage_sampler import LiveUsage
from server.events import JobNotice
from server.shapes.values import JOB_STATE, Event
from server.shapes.values import Job as StoredJob
from server.shapes.values import JobFilter as StoreJobFilter
from server.store import Store

READ_BATCH = 100
# reads under way that later subscribers may join: (loop, store, job, cursor, notice) -> rows
_reads: dict[Hashable, asyncio.Future[list[Event]]] = {}


class _EventViews:
    """One JobEvent per Event read: subscribers woken by the same notice share the rows read
    (see `_read`), and so the views made of them, which the executor then completes once for
    all who asked with the same query. The newest views are kept, with their events."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._views: OrderedDict[int, tuple[Event, JobEvent]] = OrderedDict()
        self._lock = threading.Lock()  # servers in several threads (tests) share the module

    def view(self, event: Event) -> JobEvent:
        with self._lock:
            found = self._views.get(id(event))
            if found is not None and found[0] is event:
                return found[1]
            view = JobEvent.from_value(event)
            self._views[id(event)] = (event, view)
            while len(self._views) > self.size:
                self._views.popitem(last=False)
            return view


_VIEWS = _EventViews()


def _is_terminal(event: Event) -> bool:
    return event.type == JOB_STATE and event.state is not None and event.state.is_final


async def _read(store: Store, job_id: str, cursor: int, notice: int | None) -> list[Event]:
    """The events after `cursor`; a read begun for the same notice `notice` (a sequence) is
    joined rather than repeated. Without a notice (the first read, a resync) nothing is shared:
    a read begun earlier might not see what this caller is owed."""
    if notice is None:
        return await asyncio.to_thread(store.events_after, job_id, cursor, READ_BATCH)
    key = (asyncio.get_running_loop(), store, job_id, cursor, notice)
    shared = _reads.get(key)
    if shared is None:
        shared = asyncio.ensure_future(
            asyncio.to_thread(store.events_after, job_id, cursor, READ_BATCH)
        )
        _reads[key] = shared
        shared.add_done_callback(lambda done: _forget(key, done))
    return await asyncio.shield(shared)  # one subscriber leaving does not cancel the others' read


def _forget(key: Hashable, done: asyncio.Future[list[Event]]) -> None:
    _reads.pop(key, None)
    if not done.cancelled():
        done.exception()  # retrieved: the waiters, if any are left, raise it themselves


async def follow_events(
    store: Store, notices: AsyncIterator[JobNotice], job_id: str, after: int
) -> AsyncGenerator[Event, None]:
    """The job's events after sequence `after`, then each new one as it is stored, until the
    job's final state has been delivered (with whatever was stored alongside it)."""
    cursor = after
    ended = False
    checked_end = False
    woken_by: int | None = None  # the sequence of the notice this read answers
    while True:
        batch = await _read(store, job_id, cursor, woken_by)
        for event in batch:
            yield event
            cursor = event.sequence
            ended = ended or _is_terminal(event)
        if len(batch) == READ_BATCH:
            continue
        if ended:
            return
        if not checked_end:  # a cursor beyond the final state: nothing more will come
            checked_end = True
            job = await asyncio.to_thread(store.get_job, job_id)
            if job is None or (job.state.is_final and job.last_sequence <= cursor):
                return
        while True:
            notice = await anext(notices, None)
            if notice is None:  # the bus closed: the server is stopping
                return
            if notice.is_resync or notice.sequence > cursor:
                woken_by = None if notice.is_resync else notice.sequence
                break


async def follow_changes(
    store: Store, notices: AsyncIterator[JobNotice], where: StoreJobFilter, after: int
) -> AsyncGenerator[tuple[StoredJob, int], None]:
    """Each job matching `where` that has events after the event id `after`, with the id to
    resume after it, read again on every notice of any job; until the bus closes. Several
    events of one job read together tell it once, as it is now."""
    cursor = after
    while True:
        while True:
            jobs, moved = await asyncio.to_thread(
                store.jobs_changed_after, cursor, where, limit=READ_BATCH
            )
            for index, (job, newest) in enumerate(jobs):
                # a job's state covers its events read: resuming after its newest tells only
                # the jobs after it; after the last, only events of jobs outside the filter are left
                yield job, (moved if index == len(jobs) - 1 else newest)
            if moved == cursor:
                break
            cursor = moved
        if await anext(notices, None) is None:  # the bus closed: the server is stopping
            return


def _order(usage: LiveUsage) -> tuple[str, int]:
    return usage.sample.key.role, usage.sample.key.index


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="The job's events after the cursor `after` (from the first without it), "
        "then live ones; ends after the job's final state."
    )
    async def job_events(
        self, info: Info, job_id: strawberry.ID, after: str | None = None
    ) -> AsyncGenerator[JobEvent, None]:
        info.context.viewer  # noqa: B018 - only the authenticated may subscribe
        key = expect_global_id(job_id, "Job", argument="jobId")
        since = parse_event_cursor(after)
        runtime = info.context.runtime
        async with runtime.bus.subscribe(key) as notices:
            job = await asyncio.to_thread(runtime.store.get_job, key)
            if info.context.readable(job) is None:
                raise not_found("job", "jobId")
            async for event in follow_events(runtime.store, notices, key, since):
                view = _VIEWS.view(event)
                info.context.position = view.cursor
                yield view

    @strawberry.subscription(
        description="Jobs that enter the filter or change within it (a new job, a new state, "
        "an instance placed ...) after the cursor `after` (a list's `changesCursor`, or a "
        "change's `cursor` to resume after a reconnect; from now on without it), each with "
        "its state when it is told. Only jobs the viewer may read."
    )
    async def jobs_changed(
        self, info: Info, filter: JobFilter | None = None, after: str | None = None
    ) -> AsyncGenerator[JobChange, None]:
        info.context.viewer  # noqa: B018 - only the authenticated may subscribe
        where = store_filter(info, filter)
        since = parse_changes_cursor(after) if after is not None else None
        runtime = info.context.runtime
        async with runtime.bus.subscribe(None) as notices:
            store = runtime.store
            start = since if since is not None else await asyncio.to_thread(store.newest_event_id)
            async for job, resume in follow_changes(store, notices, where, start):
                yield JobChange(job=Job.from_value(job), cursor=changes_cursor(resume))

    @strawberry.subscription(
        description="What the job's running instances use, once per sampling round (every "
        "5 s by default) from the next round on; ends when the job has ended."
    )
    async def job_usage(self, info: Info, job_id: strawberry.ID) -> AsyncGenerator[JobUsage, None]:
        info.context.viewer  # noqa: B018 - only the authenticated may subscribe
        key = expect_global_id(job_id, "Job", argument="jobId")
        runtime = info.context.runtime
        job = await asyncio.to_thread(runtime.store.get_job, key)
        if info.context.readable(job) is None:
            raise not_found("job", "jobId")
        sampler = runtime.usage
        if sampler is None:
            raise ApiError(source_of(runtime), "UNAVAILABLE")
        seen = sampler.rounds
        while True:
            seen = await sampler.next_round(seen)
            found = [u for k, u in sampler.latest.items() if k.job_id == key]
            if found:
                yield JobUsage(
                    at=found[0].sample.at,
                    source=sampler.source(),
                    instances=[InstanceUsage.of(u) for u in sorted(found, key=_order)],
                )
            job = await asyncio.to_thread(runtime.store.get_job, key)
            if job is None or job.state.is_final:
                return

    @strawberry.subscription(
        description="A task instance's output in chunks: from byte `offset`, or its last "
        "`tail` lines; with `follow`, new output until the instance ends."
    )
    async def task_logs(
        self,
        info: Info,
        job_id: strawberry.ID,
        task_role: str,
        index: int,
        follow: bool | None = False,
        offset: int = 0,
        tail: int | None = None,
    ) -> AsyncGenerator[LogChunk, None]:
        info.context.viewer  # noqa: B018 - only the authenticated may read logs
        key = expect_global_id(job_id, "Job", argument="jobId")
        if offset < 0:
            raise ApiError(f"offset must be 0 or more, got {offset}", "BAD_ARGUMENT")
        if tail is not None and tail < 0:
            raise ApiError(f"tail must be 0 or more, got {tail}", "BAD_ARGUMENT")
        store = info.context.store
        job = await asyncio.to_thread(store.get_job, key)
        spec = (await asyncio.to_thread(store.job_specs, [key])).get(key) if job else None
        if info.context.readable(job) is None or spec is None:
            raise not_found("job", "jobId")
        role = spec.role(task_role)
        if role is None:
            roles = ", ".join(r.name for r in spec.task_roles)
            raise ApiError(f"taskRole: the job has no task role {task_role!r} (roles: {roles})")
        if not 0 <= index < role.instances:
            raise ApiError(
                f"index: task role {task_role!r} has {role.instances} instance(s); "
                f"there is no index {index}"
            )
        chunks = info.context.service.logs(
            key, task_role, index, follow=bool(follow), offset=offset, tail=tail
        )
        try:
            async for chunk in chunks:
                yield LogChunk(offset=chunk.offset, data=chunk.data)
        except BackendError as exc:
            raise ApiError(str(exc), "NOT_FOUND") from None
