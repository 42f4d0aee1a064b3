"""What instances used, kept in the database (server.store.usage) on SQLite and PostgreSQL:
samples stay as measured for an hour, older ones become minute means, an instance keeps at
most 20,000 points, and a job's samples go with the job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlmodel import col

from backends.base import InstanceKey
from backends.usage import UsageSample
from server.store import Store
from server.store.db import session_scope
from server.store.tables import JobRow, UsageRow
from server.store.usage import USAGE_CAP
from tests.store_support import submit

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


def sample(job_id: str, at: datetime, cpu: float, memory: int, rx: int = 0, index: int = 0):
    return UsageSample(
        key=InstanceKey(job_id=job_id, attempt=1, role="worker", index=index),
        at=at,
        cpu_cores=cpu,
        memory_bytes=memory,
        memory_limit_bytes=512 << 20,
        network_rx_bytes=rx,
    )


def stored_rows(store: Store) -> int:
    with session_scope(store.engine) as session:
        return session.scalar(select(func.count()).select_from(UsageRow)) or 0


def test_samples_an_hour_old_become_one_mean_per_minute_and_newer_ones_stay(store: Store) -> None:
    owner, _ = store.create_user("ann")
    job, _ = submit(store, owner.id, "train", T0)
    # two hours of 5 s samples: cpu alternates 1 and 3 cores, so every minute's mean is 2
    rounds = [T0 + timedelta(seconds=5 * n) for n in range(2 * 720)]
    for chunk in range(0, len(rounds), 240):
        store.add_usage(
            [
                sample(job.id, at, 1.0 + 2 * (n % 2), 100 << 20, rx=1000 * n)
                for n, at in enumerate(rounds[chunk : chunk + 240], start=chunk)
            ],
            step=5,
        )
    now = T0 + timedelta(hours=2)

    replaced = store.compact_usage(now)

    assert replaced == 720  # the first hour's samples
    points = store.usage_of(job.id)
    minutes = [p for p in points if p.step == 60]
    fine = [p for p in points if p.step == 5]
    assert len(minutes) == 60 and len(fine) == 720
    assert all(p.at.second == 0 for p in minutes)
    assert {round(p.cpu_cores, 6) for p in minutes} == {2.0}
    assert {p.memory_bytes for p in minutes} == {100 << 20}
    # a counter keeps its minute's last total, so rates over minutes stay right
    assert minutes[0].network_rx_bytes == 1000 * 11
    assert max(p.at for p in minutes) < min(p.at for p in fine)
    assert store.compact_usage(now) == 0  # nothing is averaged twice


def test_an_instance_keeps_at_most_20000_points_dropping_the_oldest(store: Store) -> None:
    owner, _ = store.create_user("ann")
    job, _ = submit(store, owner.id, "long", T0)
    other, _ = submit(store, owner.id, "short", T0)
    minutes = USAGE_CAP + 150
    store.add_usage(
        [sample(job.id, T0 + timedelta(minutes=m), 1.0, m) for m in range(minutes)], step=5
    )
    store.add_usage([sample(other.id, T0, 0.5, 1)], step=5)

    store.compact_usage(T0 + timedelta(minutes=minutes, hours=1))

    kept = store.usage_of(job.id)
    assert len(kept) == USAGE_CAP
    assert kept[0].memory_bytes == 150  # the oldest 150 minutes went
    assert kept[-1].memory_bytes == minutes - 1
    assert len(store.usage_of(other.id)) == 1  # another job's instance is not touched


def test_a_jobs_samples_go_when_the_job_is_deleted(store: Store) -> None:
    owner, _ = store.create_user("ann")
    gone, _ = submit(store, owner.id, "gone", T0)
    kept, _ = submit(store, owner.id, "kept", T0)
    store.add_usage(
        [sample(gone.id, T0, 1.0, 1, index=i) for i in range(3)] + [sample(kept.id, T0, 1.0, 1)],
        step=5,
    )
    assert stored_rows(store) == 4

    with session_scope(store.engine, write=True) as session:
        session.execute(delete(JobRow).where(col(JobRow.id) == gone.id))

    assert store.usage_of(gone.id) == []
    assert stored_rows(store) == 1
    # a round measured while the job was deleted stores the other jobs' samples only
    assert store.add_usage([sample(gone.id, T0, 1.0, 1), sample(kept.id, T0, 1.0, 2)], 5) == 1
