"""The tables. Their shape is owned by the migrations in `migrations/versions/`; a test checks
that these classes and the migrated schema agree on both databases.

Rows stay inside `server.store`: the repository hands out the plain values of `values.py`.
Large documents (the resolved spec, the job machine's snapshot) are pydantic JSON in text
columns, written and read with pydantic's own (fast, exact) JSON; small structured values
(an instance's ports) use the database's JSON type.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlmodel import Field, SQLModel

from server.store.columns import UTCDateTime

# 64-bit ids for the tables that grow fastest; SQLite needs INTEGER for its rowid primary key.
_BIG_ID = BigInteger().with_variant(Integer, "sqlite")


class UserRow(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("name", name="uq_users_name"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    name: str = Field(sa_type=String(64))
    admin: bool = Field(default=False, sa_type=Boolean)
    created_at: datetime = Field(sa_type=UTCDateTime)
    # Set when the user was removed: no token, no memberships, the name kept on the record.
    removed_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)


class TokenRow(SQLModel, table=True):
    """A bearer token, kept only as the SHA-256 of the token text."""

    __tablename__ = "tokens"
    __table_args__ = (
        UniqueConstraint("token_hash", name="uq_tokens_token_hash"),
        Index("ix_tokens_user", "user_id"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    user_id: int = Field(
        sa_type=Integer,
        sa_column_args=[ForeignKey("users.id", ondelete="CASCADE", name="fk_tokens_user")],
    )
    token_hash: str = Field(sa_type=String(64))
    created_at: datetime = Field(sa_type=UTCDateTime)


class VirtualClusterRow(SQLModel, table=True):
    __tablename__ = "virtual_clusters"
    __table_args__ = (UniqueConstraint("name", name="uq_virtual_clusters_name"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    name: str = Field(sa_type=String())
    created_at: datetime = Field(sa_type=UTCDateTime)


class MembershipRow(SQLModel, table=True):
    """A user may submit to a virtual cluster when a row links them."""

    __tablename__ = "memberships"
    __table_args__ = (Index("ix_memberships_virtual_cluster", "virtual_cluster_id"),)

    user_id: int = Field(
        primary_key=True,
        sa_type=Integer,
        sa_column_args=[ForeignKey("users.id", ondelete="CASCADE", name="fk_memberships_user")],
    )
    virtual_cluster_id: int = Field(
        primary_key=True,
        sa_type=Integer,
        sa_column_args=[
            ForeignKey(
                "virtual_clusters.id", ondelete="CASCADE", name="fk_memberships_virtual_cluster"
            )
        ],
    )
    created_at: datetime = Field(sa_type=UTCDateTime)


class JobRow(SQLModel, table=True):
    """A job: its current state (mirrored from `machine` for filtering) and its documents.

    `virtual_cluster` is the name as submitted, not a key: the clusters a backend offers come
    from its settings, membership rows only grant access. `last_sequence` is the sequence of the
    job's newest event; writers bump it under the row lock.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_owner_state", "owner_id", "state"),
        Index("ix_jobs_virtual_cluster", "virtual_cluster"),
        Index("ix_jobs_name", "name"),
        Index("ix_jobs_submitted", "submitted_at", "id"),
    )

    id: str = Field(primary_key=True, sa_type=String())
    name: str = Field(sa_type=String())
    owner_id: int = Field(
        sa_type=Integer,
        sa_column_args=[ForeignKey("users.id", name="fk_jobs_owner")],
    )
    virtual_cluster: str = Field(sa_type=String())
    state: str = Field(sa_type=String(16))
    state_reason: str = Field(sa_type=Text)
    submitted_at: datetime = Field(sa_type=UTCDateTime)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    completed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    attempt: int = Field(sa_type=Integer)
    retries: int = Field(sa_type=Integer)
    config: str = Field(sa_type=Text)  # as submitted, secrets masked
    spec: str = Field(sa_type=Text)  # JobSpec JSON (secrets are never part of it)
    machine: str = Field(sa_type=Text)  # MachineSnapshot JSON
    last_sequence: int = Field(default=0, sa_type=Integer)
    updated_at: datetime = Field(sa_type=UTCDateTime)
    # [{path, code, message}]: fields submitted that have no effect on this backend
    warnings: list[dict[str, object]] = Field(
        default_factory=list, sa_type=JSON, sa_column_kwargs={"server_default": text("'[]'")}
    )


class InstanceRow(SQLModel, table=True):
    """One task instance of one attempt; rows of earlier attempts stay as they ended."""

    __tablename__ = "task_instances"
    # The unique key starts with job_id, so it is also the index for "instances of these jobs".
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "role", "task_index", name="uq_task_instances_key"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    job_id: str = Field(
        sa_type=String(),
        sa_column_args=[ForeignKey("jobs.id", ondelete="CASCADE", name="fk_task_instances_job")],
    )
    attempt: int = Field(sa_type=Integer)
    role: str = Field(sa_type=String())
    task_index: int = Field(sa_type=Integer)
    task_attempt: int = Field(default=1, sa_type=Integer)
    state: str = Field(sa_type=String(16))
    state_reason: str = Field(sa_type=Text)
    exit_code: int | None = Field(default=None, sa_type=Integer)
    exit_reason: str | None = Field(default=None, sa_type=Text)
    node: str | None = Field(default=None, sa_type=String())
    host_ip: str | None = Field(default=None, sa_type=String(64))
    ports: dict[str, list[int]] = Field(default_factory=dict, sa_type=JSON)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class EventRow(SQLModel, table=True):
    """The append-only event log; (job_id, sequence) is unique and is the replay cursor."""

    __tablename__ = "job_events"
    __table_args__ = (UniqueConstraint("job_id", "sequence", name="uq_job_events_sequence"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    job_id: str = Field(
        sa_type=String(),
        sa_column_args=[ForeignKey("jobs.id", ondelete="CASCADE", name="fk_job_events_job")],
    )
    sequence: int = Field(sa_type=Integer)
    at: datetime = Field(sa_type=UTCDateTime)
    type: str = Field(sa_type=String(64))
    message: str | None = Field(default=None, sa_type=Text)
    state: str | None = Field(default=None, sa_type=String(16))
    attempt: int | None = Field(default=None, sa_type=Integer)
    task_role: str | None = Field(default=None, sa_type=String())
    task_index: int | None = Field(default=None, sa_type=Integer)


class UsageRow(SQLModel, table=True):
    """What one instance used at one moment (`step` 5: a sample as measured), or over one
    minute (`step` 60: the mean of that minute's samples, kept once they are an hour old).
    Network figures are byte totals since the container started; rates are derived on read.
    Rows go with their job."""

    __tablename__ = "usage_samples"
    __table_args__ = (
        Index("ix_usage_samples_instance", "job_id", "attempt", "role", "task_index", "at"),
        Index("ix_usage_samples_step_at", "step", "at"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=_BIG_ID)
    job_id: str = Field(
        sa_type=String(),
        sa_column_args=[ForeignKey("jobs.id", ondelete="CASCADE", name="fk_usage_samples_job")],
    )
    attempt: int = Field(sa_type=Integer)
    role: str = Field(sa_type=String())
    task_index: int = Field(sa_type=Integer)
    at: datetime = Field(sa_type=UTCDateTime)
    step: int = Field(sa_type=Integer)
    cpu_cores: float = Field(sa_type=Float)
    memory_bytes: int = Field(sa_type=BigInteger)
    memory_limit_bytes: int | None = Field(default=None, sa_type=BigInteger)
    network_rx_bytes: int = Field(sa_type=BigInteger)
    network_tx_bytes: int = Field(sa_type=BigInteger)
    gpu_utilization: float | None = Field(default=None, sa_type=Float)
    gpu_memory_bytes: int | None = Field(default=None, sa_type=BigInteger)
