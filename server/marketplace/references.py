"""Resolving marketplace:// and http(s):// references into a self-contained JobSpec.

Each reference, recursively through `require` lists, becomes a concrete prerequisite checked by
the protocol engine, within bounds on depth, components and bytes; every error points at the
reference in the user's document (docs/dialects.md, References).
"""

from __future__ import annotations

from server.marketplace.fetch import FetchSession, FetchSettings
from server.marketplace.lookup import ItemLookup, StorageAccess, Viewer
from server.marketplace.reference_values import (
    ANONYMOUS,
    REFERENCE_PREREQUISITES,
    NoItems,
    NoStorages,
    ReferenceLimits,
    ResolvedReferences,
)
from server.marketplace.resolution import _Resolution
from server.protocol.model import JobSpec

__all__ = [
    "ANONYMOUS",
    "REFERENCE_PREREQUISITES",
    "NoItems",
    "NoStorages",
    "ReferenceLimits",
    "ReferenceResolver",
    "ResolvedReferences",
]


class ReferenceResolver:
    """Resolves the references of jobs against one marketplace and one set of storages.

    Thread-safe: each `resolve` call has its own state and its own downloads.
    """

    def __init__(
        self,
        items: ItemLookup | None = None,
        storages: StorageAccess | None = None,
        *,
        fetch: FetchSettings | None = None,
        limits: ReferenceLimits | None = None,
    ) -> None:
        self.items: ItemLookup = items if items is not None else NoItems()
        self.storages: StorageAccess = storages if storages is not None else NoStorages()
        self.fetch = fetch if fetch is not None else FetchSettings.from_env()
        self.limits = limits or ReferenceLimits()

    def resolve(self, spec: JobSpec, viewer: Viewer = ANONYMOUS) -> ResolvedReferences:
        with FetchSession(self.fetch) as session:
            return _Resolution(self, spec, viewer, session).run()
