"""The marketplace's tables: items, their versions, labels (tags, categories, shared groups),
stars, and the storages an admin defines with who may use them.

Their shape is owned by migration 0002; `tests/store/test_store.py` checks that these classes and
the migrated schema agree on both databases. An item keeps the counts it is sorted by (stars,
submits) in its own row, updated in the transaction that changes them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from server.store.columns import UTCDateTime


class MarketplaceItemRow(SQLModel, table=True):
    """An item and its latest version's name; names are unique, so `marketplace://name/<name>`
    means one item."""

    __tablename__ = "marketplace_items"
    __table_args__ = (
        UniqueConstraint("name", name="uq_marketplace_items_name"),
        Index("ix_marketplace_items_updated", "updated_at", "id"),
        Index("ix_marketplace_items_stars", "star_count", "id"),
        Index("ix_marketplace_items_submits", "submit_count", "id"),
        Index("ix_marketplace_items_owner", "owner_id"),
    )

    id: str = Field(primary_key=True, sa_type=String(32))
    name: str = Field(sa_type=String(255))
    kind: str = Field(sa_type=String(16))
    owner_id: int = Field(
        sa_type=Integer,
        sa_column_args=[ForeignKey("users.id", name="fk_marketplace_items_owner")],
    )
    latest_version: str = Field(sa_type=String(128))
    summary: str | None = Field(default=None, sa_type=Text)
    description: str | None = Field(default=None, sa_type=Text)
    visibility: str = Field(sa_type=String(8))
    star_count: int = Field(default=0, sa_type=Integer)
    submit_count: int = Field(default=0, sa_type=Integer)
    created_at: datetime = Field(sa_type=UTCDateTime)
    updated_at: datetime = Field(sa_type=UTCDateTime)


class MarketplaceVersionRow(SQLModel, table=True):
    """One published version of an item: its YAML as published (secrets masked)."""

    __tablename__ = "marketplace_item_versions"
    __table_args__ = (
        UniqueConstraint("item_id", "version", name="uq_marketplace_item_versions_version"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    item_id: str = Field(
        sa_type=String(32),
        sa_column_args=[
            ForeignKey(
                "marketplace_items.id", ondelete="CASCADE", name="fk_marketplace_versions_item"
            )
        ],
    )
    version: str = Field(sa_type=String(128))
    content: str = Field(sa_type=Text)
    created_at: datetime = Field(sa_type=UTCDateTime)


class MarketplaceLabelRow(SQLModel, table=True):
    """A tag, a category, or a group the item is shared with; `position` keeps their order."""

    __tablename__ = "marketplace_item_labels"
    __table_args__ = (Index("ix_marketplace_item_labels_value", "kind", "value"),)

    item_id: str = Field(
        primary_key=True,
        sa_type=String(32),
        sa_column_args=[
            ForeignKey(
                "marketplace_items.id", ondelete="CASCADE", name="fk_marketplace_labels_item"
            )
        ],
    )
    kind: str = Field(primary_key=True, sa_type=String(16))
    value: str = Field(primary_key=True, sa_type=String(255))
    position: int = Field(default=0, sa_type=Integer)


class MarketplaceStarRow(SQLModel, table=True):
    __tablename__ = "marketplace_stars"
    __table_args__ = (Index("ix_marketplace_stars_user", "user_id"),)

    item_id: str = Field(
        primary_key=True,
        sa_type=String(32),
        sa_column_args=[
            ForeignKey("marketplace_items.id", ondelete="CASCADE", name="fk_marketplace_stars_item")
        ],
    )
    user_id: int = Field(
        primary_key=True,
        sa_type=Integer,
        sa_column_args=[
            ForeignKey("users.id", ondelete="CASCADE", name="fk_marketplace_stars_user")
        ],
    )
    created_at: datetime = Field(sa_type=UTCDateTime)


class StorageRow(SQLModel, table=True):
    """A storage an admin defined: a host directory or a Docker volume, read-only or not."""

    __tablename__ = "storages"
    __table_args__ = (UniqueConstraint("name", name="uq_storages_name"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=Integer)
    name: str = Field(sa_type=String(64))
    source: str = Field(sa_type=Text)
    is_volume: bool = Field(default=False, sa_type=Boolean)
    read_only: bool = Field(default=False, sa_type=Boolean)
    created_at: datetime = Field(sa_type=UTCDateTime)


class StorageGrantRow(SQLModel, table=True):
    """A user (`kind` user) or the members of a group (`kind` group) may use the storage."""

    __tablename__ = "storage_grants"

    storage_id: int = Field(
        primary_key=True,
        sa_type=Integer,
        sa_column_args=[
            ForeignKey("storages.id", ondelete="CASCADE", name="fk_storage_grants_storage")
        ],
    )
    kind: str = Field(primary_key=True, sa_type=String(8))
    subject: str = Field(primary_key=True, sa_type=String(64))
