"""What the marketplace part of the store hands out and takes in: frozen values and its errors.

Kept apart from `values.py` (jobs and users) so the marketplace can grow without touching the
job store. Items are identified by a short random key; the API shows it as a global ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from server.shapes.item_kind import ItemKind
from server.shapes.store_errors import StoreError

# Every user belongs to this group, as every user may submit to the virtual cluster `default`.
EVERYONE_GROUP = "default"


class Visibility(StrEnum):
    PUBLIC = "public"  # every user
    PRIVATE = "private"  # the owner (and admins) only
    GROUPS = "groups"  # the owner and members of the listed groups (virtual clusters)


class ItemSort(StrEnum):
    RECENT = "recent"  # most recently published or changed first
    STARS = "stars"
    SUBMITS = "submits"


class LabelKind(StrEnum):
    TAG = "tag"
    CATEGORY = "category"
    GROUP = "group"  # a group the item is shared with


@dataclass(frozen=True, slots=True)
class MarketplaceItem:
    """An item as of its latest version (`content` is read separately, per version)."""

    key: str
    name: str
    kind: ItemKind
    owner_id: int
    owner: str
    version: str  # the latest version
    summary: str | None
    description: str | None
    tags: tuple[str, ...]
    categories: tuple[str, ...]
    visibility: Visibility
    groups: tuple[str, ...]
    stars: int
    submits: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ItemVersion:
    item_key: str
    version: str
    content: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ItemDetails:
    """The descriptive fields of an item, set when it is published and changed by updates."""

    summary: str | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    visibility: Visibility = Visibility.PUBLIC
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads the marketplace: admins see everything, others what is shared with them."""

    user_id: int
    admin: bool = False
    groups: frozenset[str] = frozenset({EVERYONE_GROUP})

    def may_see(self, item: MarketplaceItem) -> bool:
        """The rule `MarketplaceStore.list_items` applies in SQL, for one item in hand."""
        if self.admin or item.owner_id == self.user_id:
            return True
        if item.visibility is Visibility.PUBLIC:
            return True
        return item.visibility is Visibility.GROUPS and bool(self.groups & set(item.groups))

    def may_change(self, item: MarketplaceItem) -> bool:
        return self.admin or item.owner_id == self.user_id


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """Which items to list; every field given must match."""

    kind: ItemKind | None = None
    tag: str | None = None  # any of the item's tags, case-insensitively
    category: str | None = None
    search: str | None = None  # a substring of name, summary or description, case-insensitively
    owner: str | None = None  # the owner's user name
    name: str | None = None  # the exact name


@dataclass(frozen=True, slots=True)
class ItemCursor:
    """A position in an item list: the sort it belongs to, the sort value and the key."""

    sort: ItemSort
    value: Any  # updated_at for RECENT, a count otherwise
    key: str


@dataclass(frozen=True, slots=True)
class ItemPage:
    items: list[MarketplaceItem] = field(default_factory=list)
    has_next: bool = False
    sort: ItemSort = ItemSort.RECENT

    def cursor_of(self, item: MarketplaceItem) -> ItemCursor:
        return ItemCursor(self.sort, sort_value(item, self.sort), item.key)


def sort_value(item: MarketplaceItem, sort: ItemSort) -> Any:
    if sort is ItemSort.STARS:
        return item.stars
    if sort is ItemSort.SUBMITS:
        return item.submits
    return item.updated_at


@dataclass(frozen=True, slots=True)
class PublishResult:
    item: MarketplaceItem
    created: bool  # a new item (else a new version of an existing one, or nothing new)
    unchanged: bool  # that version was published before with the same content: nothing written
    version: str  # the version published (or found)


@dataclass(frozen=True, slots=True)
class Storage:
    """A storage an admin defined, and who may use it besides admins."""

    name: str
    source: str  # an absolute host directory, or a Docker volume name
    is_volume: bool
    read_only: bool
    users: tuple[str, ...]
    groups: tuple[str, ...]
    created_at: datetime


# --- errors ------------------------------------------------------------------------------------


class UnknownItem(StoreError):
    """No item has that key."""


class NameTaken(StoreError):
    """Another user's item has that name (the message does not say whose, nor whether the
    publisher may see it: a private item's owner and existence stay private)."""


class VersionExists(StoreError):
    """The item has that version already, with other content."""


class KindMismatch(StoreError):
    """A new version would change what kind of item it is."""


class NotItemOwner(StoreError):
    """Only the item's owner or an admin may do that."""


class StorageExists(StoreError):
    """A storage with that name exists already."""
