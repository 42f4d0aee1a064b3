"""What a task role needs, as clients see it: its resources and its prerequisites.

A job's roles (`types.py`) and a marketplace template's roles (`server.api.marketplace.types`)
both show these, so they live apart from either. A prerequisite links back to the marketplace item
it was resolved from, through `strawberry.lazy`, the one link between these and the marketplace
types: the marketplace's types import the job types, so this side names them only lazily
(docs/architecture.md, "The API by domain").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import strawberry

from server.api.context import Info
from server.api.resolver_field import resolver_field
from server.protocol.model import JobSpec, PrerequisiteType, Resources
from server.protocol.model import Prerequisite as SpecPrerequisite
from server.protocol.model import TaskRole as SpecTaskRole
from server.protocol.rules import is_reference

if TYPE_CHECKING:
    from server.api.marketplace.types import MarketplaceItem


strawberry.enum(
    PrerequisiteType, name="PrerequisiteType", description="What a prerequisite provides."
)


@strawberry.type
class PortRequest:
    label: str
    count: int
    begin_at: int = strawberry.field(description="The first port wanted (v1); 0: any.")


@strawberry.type(description="What each instance of a task role gets.")
class Resource:
    cpu: int
    memory_mb: int = strawberry.field(name="memoryMB")
    gpu: int
    shm_mb: int = strawberry.field(name="shmMB")
    ports: list[PortRequest]

    @classmethod
    def from_spec(cls, res: Resources) -> Resource:
        return cls(
            cpu=res.cpu,
            memory_mb=res.memory_mb,
            gpu=res.gpu,
            shm_mb=res.shm_mb,
            ports=[
                PortRequest(label=p.label, count=p.count, begin_at=p.begin_at) for p in res.ports
            ],
        )


@strawberry.type(
    description="Something a task role needs in place: its docker image, data, code, storage."
)
class Prerequisite:
    name: str
    type: PrerequisiteType | None = strawberry.field(
        description="Null for a reference that is not resolved here."
    )
    uri: list[str]
    version: str | None = None
    contributor: str | None = None
    description: str | None = None
    plugin: str | None = None
    reference: str | None = strawberry.field(
        default=None,
        description="The marketplace:// or http(s):// reference the role names, if it does.",
    )
    origin_item: strawberry.Private[str | None] = None  # the item resolution took it from
    origin_version: strawberry.Private[str | None] = None

    @classmethod
    def from_spec(cls, p: SpecPrerequisite) -> Prerequisite:
        origin = p.origin
        return cls(
            name=p.name,
            type=p.type,
            uri=list(p.uri),
            version=p.version,
            contributor=p.contributor,
            description=p.description,
            plugin=p.plugin,
            reference=origin.reference if origin is not None else None,
            origin_item=origin.item_id if origin is not None else None,
            origin_version=origin.item_version if origin is not None else None,
        )

    @resolver_field(
        description="The marketplace item it came from (the version it was resolved at), when "
        "there is one the viewer may see."
    )
    async def marketplace_item(
        self, info: Info
    ) -> Annotated[MarketplaceItem, strawberry.lazy("server.api.marketplace.types")] | None:
        from server.api.marketplace.types import linked_item

        return await linked_item(info, self.origin_item, self.reference, self.origin_version)


def _prerequisite(spec: JobSpec, name: str, types: tuple[PrerequisiteType, ...]) -> Prerequisite:
    """The prerequisite a role names, looked up among `types` (any type when empty)."""
    for t in types or (None,):
        found = spec.prerequisite(name, t)
        if found is not None:
            return Prerequisite.from_spec(found)
    return Prerequisite(
        name=name,
        type=types[0] if len(types) == 1 else None,
        uri=[],
        reference=name if is_reference(name) else None,
    )


def docker_image(spec: JobSpec, role: SpecTaskRole) -> Prerequisite:
    return _prerequisite(spec, role.docker_image, (PrerequisiteType.DOCKERIMAGE,))


def role_prerequisites(spec: JobSpec, role: SpecTaskRole) -> list[Prerequisite]:
    """Every prerequisite the role uses: docker image, data, script, output, then its list."""
    named: list[tuple[str, tuple[PrerequisiteType, ...]]] = [
        (role.docker_image, (PrerequisiteType.DOCKERIMAGE,))
    ]
    if role.data:
        named.append((role.data, (PrerequisiteType.DATA,)))
    if role.script:
        named.append((role.script, (PrerequisiteType.SCRIPT,)))
    if role.output:
        named.append((role.output, (PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE)))
    named += [(name, ()) for name in role.prerequisites]
    seen: set[str] = set()
    result = []
    for name, types in named:
        if name not in seen:
            seen.add(name)
            result.append(_prerequisite(spec, name, types))
    return result
