"""Marketplace items, their versions, labels (tags, categories, shared groups) and stars;
storages an admin defines, and who may use them.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)
_KEY = sa.String(32)


def _item_key(constraint: str) -> sa.Column[str]:
    """An item key column that belongs to the item: deleting the item deletes the row."""
    return sa.Column(
        "item_id",
        _KEY,
        sa.ForeignKey("marketplace_items.id", ondelete="CASCADE", name=constraint),
        nullable=False,
    )


def upgrade() -> None:
    op.create_table(
        "marketplace_items",
        sa.Column("id", _KEY, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_marketplace_items_owner"),
            nullable=False,
        ),
        sa.Column("latest_version", sa.String(128), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("visibility", sa.String(8), nullable=False),
        sa.Column("star_count", sa.Integer(), nullable=False),
        sa.Column("submit_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.UniqueConstraint("name", name="uq_marketplace_items_name"),
    )
    op.create_index("ix_marketplace_items_owner", "marketplace_items", ["owner_id"])
    op.create_index("ix_marketplace_items_updated", "marketplace_items", ["updated_at", "id"])
    op.create_index("ix_marketplace_items_stars", "marketplace_items", ["star_count", "id"])
    op.create_index("ix_marketplace_items_submits", "marketplace_items", ["submit_count", "id"])
    op.create_table(
        "marketplace_item_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        _item_key("fk_marketplace_versions_item"),
        sa.Column("version", sa.String(128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.UniqueConstraint("item_id", "version", name="uq_marketplace_item_versions_version"),
    )
    op.create_table(
        "marketplace_item_labels",
        _item_key("fk_marketplace_labels_item"),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("item_id", "kind", "value"),
    )
    op.create_index(
        "ix_marketplace_item_labels_value", "marketplace_item_labels", ["kind", "value"]
    )
    op.create_table(
        "marketplace_stars",
        _item_key("fk_marketplace_stars_item"),
        sa.Column(
            "user_id",
            sa.Integer(),
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_marketplace_stars_user"),
            nullable=False,
        ),
        sa.Column("created_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("item_id", "user_id"),
    )
    op.create_index("ix_marketplace_stars_user", "marketplace_stars", ["user_id"])
    op.create_table(
        "storages",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("is_volume", sa.Boolean(), nullable=False),
        sa.Column("read_only", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.UniqueConstraint("name", name="uq_storages_name"),
    )
    op.create_table(
        "storage_grants",
        sa.Column(
            "storage_id",
            sa.Integer(),
            sa.ForeignKey("storages.id", ondelete="CASCADE", name="fk_storage_grants_storage"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("storage_id", "kind", "subject"),
    )


def downgrade() -> None:
    op.drop_table("storage_grants")
    op.drop_table("storages")
    op.drop_index("ix_marketplace_stars_user", table_name="marketplace_stars")
    op.drop_table("marketplace_stars")
    op.drop_index("ix_marketplace_item_labels_value", table_name="marketplace_item_labels")
    op.drop_table("marketplace_item_labels")
    op.drop_table("marketplace_item_versions")
    for index in (
        "ix_marketplace_items_submits",
        "ix_marketplace_items_stars",
        "ix_marketplace_items_updated",
        "ix_marketplace_items_owner",
    ):
        op.drop_index(index, table_name="marketplace_items")
    op.drop_table("marketplace_items")
