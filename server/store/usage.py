"""What instances used, kept with their jobs and bounded.

Samples are stored as measured for an hour, then replaced by one mean per instance and minute
(`compact_usage`), and an instance keeps at most `USAGE_CAP` points: the oldest go first. A
minute is compacted only once all of it is an hour old, so no minute is ever averaged twice.
Rows reference their job with ON DELETE CASCADE: deleting a job deletes its samples.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session
from sqlmodel import col

from server.shapes.values import StoredUsage
from server.store.db import Repository
from server.store.tables import JobRow, UsageRow

RAW_FOR = timedelta(hours=1)  # samples are kept as measured this long
BUCKET_SECONDS = 60  # then as means over this many seconds
USAGE_CAP = 20_000  # points kept per instance (and so per series)

_COLUMNS = (
    UsageRow.job_id,
    UsageRow.attempt,
    UsageRow.role,
    UsageRow.task_index,
    UsageRow.at,
    UsageRow.step,
    UsageRow.cpu_cores,
    UsageRow.memory_bytes,
    UsageRow.memory_limit_bytes,
    UsageRow.network_rx_bytes,
    UsageRow.network_tx_bytes,
    UsageRow.gpu_utilization,
    UsageRow.gpu_memory_bytes,
)
_InstanceOf = tuple[str, int, str, int]


class _InstanceKey(Protocol):
    @property
    def job_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def index(self) -> int: ...


class MeasuredUse(Protocol):
    """What the store reads of one usage sample: the fields of `backends.usage.UsageSample`,
    named here so the store need not import the backends (which make the samples)."""

    @property
    def key(self) -> _InstanceKey: ...
    @property
    def at(self) -> datetime: ...
    @property
    def cpu_cores(self) -> float: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def memory_limit_bytes(self) -> int | None: ...
    @property
    def network_rx_bytes(self) -> int: ...
    @property
    def network_tx_bytes(self) -> int: ...
    @property
    def gpu_utilization(self) -> float | None: ...
    @property
    def gpu_memory_bytes(self) -> int | None: ...


class UsageStore(Repository):
    def add_usage(self, samples: Sequence[MeasuredUse], step: int) -> int:
        """Store one round of samples in one transaction; samples of jobs that are no longer
        stored (deleted meanwhile) are dropped. Returns how many were stored."""
        if not samples:
            return 0
        with self._write() as session:
            known = set(
                session.scalars(
                    select(col(JobRow.id)).where(
                        col(JobRow.id).in_({s.key.job_id for s in samples})
                    )
                )
            )
            rows = [_row(s, step) for s in samples if s.key.job_id in known]
            if rows:
                session.execute(insert(UsageRow), rows)
            return len(rows)

    def usage_of(
        self,
        job_id: str,
        *,
        since: datetime | None = None,
        attempt: int | None = None,
        role: str | None = None,
        index: int | None = None,
    ) -> list[StoredUsage]:
        """A job's points (of one attempt, role, instance when given), by instance then time."""
        query = select(*(col(c) for c in _COLUMNS)).where(col(UsageRow.job_id) == job_id)
        if since is not None:
            query = query.where(col(UsageRow.at) >= since)
        if attempt is not None:
            query = query.where(col(UsageRow.attempt) == attempt)
        if role is not None:
            query = query.where(col(UsageRow.role) == role)
        if index is not None:
            query = query.where(col(UsageRow.task_index) == index)
        query = query.order_by(
            col(UsageRow.attempt), col(UsageRow.role), col(UsageRow.task_index), col(UsageRow.at)
        )
        with self._read() as session:
            return [StoredUsage._make(row) for row in session.execute(query)]

    def compact_usage(
        self,
        now: datetime,
        *,
        raw_for: timedelta = RAW_FOR,
        bucket_seconds: int = BUCKET_SECONDS,
        cap: int = USAGE_CAP,
    ) -> int:
        """Replace samples older than `raw_for` by per-minute means (whole minutes only), then
        drop each touched instance's oldest points beyond `cap`. Returns the samples replaced."""
        cutoff = _floor(now - raw_for, bucket_seconds)
        fine = (col(UsageRow.step) < bucket_seconds, col(UsageRow.at) < cutoff)
        with self._write() as session:
            found = session.execute(select(*(col(c) for c in _COLUMNS)).where(*fine)).all()
            if not found:
                return 0
            buckets: dict[tuple[_InstanceOf, datetime], list[StoredUsage]] = defaultdict(list)
            for row in found:
                point = StoredUsage._make(row)
                instance = (point.job_id, point.attempt, point.role, point.index)
                buckets[(instance, _floor(point.at, bucket_seconds))].append(point)
            session.execute(delete(UsageRow).where(*fine))
            session.execute(
                insert(UsageRow),
                [_mean(points, at, bucket_seconds) for (_, at), points in buckets.items()],
            )
            for instance in {instance for instance, _ in buckets}:
                _cap(session, instance, cap)
            return len(found)


def _row(sample: MeasuredUse, step: int) -> dict[str, Any]:
    key = sample.key
    return {
        "job_id": key.job_id,
        "attempt": key.attempt,
        "role": key.role,
        "task_index": key.index,
        "at": sample.at,
        "step": step,
        "cpu_cores": sample.cpu_cores,
        "memory_bytes": sample.memory_bytes,
        "memory_limit_bytes": sample.memory_limit_bytes,
        "network_rx_bytes": sample.network_rx_bytes,
        "network_tx_bytes": sample.network_tx_bytes,
        "gpu_utilization": sample.gpu_utilization,
        "gpu_memory_bytes": sample.gpu_memory_bytes,
    }


def _mean(points: list[StoredUsage], at: datetime, step: int) -> dict[str, Any]:
    """One point for a minute: means of what is measured now, the last of the totals."""
    last = max(points, key=lambda p: p.at)
    return {
        "job_id": last.job_id,
        "attempt": last.attempt,
        "role": last.role,
        "task_index": last.index,
        "at": at,
        "step": step,
        "cpu_cores": sum(p.cpu_cores for p in points) / len(points),
        "memory_bytes": round(sum(p.memory_bytes for p in points) / len(points)),
        "memory_limit_bytes": last.memory_limit_bytes,
        "network_rx_bytes": last.network_rx_bytes,
        "network_tx_bytes": last.network_tx_bytes,
        "gpu_utilization": _mean_of(p.gpu_utilization for p in points),
        "gpu_memory_bytes": _rounded(_mean_of(p.gpu_memory_bytes for p in points)),
    }


def _mean_of(values: Iterable[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


def _cap(session: Session, instance: _InstanceOf, cap: int) -> None:
    job_id, attempt, role, index = instance
    mine = (
        col(UsageRow.job_id) == job_id,
        col(UsageRow.attempt) == attempt,
        col(UsageRow.role) == role,
        col(UsageRow.task_index) == index,
    )
    count = session.scalar(select(func.count()).select_from(UsageRow).where(*mine)) or 0
    if count <= cap:
        return
    first_kept = session.scalar(
        select(col(UsageRow.at)).where(*mine).order_by(col(UsageRow.at)).offset(count - cap)
    )
    session.execute(delete(UsageRow).where(*mine, col(UsageRow.at) < first_kept))


def _floor(moment: datetime, seconds: int) -> datetime:
    stamp = moment.astimezone(UTC).timestamp()
    return datetime.fromtimestamp(stamp - stamp % seconds, UTC)
