"""What each task instance used over time (CPU, memory, network, GPU), kept with its job.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "usage_samples",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column(
            "job_id",
            sa.String(),
            sa.ForeignKey("jobs.id", ondelete="CASCADE", name="fk_usage_samples_job"),
            nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("cpu_cores", sa.Float(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("memory_limit_bytes", sa.BigInteger(), nullable=True),
        sa.Column("network_rx_bytes", sa.BigInteger(), nullable=False),
        sa.Column("network_tx_bytes", sa.BigInteger(), nullable=False),
        sa.Column("gpu_utilization", sa.Float(), nullable=True),
        sa.Column("gpu_memory_bytes", sa.BigInteger(), nullable=True),
    )
    op.create_index(
        "ix_usage_samples_instance",
        "usage_samples",
        ["job_id", "attempt", "role", "task_index", "at"],
    )
    op.create_index("ix_usage_samples_step_at", "usage_samples", ["step", "at"])


def downgrade() -> None:
    op.drop_index("ix_usage_samples_step_at", table_name="usage_samples")
    op.drop_index("ix_usage_samples_instance", table_name="usage_samples")
    op.drop_table("usage_samples")
