"""The server task that measures what running instances use, every few seconds.

Each round asks the backend (when it implements `SamplesUsage`) for every running instance's
use, stores the round in one transaction, keeps it as the latest for live readers (the
`jobUsage` subscription, `paigraph top`, the Prometheus gauges through server.app.latest_usage),
and once a minute compacts what is an hour old (server.store.usage). A round that fails is
logged and the next one tries again: measuring never stops jobs from running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backends.base import BackendError, InstanceKey, utcnow
from backends.usage import SamplesUsage, UsageSample
from server.shapes.store_errors import StoreError
from server.store import Store
from server.store.availability import database_unavailable

log = logging.getLogger(__name__)

INTERVAL_ENV = "PAIGRAPH_USAGE_INTERVAL"
DEFAULT_INTERVAL = 5.0
COMPACT_EVERY = 60.0  # seconds between compactions of what is an hour old


def usage_interval_setting(
    value: str | None = None, environ: Mapping[str, str] | None = None
) -> float:
    """Seconds between rounds: `value`, else $PAIGRAPH_USAGE_INTERVAL, else 5; 0 turns
    sampling off. ValueError naming the setting for anything but a number from 1 to 3600 or 0."""
    if value is None:
        value = (os.environ if environ is None else environ).get(INTERVAL_ENV, "")
    text = value.strip()
    if not text:
        return DEFAULT_INTERVAL
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds != 0 and not 1 <= seconds <= 3600:
        raise ValueError(
            f"{INTERVAL_ENV} must be a number of seconds from 1 to 3600, or 0 to turn sampling "
            f"off, got {value!r}"
        )
    return seconds


@dataclass(frozen=True)
class LiveUsage:
    """A sample with its network rates over the round before it (None on first sight)."""

    sample: UsageSample
    rx_bytes_per_second: float | None
    tx_bytes_per_second: float | None


class UsageSampler:
    """Runs the rounds; `latest` holds the last round's figures of each running instance."""

    def __init__(self, store: Store, backend: SamplesUsage, interval: float = DEFAULT_INTERVAL):
        self.store = store
        self.backend = backend
        self.interval = interval
        self.latest: dict[InstanceKey, LiveUsage] = {}
        self.rounds = 0
        self._round_done = asyncio.Condition()
        self._owners: dict[str, str] = {}  # job id -> its user's name
        self._task: asyncio.Task[None] | None = None
        self._last_compact = 0.0
        self._failing = False

    def source(self) -> str:
        return self.backend.usage_source()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="usage-sampler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def latest_with_users(self) -> list[tuple[UsageSample, str]]:
        """The last round's sample of each running instance, with its job's user's name."""
        return [(u.sample, self._owners.get(k.job_id, "")) for k, u in self.latest.items()]

    async def next_round(self, after: int) -> int:
        """Wait until a round after round number `after` is done; its number."""
        async with self._round_done:
            await self._round_done.wait_for(lambda: self.rounds > after)
            return self.rounds

    async def _run(self) -> None:
        while True:
            began = time.monotonic()
            try:
                await self.sample_once()
                self._failing = False
            except Exception as exc:
                # told once per outage (the engine away, the database busy or full), not every
                # round; a stack only for what no outage explains
                if not self._failing:
                    log.warning(
                        "measuring what instances use failed (%s); trying again every round",
                        exc,
                        exc_info=not _outage(exc),
                    )
                self._failing = True
            await asyncio.sleep(max(self.interval - (time.monotonic() - began), 0.5))

    async def sample_once(self) -> None:
        """One round: measure, store, publish; compact when a minute has passed."""
        measured = await self.backend.sample_usage()
        # one time for the whole round, so the instances of a job line up point for point
        at = utcnow()
        samples = [s.model_copy(update={"at": at}) for s in measured]
        await asyncio.to_thread(self._store_round, samples)
        self.latest = _with_rates(samples, self.latest)
        async with self._round_done:
            self.rounds += 1
            self._round_done.notify_all()

    def _store_round(self, samples: Sequence[UsageSample]) -> None:
        self.store.add_usage(samples, step=round(self.interval))
        unknown = {s.key.job_id for s in samples} - set(self._owners)
        if unknown:
            jobs = self.store.jobs_by_ids(unknown)
            users = self.store.users_by_ids({j.owner_id for j in jobs.values()})
            for job in jobs.values():
                owner = users.get(job.owner_id)
                self._owners[job.id] = owner.name if owner else ""
        running = {s.key.job_id for s in samples}
        for gone in set(self._owners) - running:
            del self._owners[gone]
        now = time.monotonic()
        if now - self._last_compact >= COMPACT_EVERY:
            self._last_compact = now
            self.store.compact_usage(utcnow())


def _outage(exc: BaseException) -> bool:
    """Whether `exc` is an engine or database outage, said in one line without a stack (the
    database's by the store's own rule, server.store.availability)."""
    return database_unavailable(exc) or isinstance(exc, (BackendError, StoreError, OSError))


def _with_rates(
    samples: Sequence[UsageSample], before: Mapping[InstanceKey, LiveUsage]
) -> dict[InstanceKey, LiveUsage]:
    latest = {}
    for sample in samples:
        earlier = before.get(sample.key)
        rx = tx = None
        if earlier is not None:
            seconds = (sample.at - earlier.sample.at).total_seconds()
            if seconds > 0:
                rx = max(sample.network_rx_bytes - earlier.sample.network_rx_bytes, 0) / seconds
                tx = max(sample.network_tx_bytes - earlier.sample.network_tx_bytes, 0) / seconds
        latest[sample.key] = LiveUsage(sample, rx, tx)
    return latest
