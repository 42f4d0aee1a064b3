"""The latest use of each running instance, for readers outside the GraphQL API (the
Prometheus endpoint's per-instance gauges)."""

from __future__ import annotations

from backends.usage import UsageSample
from server.api.context import RuntimeSlot


class LatestUsage:
    """`latest_usage()` on a running app (`app.state.latest_usage`).

    Calling it returns `list[tuple[UsageSample, str]]`: the sample the last sampling round
    took of each instance running then, with the name of its job's user. Empty while the
    server starts or stops, when its backend measures nothing, or when sampling is off
    (PAIGRAPH_USAGE_INTERVAL=0). Cheap: it reads what the sampler keeps in memory, no query.
    """

    def __init__(self, slot: RuntimeSlot) -> None:
        self._slot = slot

    def __call__(self) -> list[tuple[UsageSample, str]]:
        runtime = self._slot.current
        if runtime is None or runtime.usage is None:
            return []
        return runtime.usage.latest_with_users()
