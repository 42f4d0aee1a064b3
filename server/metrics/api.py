"""How long GraphQL operations take, by type: the Prometheus side of `server.api.timing`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

# Seconds: a cached query answers in about a millisecond, a page of jobs in tens of them.
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ApiTimings:
    """The runtime's `timings` (server.api.timing.OperationTimings) as a histogram."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.seconds = Histogram(
            "paigraph_api_request_duration_seconds",
            "GraphQL operations by type: queries and mutations from parsing to the answer, "
            "subscriptions from their start to their stream being ready.",
            ["operation"],
            buckets=API_BUCKETS,
            registry=registry,
        )
        for operation in ("query", "mutation", "subscription"):
            self.seconds.labels(operation)  # present from the start, at zero

    def observe(self, operation: str, seconds: float) -> None:
        self.seconds.labels(operation).observe(seconds)
