"""One app's metrics: its own registry (several apps in one process never share a series), the
instruments fed where things happen and the collector read at each scrape."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest

from server.metrics.api import ApiTimings
from server.metrics.jobs import JobMetrics
from server.metrics.scrape import LatestUsage, ScrapeCollector
from server.metrics.settings import MetricsSettings, metrics_settings

if TYPE_CHECKING:
    from server.api.context import Runtime


class AppMetrics:
    """What /metrics serves for one app. `latest_usage` (settable once the usage sampler runs)
    gives the per-instance series; without it there are none."""

    def __init__(
        self,
        settings: MetricsSettings | None = None,
        latest_usage: LatestUsage | None = None,
    ) -> None:
        self.settings = settings or metrics_settings()
        self.registry = CollectorRegistry(auto_describe=False)
        self.jobs = JobMetrics(self.registry)
        self.api = ApiTimings(self.registry)
        self.scrape = ScrapeCollector(self.settings)
        self.scrape.latest_usage = latest_usage
        self.registry.register(self.scrape)
        self.scraping = asyncio.Lock()  # one scrape at a time: each serves its own reading

    async def exposition(self, runtime: Runtime) -> bytes:
        """The text a scrape answers: the server read now, then written off the loop."""
        async with self.scraping:
            self.scrape.reading = await self.scrape.read(runtime)
            return await asyncio.to_thread(generate_latest, self.registry)

    @property
    def latest_usage(self) -> LatestUsage | None:
        return self.scrape.latest_usage

    @latest_usage.setter
    def latest_usage(self, source: LatestUsage | None) -> None:
        self.scrape.latest_usage = source
