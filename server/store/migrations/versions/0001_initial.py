"""Users, tokens, virtual clusters and membership; jobs, task instances and the job event log.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "user_id",
            sa.Integer(),
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_tokens_user"),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.UniqueConstraint("token_hash", name="uq_tokens_token_hash"),
    )
    op.create_index("ix_tokens_user", "tokens", ["user_id"])
    op.create_table(
        "virtual_clusters",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.UniqueConstraint("name", name="uq_virtual_clusters_name"),
    )
    op.create_table(
        "memberships",
        sa.Column(
            "user_id",
            sa.Integer(),
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_memberships_user"),
            primary_key=True,
        ),
        sa.Column(
            "virtual_cluster_id",
            sa.Integer(),
            sa.ForeignKey(
                "virtual_clusters.id", ondelete="CASCADE", name="fk_memberships_virtual_cluster"
            ),
            primary_key=True,
        ),
        sa.Column("created_at", _TIME, nullable=False),
    )
    op.create_index("ix_memberships_virtual_cluster", "memberships", ["virtual_cluster_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_jobs_owner"),
            nullable=False,
        ),
        sa.Column("virtual_cluster", sa.String(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=False),
        sa.Column("submitted_at", _TIME, nullable=False),
        sa.Column("started_at", _TIME, nullable=True),
        sa.Column("completed_at", _TIME, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("machine", sa.Text(), nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
    )
    op.create_index("ix_jobs_owner_state", "jobs", ["owner_id", "state"])
    op.create_index("ix_jobs_virtual_cluster", "jobs", ["virtual_cluster"])
    op.create_index("ix_jobs_name", "jobs", ["name"])
    op.create_index("ix_jobs_submitted", "jobs", ["submitted_at", "id"])
    op.create_table(
        "task_instances",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column(
            "job_id",
            sa.String(),
            sa.ForeignKey("jobs.id", ondelete="CASCADE", name="fk_task_instances_job"),
            nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("task_attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.Text(), nullable=True),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("host_ip", sa.String(64), nullable=True),
        sa.Column("ports", sa.JSON(), nullable=False),
        sa.Column("started_at", _TIME, nullable=True),
        sa.Column("finished_at", _TIME, nullable=True),
        sa.UniqueConstraint(
            "job_id", "attempt", "role", "task_index", name="uq_task_instances_key"
        ),
    )
    op.create_table(
        "job_events",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column(
            "job_id",
            sa.String(),
            sa.ForeignKey("jobs.id", ondelete="CASCADE", name="fk_job_events_job"),
            nullable=False,
        ),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("state", sa.String(16), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("task_role", sa.String(), nullable=True),
        sa.Column("task_index", sa.Integer(), nullable=True),
        sa.UniqueConstraint("job_id", "sequence", name="uq_job_events_sequence"),
    )


def downgrade() -> None:
    op.drop_table("job_events")
    op.drop_table("task_instances")
    for index in ("ix_jobs_submitted", "ix_jobs_name", "ix_jobs_virtual_cluster"):
        op.drop_index(index, table_name="jobs")
    op.drop_index("ix_jobs_owner_state", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index("ix_memberships_virtual_cluster", table_name="memberships")
    op.drop_table("memberships")
    op.drop_table("virtual_clusters")
    op.drop_index("ix_tokens_user", table_name="tokens")
    op.drop_table("tokens")
    op.drop_table("users")
