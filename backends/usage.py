"""What an instance uses, as a backend measures it: the one shape shared by the samplers, the
metrics store, the GraphQL API and the Prometheus endpoint, so each can change on its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from backends.base import InstanceKey


class UsageSample(BaseModel):
    """One instance's resource use at one moment. Counters (network bytes) are totals since
    the container started; CPU is cores used over the interval before `at`. GPU figures are
    None where the instance's GPUs are simulated or the host has no real ones."""

    model_config = ConfigDict(frozen=True)

    key: InstanceKey
    at: datetime
    cpu_cores: float
    memory_bytes: int
    memory_limit_bytes: int | None = None
    network_rx_bytes: int = 0
    network_tx_bytes: int = 0
    gpu_utilization: float | None = None  # 0.0 to 1.0, summed over the instance's GPUs / count
    gpu_memory_bytes: int | None = None


@runtime_checkable
class SamplesUsage(Protocol):
    """A backend that can measure what its running instances use."""

    def usage_source(self) -> str:
        """How it measures (e.g. "cgroup v2", "docker stats stream", "metrics.k8s.io"), or why
        it cannot ("the cluster serves no metrics API"), shown to people beside the figures."""

    async def sample_usage(self) -> Sequence[UsageSample]:
        """The latest use of every running instance; cheap enough to call every 5 seconds."""
