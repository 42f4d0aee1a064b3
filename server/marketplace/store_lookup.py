"""The marketplace as reference resolution sees it (`lookup.py`), backed by the store.

Visibility is decided here, with the same rule the API lists items by: an item the viewer may
not see is not found. A viewer's groups are the virtual clusters they belong to (read from the
store, so a Viewer built from a name alone is enough) plus any the caller names, and `default`,
which everyone belongs to.
"""

from __future__ import annotations

from server.marketplace.items import api_id, item_key
from server.marketplace.lookup import (
    ItemContent,
    StorageDefinition,
    StorageMode,
    Viewer,
)
from server.shapes.marketplace_values import EVERYONE_GROUP, MarketplaceItem, Reader
from server.shapes.values import User
from server.store import Store
from server.store.marketplace import storage_allows


def viewer_for(store: Store, user: User) -> Viewer:
    """The Viewer a stored user is: admin flag and groups (virtual clusters and `default`)."""
    reader = store.reader_for(user.id, admin=user.admin)
    return Viewer(name=user.name, admin=user.admin, groups=reader.groups)


def reader_of(store: Store, viewer: Viewer) -> Reader:
    """The store's Reader for a Viewer; an unknown name reads what is public (or everything,
    for an admin)."""
    user = store.user_named(viewer.name)
    if user is None:
        groups = frozenset({EVERYONE_GROUP, *viewer.groups})
        return Reader(user_id=-1, admin=viewer.admin, groups=groups)
    reader = store.reader_for(user.id, admin=viewer.admin or user.admin)
    return Reader(user_id=user.id, admin=reader.admin, groups=reader.groups | viewer.groups)


class StoreItemLookup:
    """`ItemLookup` on the store: the latest or a pinned version, as the viewer may see it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def by_id(self, item_id: str, viewer: Viewer) -> ItemContent | None:
        key = item_key(item_id)
        if key is None:
            return None
        return self._content(self.store.get_item(key), None, viewer)

    def by_name(self, name: str, version: str | None, viewer: Viewer) -> ItemContent | None:
        return self._content(self.store.item_named(name), version, viewer)

    def _content(
        self, item: MarketplaceItem | None, version: str | None, viewer: Viewer
    ) -> ItemContent | None:
        if item is None or not reader_of(self.store, viewer).may_see(item):
            return None
        found = self.store.item_version(item.key, version)
        if found is None:
            return None
        return ItemContent(
            id=api_id(item.key),
            name=item.name,
            version=found.version,
            kind=item.kind,
            content=found.content,
        )


class StoreStorageAccess:
    """`StorageAccess` on the store: the storages `paigraph storages add` defined."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def storage(self, name: str) -> StorageDefinition | None:
        found = self.store.get_storage(name)
        if found is None:
            return None
        return StorageDefinition(
            name=found.name,
            source=found.source,
            is_volume=found.is_volume,
            mode=StorageMode.READ_ONLY if found.read_only else StorageMode.READ_WRITE,
        )

    def may_use(self, name: str, viewer: Viewer) -> bool:
        found = self.store.get_storage(name)
        if found is None:
            return False
        return storage_allows(found, viewer.name, reader_of(self.store, viewer))
