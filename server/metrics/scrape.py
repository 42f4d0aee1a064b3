"""What /metrics reads when it is scraped: jobs by state and virtual cluster, the queue, live
subscriptions, how far event-bus readers lag, whether the backend answers, and each running
instance's resource use.

The jobs are counted by one grouped query; the instances' use comes from a callable handed in
(the usage sampler's latest sample of each running instance, with its job's user), so this
module measures nothing itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backends.base import ReportsHealth
from backends.usage import UsageSample
from server.metrics.settings import MetricsSettings
from server.shapes.job_states import JobState

if TYPE_CHECKING:
    from server.api.context import Runtime

log = logging.getLogger(__name__)

LatestUsage = Callable[[], Sequence[tuple[UsageSample, str]]]
"""The latest sample of each running instance with the user who owns its job. Called on the
event loop at each scrape, so it must be an in-memory read (the sampler's latest figures)."""

INSTANCE_LABELS = ("job", "role", "index", "user")


@dataclass(frozen=True)
class Reading:
    """What one scrape serves, read before the text is written. The figures the event loop
    owns (subscriptions, the bus, the backend's health, the latest samples) are read on the
    loop; the database is asked in a worker thread."""

    job_counts: Sequence[tuple[str, str, int]]
    subscriptions: int
    pending_notices: int
    backend: tuple[str, bool] | None  # its name and whether it answers; None: no backend
    instances: Sequence[tuple[UsageSample, str]] | None  # None: no per-instance series
    dropped: int = 0


class ScrapeCollector(Collector):
    """Serves the latest `Reading` (`read` makes one; the endpoint sets it before each scrape)."""

    def __init__(self, settings: MetricsSettings) -> None:
        self.settings = settings
        self.latest_usage: LatestUsage | None = None
        self.reading: Reading | None = None

    async def read(self, runtime: Runtime) -> Reading:
        """Read the running server: call on its event loop."""
        samples = self._samples()
        counts = await asyncio.to_thread(runtime.store.job_counts)
        instances, dropped = None, 0
        if samples is not None:
            ended = await asyncio.to_thread(
                runtime.store.completion_times, (s.key.job_id for s, _ in samples)
            )
            instances = keep_instances(samples, ended, self.settings.max_instances)
            dropped = len(_one_per_instance(samples)) - len(instances)
        return Reading(
            job_counts=counts,
            subscriptions=runtime.subscriptions.total,
            pending_notices=_pending_notices(runtime),
            backend=_backend(runtime),
            instances=instances,
            dropped=dropped,
        )

    def _samples(self) -> list[tuple[UsageSample, str]] | None:
        """The latest samples, or None when the per-instance series are off or have no source
        (or the source failed: logged, and /metrics goes on without them)."""
        if not self.settings.per_instance or self.latest_usage is None:
            return None
        try:
            return list(self.latest_usage())
        except Exception:
            log.exception("the latest usage samples cannot be read; /metrics goes without them")
            return None

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not scrape

    def collect(self) -> Iterator[Metric]:
        reading = self.reading
        if reading is None:
            return
        yield from _jobs(reading.job_counts)
        yield GaugeMetricFamily(
            "paigraph_subscriptions",
            "GraphQL operations running over websockets now (subscriptions, mostly).",
            value=reading.subscriptions,
        )
        yield GaugeMetricFamily(
            "paigraph_event_bus_pending_notices",
            "Job notices handed to this server's subscribers and not read yet: how far they lag.",
            value=reading.pending_notices,
        )
        if reading.backend is not None:
            up = GaugeMetricFamily(
                "paigraph_backend_up",
                "1 while the backend's engine answers, 0 during an outage.",
                labels=["backend"],
            )
            name, healthy = reading.backend
            up.add_metric([name], 1 if healthy else 0)
            yield up
        if reading.instances is not None:
            yield GaugeMetricFamily(
                "paigraph_instance_series_dropped",
                "Instances left out of the per-instance series by PAIGRAPH_METRICS_MAX_INSTANCES.",
                value=reading.dropped,
            )
            yield from instance_families(reading.instances)


def _jobs(counts: Sequence[tuple[str, str, int]]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily(
        "paigraph_jobs", "Jobs by state and virtual cluster.", labels=["state", "virtual_cluster"]
    )
    queue = GaugeMetricFamily(
        "paigraph_queue_length",
        "Jobs waiting for the backend to place them, by virtual cluster.",
        labels=["virtual_cluster"],
    )
    found = {(state, vc): count for state, vc, count in counts}
    for vc in sorted({vc for _, vc, _ in counts}):
        for state in JobState:  # every state, at zero too: a state emptied shows 0, not a gap
            jobs.add_metric([state.value, vc], found.get((state.value, vc), 0))
        queue.add_metric([vc], found.get((JobState.WAITING.value, vc), 0))
    yield jobs
    yield queue


def _pending_notices(runtime: Runtime) -> int:
    bus = runtime.bus
    local = getattr(bus, "local", bus)  # the PostgreSQL bus fans out through a local one
    return int(getattr(local, "pending_notices", 0))


def _backend(runtime: Runtime) -> tuple[str, bool] | None:
    backend = runtime.backend
    if backend is None:
        return None
    healthy = backend.health().healthy if isinstance(backend, ReportsHealth) else True
    return runtime.backend_name or "unknown", healthy


def _one_per_instance(
    samples: Iterable[tuple[UsageSample, str]],
) -> dict[tuple[str, str, int], tuple[UsageSample, str]]:
    """The newest attempt's sample of each (job, role, index): the series' labels."""
    newest: dict[tuple[str, str, int], tuple[UsageSample, str]] = {}
    for sample, user in samples:
        key = (sample.key.job_id, sample.key.role, sample.key.index)
        kept = newest.get(key)
        if kept is None or (sample.key.attempt, sample.at) > (kept[0].key.attempt, kept[0].at):
            newest[key] = (sample, user)
    return newest


def keep_instances(
    samples: Iterable[tuple[UsageSample, str]],
    ended: dict[str, datetime | None],
    limit: int,
) -> list[tuple[UsageSample, str]]:
    """At most `limit` instances' samples, one per instance: those of unfinished jobs first,
    then of the jobs that ended most recently, so the oldest ended jobs are left out first."""
    chosen = list(_one_per_instance(samples).values())

    def rank(item: tuple[UsageSample, str]) -> tuple[bool, float, str, str, int]:
        key = item[0].key
        end = ended.get(key.job_id)
        newest_first = -end.timestamp() if end is not None else 0.0
        return (end is not None, newest_first, key.job_id, key.role, key.index)

    chosen.sort(key=rank)
    return chosen[:limit]


def instance_families(samples: Sequence[tuple[UsageSample, str]]) -> Iterator[Metric]:
    """The per-instance series of `samples` (one per instance), labelled job/role/index/user."""
    labels = list(INSTANCE_LABELS)
    cpu = GaugeMetricFamily(
        "paigraph_instance_cpu_cores", "CPU cores an instance uses.", labels=labels
    )
    memory = GaugeMetricFamily(
        "paigraph_instance_memory_bytes", "Memory an instance uses, in bytes.", labels=labels
    )
    limit = GaugeMetricFamily(
        "paigraph_instance_memory_limit_bytes",
        "The memory an instance may use before it is OOM-killed, in bytes (where it has one).",
        labels=labels,
    )
    received = CounterMetricFamily(
        "paigraph_instance_network_receive_bytes",
        "Bytes an instance received since its container started.",
        labels=labels,
    )
    sent = CounterMetricFamily(
        "paigraph_instance_network_transmit_bytes",
        "Bytes an instance sent since its container started.",
        labels=labels,
    )
    for sample, user in samples:
        values = [sample.key.job_id, sample.key.role, str(sample.key.index), user]
        cpu.add_metric(values, sample.cpu_cores)
        memory.add_metric(values, sample.memory_bytes)
        if sample.memory_limit_bytes is not None:
            limit.add_metric(values, sample.memory_limit_bytes)
        received.add_metric(values, sample.network_rx_bytes)
        sent.add_metric(values, sample.network_tx_bytes)
    yield from (cpu, memory, limit, received, sent)
