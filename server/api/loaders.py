"""Per-request DataLoaders: every job, spec, instance list, config and user a query needs is
read in one statement per kind, however many jobs the query touches (what instances used: one
statement per job, however many of its instances the query asks about).

The store is synchronous; each batch runs in a worker thread. A loader built for one HTTP
request caches what it read for that request; a websocket connection lives long, so its
loaders batch but do not cache (a subscription must see new rows).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar

from strawberry.dataloader import DataLoader

from server.protocol.model import JobSpec
from server.shapes.values import Instance, Job, StoredUsage, User
from server.store import Store

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


UsageKey = tuple[str, int, datetime | None]  # job id, attempt, since
UsageByInstance = dict[tuple[str, int], list[StoredUsage]]  # (role, index) -> points in time order


def usage_by_instance(store: Store, keys: Iterable[UsageKey]) -> dict[UsageKey, UsageByInstance]:
    """What the instances of each (job, attempt) used from `since` on, one query per key."""
    result: dict[UsageKey, UsageByInstance] = {}
    for key in set(keys):
        job_id, attempt, since = key
        grouped: UsageByInstance = defaultdict(list)
        for point in store.usage_of(job_id, since=since, attempt=attempt):
            grouped[(point.role, point.index)].append(point)
        result[key] = dict(grouped)
    return result


class SharedLoader(DataLoader[K, V]):
    """A DataLoader whose futures, shared by every field that asks for the same key, cannot
    be cancelled by one of them. graphql-core cancels the rest of an object's fields when
    one fails; a field cancelled while awaiting a loader's future cancelled the future
    itself, and another object's field awaiting the same key got a CancelledError that
    escaped the execution as an HTTP 500. Each caller now awaits its own shield."""

    def load(self, key: K) -> Awaitable[V]:
        future = super().load(key)
        if isinstance(future, asyncio.Future) and not future.done():
            return asyncio.shield(future)
        return future


class Cached(NamedTuple, Generic[V]):
    """What a loader already holds for a key: `hit` says whether it holds the value at all
    (a held value may itself be None, so `value` alone cannot say)."""

    hit: bool
    value: V | None


_MISS: Cached[Any] = Cached(False, None)


def ready(loader: DataLoader[K, V], key: K) -> Cached[V]:
    """A hit with the value when the loader already holds `key`'s value (read earlier in this
    request, or primed by a resolver that read ahead); a miss when it would have to load it."""
    future = loader.cache_map.get(key) if loader.cache else None
    if future is None or not future.done() or future.cancelled() or future.exception():
        return _MISS
    return Cached(True, future.result())


def _loader(
    fetch: Callable[[list[K]], Mapping[K, V]], default: V | None, *, cache: bool
) -> SharedLoader[K, V | None]:
    async def load(keys: list[K]) -> list[V | None]:
        found = await asyncio.to_thread(fetch, keys)
        return [found.get(key, default) for key in keys]

    return SharedLoader(load_fn=load, cache=cache)


class Loaders:
    def __init__(self, store: Store, *, cache: bool = True) -> None:
        self.store = store
        self.cache = cache
        self.job: DataLoader[str, Job | None] = _loader(store.jobs_by_ids, None, cache=cache)
        self.spec: DataLoader[str, JobSpec | None] = _loader(store.job_specs, None, cache=cache)
        self.config: DataLoader[str, str | None] = _loader(store.job_configs, None, cache=cache)
        self.instances: DataLoader[str, list[Instance] | None] = _loader(
            store.instances_for_jobs, [], cache=cache
        )
        self.user: DataLoader[int, User | None] = _loader(store.users_by_ids, None, cache=cache)
        self.memberships: DataLoader[int, list[str] | None] = _loader(
            store.user_vcs_by_ids, [], cache=cache
        )
        self.usage: DataLoader[UsageKey, UsageByInstance | None] = _loader(
            lambda keys: usage_by_instance(store, keys), {}, cache=cache
        )

    def fresh(self) -> Loaders:
        """New loaders on the same store, with nothing read yet (each mutation field's)."""
        return Loaders(self.store, cache=self.cache)
