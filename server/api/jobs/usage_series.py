"""Stored usage points turned into the series people draw: per instance (network totals
become rates, points optionally averaged over a coarser step) and per role (sums over the
instances, and the spread between the least and the most used instance).

The sampler stamps every sample of a round with the round's time, and compaction averages
whole minutes, so the instances of a job share their points' times and line up exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from server.shapes.values import StoredUsage


@dataclass(frozen=True, slots=True)
class Reading:
    """What one instance used at one point, network as rates (None: no earlier point)."""

    at: datetime
    step: int
    cpu_cores: float
    memory_bytes: float
    memory_limit_bytes: float | None
    rx_per_second: float | None
    tx_per_second: float | None
    gpu_utilization: float | None
    gpu_memory_bytes: float | None


def readings(points: Sequence[StoredUsage]) -> list[Reading]:
    """One instance's points in time order as readings, rates from consecutive totals (a total
    that went down, a new run of the instance, counts from zero)."""
    result = []
    before: StoredUsage | None = None
    for p in points:
        rx = tx = None
        if before is not None:
            seconds = (p.at - before.at).total_seconds()
            if seconds > 0:
                rx = _grown(before.network_rx_bytes, p.network_rx_bytes) / seconds
                tx = _grown(before.network_tx_bytes, p.network_tx_bytes) / seconds
        result.append(
            Reading(
                at=p.at,
                step=p.step,
                cpu_cores=p.cpu_cores,
                memory_bytes=float(p.memory_bytes),
                memory_limit_bytes=_float(p.memory_limit_bytes),
                rx_per_second=rx,
                tx_per_second=tx,
                gpu_utilization=p.gpu_utilization,
                gpu_memory_bytes=_float(p.gpu_memory_bytes),
            )
        )
        before = p
    return result


def _grown(before: int, now: int) -> int:
    return now - before if now >= before else now


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def coarser(found: Sequence[Reading], step: int | None) -> list[Reading]:
    """The readings averaged over buckets of `step` seconds (times at each bucket's start);
    as they are without a step, or for points already as coarse."""
    if not step:
        return list(found)
    buckets: dict[datetime, list[Reading]] = defaultdict(list)
    for r in found:
        buckets[_floor(r.at, step)].append(r)
    return [_mean(at, step, group) for at, group in sorted(buckets.items())]


def _mean(at: datetime, step: int, group: list[Reading]) -> Reading:
    return Reading(
        at=at,
        step=max(step, *(r.step for r in group)),
        cpu_cores=sum(r.cpu_cores for r in group) / len(group),
        memory_bytes=sum(r.memory_bytes for r in group) / len(group),
        memory_limit_bytes=_mean_of(r.memory_limit_bytes for r in group),
        rx_per_second=_mean_of(r.rx_per_second for r in group),
        tx_per_second=_mean_of(r.tx_per_second for r in group),
        gpu_utilization=_mean_of(r.gpu_utilization for r in group),
        gpu_memory_bytes=_mean_of(r.gpu_memory_bytes for r in group),
    )


def _mean_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _floor(moment: datetime, seconds: int) -> datetime:
    stamp = moment.astimezone(UTC).timestamp()
    return datetime.fromtimestamp(stamp - stamp % seconds, UTC)


@dataclass(frozen=True, slots=True)
class Spread:
    """One point of a role: the sum over its instances measured then, and the least and the
    most any one of them used."""

    at: datetime
    total: float
    least: float
    most: float
    instances: int


def spread(
    per_instance: Iterable[Sequence[Reading]], figure: Callable[[Reading], float | None]
) -> list[Spread]:
    """The role's series of one figure, over the times any instance has a value for it."""
    by_time: dict[datetime, list[float]] = defaultdict(list)
    for series in per_instance:
        for r in series:
            value = figure(r)
            if value is not None:
                by_time[r.at].append(value)
    return [
        Spread(at=at, total=sum(values), least=min(values), most=max(values), instances=len(values))
        for at, values in sorted(by_time.items())
    ]
