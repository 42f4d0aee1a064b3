"""What resolving references needs from the marketplace, as plain values.

Reference resolution (`server.marketplace.references`) sees items and storages only through
these protocols, so it can be tested without a database and the store can change freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from server.shapes.item_kind import ItemKind


@dataclass(frozen=True)
class Viewer:
    """Who is resolving: visibility and storage permissions depend on it."""

    name: str
    admin: bool = False
    groups: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class ItemContent:
    """One version of a published item, as its YAML was published."""

    id: str  # the id the API shows, which marketplace://prerequisites/itemId/<id> takes
    name: str
    version: str
    kind: ItemKind
    content: str


class ItemLookup(Protocol):
    """Items as the viewer may see them; an item the viewer may not see is simply not found."""

    def by_id(self, item_id: str, viewer: Viewer) -> ItemContent | None: ...

    def by_name(self, name: str, version: str | None, viewer: Viewer) -> ItemContent | None:
        """The given version, or the latest one when version is None."""
        ...


class StorageMode(StrEnum):
    READ_ONLY = "ro"
    READ_WRITE = "rw"


@dataclass(frozen=True)
class StorageDefinition:
    """A storage an admin defined: a host directory or a Docker volume (a PVC on Kubernetes)."""

    name: str
    source: str  # an absolute host directory, or a volume / claim name
    is_volume: bool
    mode: StorageMode


class StorageAccess(Protocol):
    def storage(self, name: str) -> StorageDefinition | None:
        """The storage of that name, or None when no admin defined one."""
        ...

    def may_use(self, name: str, viewer: Viewer) -> bool: ...
