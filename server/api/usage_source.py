"""How this server measures what instances use, or why it does not: what a job's metrics and
the cluster's nodes both tell beside their figures, so neither domain imports the other for it.
"""

from __future__ import annotations

from server.api.context import Runtime

SIMULATED_GPUS = "simulated: no utilization"


def source_of(runtime: Runtime) -> str:
    """How this server measures, or why it does not."""
    if runtime.usage is not None:
        return runtime.usage.source()
    if runtime.backend is None:
        return "not measured: this server runs no backend"
    from backends.usage import SamplesUsage

    if isinstance(runtime.backend, SamplesUsage):
        return "not measured: sampling is off (PAIGRAPH_USAGE_INTERVAL=0)"
    return f"not measured: the {runtime.backend_name} backend cannot measure what instances use"
