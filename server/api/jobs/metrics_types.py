"""What instances use, as the API shows it: an instance's series, a job's per role, the live
figures of a job's running instances.

Series come from the stored points (server.store.usage, shaped by server.api.jobs.usage_series);
live figures from the server's sampler (server.app.usage_sampler). Every field is reached through
a job the viewer may read (server.api.job_access).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import strawberry

from server.api.context import Info, Runtime
from server.api.errors import ApiError
from server.api.jobs.usage_series import Reading, Spread, coarser, readings, spread
from server.api.loaders import UsageByInstance
from server.api.usage_source import SIMULATED_GPUS, source_of
from server.app.usage_sampler import LiveUsage
from server.jobs.exit_codes import spec_for
from server.protocol.model import TaskRole as SpecTaskRole
from server.shapes.values import Instance, StoredUsage

MAX_STEP = 86_400
_OOM_CODE = spec_for(-1200).code


@strawberry.type(
    description="A figure over time, as two lists of one length (what charts draw from): "
    "`times`, seconds since 1970-01-01 UTC, ascending, and the `values` then. Times without a "
    "value (a rate's first point) are left out."
)
class MetricSeries:
    times: list[float]
    values: list[float]


@strawberry.type(
    description="A figure of a task role over time, as lists of one length: at each of "
    "`times` (seconds since 1970-01-01 UTC), the sum over the instances measured then, the "
    "least and the most one instance used, and how many instances had a value."
)
class SpreadSeries:
    times: list[float]
    sums: list[float]
    mins: list[float]
    maxes: list[float]
    instances: list[int]


@strawberry.type(description="What an instance asked for, to draw beside what it used.")
class ResourceRequestLine:
    cpu_cores: float
    memory_bytes: float
    gpus: int


@strawberry.type(
    description="What one task instance used over time. CPU in cores, memory in bytes, network "
    "in bytes per second; GPU figures only where the instance has real GPUs."
)
class InstanceMetrics:
    source: str = strawberry.field(
        description="How the figures are measured, or why there are none."
    )
    step: int = strawberry.field(
        description="Seconds between points: the sampling interval for the last hour, 60 for "
        "older points, or the `step` asked for."
    )
    cpu_cores: MetricSeries
    memory_bytes: MetricSeries
    memory_limit_bytes: MetricSeries
    network_rx_bytes_per_second: MetricSeries
    network_tx_bytes_per_second: MetricSeries
    gpu_utilization: MetricSeries = strawberry.field(description="0 to 1.")
    gpu_memory_bytes: MetricSeries
    gpu_note: str | None = strawberry.field(
        description='Why GPU series are empty although GPUs were given ("simulated: no '
        'utilization"); null otherwise.'
    )
    request: ResourceRequestLine
    oom_killed_at: datetime | None = strawberry.field(
        description="When the instance was killed for using more memory than it asked for."
    )


@strawberry.type(description="What a task role's instances used over time, together.")
class RoleMetrics:
    task_role: str
    instances: int = strawberry.field(description="Instances with any point in the range.")
    request: ResourceRequestLine = strawberry.field(description="Per instance.")
    cpu_cores: SpreadSeries
    memory_bytes: SpreadSeries
    network_rx_bytes_per_second: SpreadSeries
    network_tx_bytes_per_second: SpreadSeries
    gpu_utilization: SpreadSeries


@strawberry.type(description="What a job's current attempt used over time, per task role.")
class JobMetrics:
    source: str
    step: int
    roles: list[RoleMetrics]


@strawberry.type(description="What a running instance uses now.")
class InstanceUsage:
    task_role: str
    index: int
    attempt: int
    at: datetime
    cpu_cores: float
    memory_bytes: float
    memory_limit_bytes: float | None
    network_rx_bytes_per_second: float | None = strawberry.field(
        description="Null until two samples were taken."
    )
    network_tx_bytes_per_second: float | None
    gpu_utilization: float | None = strawberry.field(description="Null without real GPUs.")
    gpu_memory_bytes: float | None

    @classmethod
    def of(cls, live: LiveUsage) -> InstanceUsage:
        s = live.sample
        return cls(
            task_role=s.key.role,
            index=s.key.index,
            attempt=s.key.attempt,
            at=s.at,
            cpu_cores=s.cpu_cores,
            memory_bytes=float(s.memory_bytes),
            memory_limit_bytes=_float(s.memory_limit_bytes),
            network_rx_bytes_per_second=live.rx_bytes_per_second,
            network_tx_bytes_per_second=live.tx_bytes_per_second,
            gpu_utilization=s.gpu_utilization,
            gpu_memory_bytes=_float(s.gpu_memory_bytes),
        )


@strawberry.type(description="One round of measurements of a job's running instances.")
class JobUsage:
    at: datetime
    source: str
    instances: list[InstanceUsage]


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


# --- building them ----------------------------------------------------------------------------


def checked_step(step: int | None) -> int | None:
    if step is not None and not 1 <= step <= MAX_STEP:
        raise ApiError(f"step: must be from 1 to {MAX_STEP} seconds, got {step}", "BAD_ARGUMENT")
    return step


def request_line(role: SpecTaskRole | None) -> ResourceRequestLine:
    if role is None:
        return ResourceRequestLine(cpu_cores=0.0, memory_bytes=0.0, gpus=0)
    res = role.resources
    return ResourceRequestLine(
        cpu_cores=float(res.cpu), memory_bytes=float(res.memory_mb << 20), gpus=res.gpu
    )


def _series(found: Sequence[Reading], figure: str) -> MetricSeries:
    times, values = [], []
    for r in found:
        value = getattr(r, figure)
        if value is not None:
            times.append(r.at.timestamp())
            values.append(value)
    return MetricSeries(times=times, values=values)


def oom_killed_at(instance: Instance) -> datetime | None:
    if instance.exit_code == _OOM_CODE or "out of memory" in (instance.exit_reason or ""):
        return instance.finished_at or instance.started_at
    return None


def instance_metrics(
    runtime: Runtime,
    points: Sequence[StoredUsage],
    step: int | None,
    role: SpecTaskRole | None,
    instance: Instance,
) -> InstanceMetrics:
    found = coarser(readings(points), step)
    request = request_line(role)
    gpu_points = _series(found, "gpu_utilization")
    return InstanceMetrics(
        source=source_of(runtime),
        step=step or min((r.step for r in found), default=_interval(runtime)),
        cpu_cores=_series(found, "cpu_cores"),
        memory_bytes=_series(found, "memory_bytes"),
        memory_limit_bytes=_series(found, "memory_limit_bytes"),
        network_rx_bytes_per_second=_series(found, "rx_per_second"),
        network_tx_bytes_per_second=_series(found, "tx_per_second"),
        gpu_utilization=gpu_points,
        gpu_memory_bytes=_series(found, "gpu_memory_bytes"),
        gpu_note=_gpu_note(runtime, request.gpus, bool(gpu_points.times)),
        request=request,
        oom_killed_at=oom_killed_at(instance),
    )


def _gpu_note(runtime: Runtime, gpus: int, measured: bool) -> str | None:
    if gpus == 0 or measured:
        return None
    if runtime.backend_name == "docker":
        return SIMULATED_GPUS
    return "not measured: no GPU figures from the cluster"


def _interval(runtime: Runtime) -> int:
    return round(runtime.usage.interval) if runtime.usage is not None else 5


def job_metrics(
    runtime: Runtime,
    points: Sequence[StoredUsage],
    step: int | None,
    roles: Sequence[SpecTaskRole],
) -> JobMetrics:
    by_instance: dict[tuple[str, int], list[StoredUsage]] = {}
    for p in points:
        by_instance.setdefault((p.role, p.index), []).append(p)
    result = []
    steps: set[int] = set()
    for role in roles:
        series = [
            coarser(readings(found), step)
            for (name, _), found in sorted(by_instance.items())
            if name == role.name
        ]
        steps.update(r.step for s in series for r in s)
        result.append(
            RoleMetrics(
                task_role=role.name,
                instances=sum(1 for s in series if s),
                request=request_line(role),
                cpu_cores=_spread(spread(series, lambda r: r.cpu_cores)),
                memory_bytes=_spread(spread(series, lambda r: r.memory_bytes)),
                network_rx_bytes_per_second=_spread(spread(series, lambda r: r.rx_per_second)),
                network_tx_bytes_per_second=_spread(spread(series, lambda r: r.tx_per_second)),
                gpu_utilization=_spread(spread(series, lambda r: r.gpu_utilization)),
            )
        )
    return JobMetrics(
        source=source_of(runtime), step=step or min(steps, default=_interval(runtime)), roles=result
    )


def _spread(found: list[Spread]) -> SpreadSeries:
    return SpreadSeries(
        times=[s.at.timestamp() for s in found],
        sums=[s.total for s in found],
        mins=[s.least for s in found],
        maxes=[s.most for s in found],
        instances=[s.instances for s in found],
    )


async def stored_points(
    info: Info, job_id: str, since: datetime | None, attempt: int
) -> UsageByInstance:
    """The attempt's points from `since` by instance, read once per request and job (through
    the request's loader) however many instances ask."""
    if since is not None and since.tzinfo is None:
        raise ApiError("since: give a time with its zone (e.g. ...Z)", "BAD_ARGUMENT")
    return await info.context.loaders.usage.load((job_id, attempt, since)) or {}
