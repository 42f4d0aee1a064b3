"""A job's warnings: the fields it was submitted with that have no effect, kept with it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # jobs stored before warnings were kept have none
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("warnings", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("warnings")
