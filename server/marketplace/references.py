"""Resolving marketplace:// and http(s):// references into a self-contained JobSpec.

References may stand in a task role's `prerequisites`, `dockerImage`, `data`, `script` and
`output`, in any prerequisite's `require` list, and in seed 004's
`extras.reference_prerequisites` (a local name standing for what its `require` list names, with
template variables). Each is replaced by a concrete prerequisite: the component's YAML read and
validated by the protocol engine, its `{{ variable }}`s filled with the values given (every
declared variable must get one), and its own `require` list resolved the same way, recursively.
A role then lists what each of its prerequisites requires before the prerequisite itself, so
callbacks run in dependency order. Storages that prerequisites require are merged with the
job's `extras.storages` and checked against the admin's definitions and the viewer's rights.

Cycles, chains deeper than `ReferenceLimits.max_depth`, and resolutions that load too many
components or too many bytes are errors. Every error is an Issue whose path points at the
reference in the user's document; a problem further down a chain says which chain.
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
