"""The values around reference resolution: its limits, its result, and empty lookups.

They live apart from the resolver (`references.py`) and its walk (`resolution.py`) because both
use them; `server.marketplace.references` re-exports every public name.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.marketplace.lookup import ItemContent, StorageDefinition, Viewer
from server.protocol.issues import Issue, WithIssues
from server.protocol.model import JobSpec, PrerequisiteOrigin, PrerequisiteType

REFERENCE_PREREQUISITES = "reference_prerequisites"
ANONYMOUS = Viewer(name="")  # sees public items only and may use no restricted storage

_ROLE_SLOTS: tuple[tuple[str, tuple[PrerequisiteType, ...]], ...] = (
    ("docker_image", (PrerequisiteType.DOCKERIMAGE,)),
    ("data", (PrerequisiteType.DATA,)),
    ("script", (PrerequisiteType.SCRIPT,)),
    ("output", (PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE)),
)


@dataclass(frozen=True)
class ReferenceLimits:
    max_depth: int = 8  # require levels below a reference the job writes
    max_components: int = 100  # distinct components loaded in one resolution
    max_total_bytes: int = 4 * 1024 * 1024  # their text, all together


class NoItems:
    """An ItemLookup with nothing in it: every marketplace reference is not found."""

    def by_id(self, item_id: str, viewer: Viewer) -> ItemContent | None:
        return None

    def by_name(self, name: str, version: str | None, viewer: Viewer) -> ItemContent | None:
        return None


class NoStorages:
    """A StorageAccess where no admin defined any storage."""

    def storage(self, name: str) -> StorageDefinition | None:
        return None

    def may_use(self, name: str, viewer: Viewer) -> bool:
        return False


@dataclass(frozen=True)
class ResolvedReferences(WithIssues):
    spec: JobSpec | None  # self-contained; None when there are errors
    issues: list[Issue]
    item_ids: frozenset[str] = frozenset()  # the marketplace items the job uses

    @property
    def origins(self) -> dict[str, PrerequisiteOrigin]:
        """Where each prerequisite resolved from a reference came from, by its name."""
        if self.spec is None:
            return {}
        return {p.name: p.origin for p in self.spec.prerequisites if p.origin is not None}
