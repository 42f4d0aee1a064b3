"""The marketplace as clients see it: items, their versions, and what a template holds.

A template's task roles and prerequisites are the same `TaskRole` and `Prerequisite` types a
job has (an item's task roles have no instances). Linked data (owner, versions, whether the
viewer starred the item) goes through per-request DataLoaders kept beside the request's own.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import cast
from weakref import WeakKeyDictionary

import strawberry
from strawberry.dataloader import DataLoader
from strawberry.scalars import JSON

from server.api.context import Info
from server.api.graph_types import Node, PageInfo, User, owner_of
from server.api.jobs.types import Prerequisite, TaskRole
from server.api.loaders import Loaders, SharedLoader
from server.marketplace.items import IssuesFound, ItemDocument, api_id, item_key, read_item
from server.marketplace.requirements import referenced
from server.protocol.render import render_job
from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import ItemFilter, ItemSort, ItemVersion, Reader, Visibility
from server.shapes.marketplace_values import MarketplaceItem as StoredItem
from server.store import Store

strawberry.enum(ItemKind, name="ItemType", description="What a marketplace item is.")
strawberry.enum(
    Visibility,
    name="Visibility",
    description="Who sees an item: everyone, its owner only, or members of its groups.",
)
strawberry.enum(
    ItemSort, name="MarketplaceItemSort", description="The order of a marketplace item list."
)

_MARKETPLACE_NAME = re.compile(r"marketplace://name/([^/@\s]+)(?:@([^/\s]+))?")
_MARKETPLACE_ID = re.compile(r"marketplace://prerequisites/itemId/([^/@\s]+)")


# --- per-request loaders -----------------------------------------------------------------------


class MarketplaceLoaders:
    """Items, versions and stars read once per request, however many items a query touches."""

    def __init__(self, store: Store, viewer_id: int, viewer_admin: bool) -> None:
        self.store = store
        self.viewer_id = viewer_id
        self.viewer_admin = viewer_admin
        self._reader: asyncio.Future[Reader] | None = None
        self.documents: dict[tuple[str, str], ItemDocument | None] = {}

        async def items(keys: list[str]) -> list[StoredItem | None]:
            found = await asyncio.to_thread(store.items_by_keys, keys)
            return [found.get(key) for key in keys]

        async def versions(keys: list[str]) -> list[list[ItemVersion]]:
            found = await asyncio.to_thread(store.item_versions, keys)
            return [found.get(key, []) for key in keys]

        async def starred(keys: list[str]) -> list[bool]:
            found = await asyncio.to_thread(store.starred_keys, viewer_id, keys)
            return [key in found for key in keys]

        self.item: DataLoader[str, StoredItem | None] = SharedLoader(load_fn=items)
        self.versions: DataLoader[str, list[ItemVersion]] = SharedLoader(load_fn=versions)
        self.starred: DataLoader[str, bool] = SharedLoader(load_fn=starred)

    async def reader(self) -> Reader:
        """The viewer as a reader of the marketplace (groups read once per request)."""
        if self._reader is None:
            self._reader = asyncio.ensure_future(
                asyncio.to_thread(self.store.reader_for, self.viewer_id, admin=self.viewer_admin)
            )
        return await asyncio.shield(self._reader)  # shared: one caller cancelled is not all

    async def visible(self, key: str, version: str | None = None) -> MarketplaceItem | None:
        """The item (at `version`, else its latest) when the viewer may see it."""
        found = await self.item.load(key)
        if found is None or not (await self.reader()).may_see(found):
            return None
        return MarketplaceItem.from_value(found, version)

    async def content(self, key: str, version: str) -> ItemVersion | None:
        return next((v for v in await self.versions.load(key) if v.version == version), None)

    async def document(self, key: str, version: str) -> ItemDocument | None:
        """The version's content as the protocol engine reads it (None if it no longer does)."""
        if (key, version) not in self.documents:
            found = await self.content(key, version)
            document = None
            if found is not None:
                try:
                    document = read_item(found.content)
                except IssuesFound:
                    document = None
            self.documents[(key, version)] = document
        return self.documents[(key, version)]


_BY_REQUEST: WeakKeyDictionary[Loaders, MarketplaceLoaders] = WeakKeyDictionary()


def marketplace_loaders(info: Info) -> MarketplaceLoaders:
    """The request's marketplace loaders, made on first use. A websocket connection's loaders
    keep nothing (it lives long and must see new rows): each use then gets fresh ones."""
    loaders = info.context.loaders
    viewer = info.context.viewer
    if not loaders.user.cache:
        return MarketplaceLoaders(info.context.store, viewer.id, viewer.admin)
    found = _BY_REQUEST.get(loaders)
    if found is None:
        found = MarketplaceLoaders(info.context.store, viewer.id, viewer.admin)
        _BY_REQUEST[loaders] = found
    return found


async def linked_item(
    info: Info, item_id: str | None, reference: str | None, version: str | None = None
) -> MarketplaceItem | None:
    """The item a prerequisite came from: by the item ID its resolution recorded, else by the
    marketplace:// reference it names; None when there is none or the viewer may not see it."""
    loaders = marketplace_loaders(info)
    if item_id is None and reference:
        by_id = _MARKETPLACE_ID.fullmatch(reference)
        by_name = _MARKETPLACE_NAME.fullmatch(reference)
        if by_id:
            item_id = by_id.group(1)
        elif by_name:
            found = await asyncio.to_thread(loaders.store.item_named, by_name.group(1))
            if found is None:
                return None
            loaders.item.prime(found.key, found)
            item_id, version = found.key, version or by_name.group(2)
    key = item_key(item_id) if item_id else None
    if key is None:
        return None
    item = await loaders.visible(key, version)
    if item is not None and version is not None and await loaders.content(key, version) is None:
        return None
    return item


# --- types -------------------------------------------------------------------------------------


@strawberry.type(description="One published version of an item.")
class MarketplaceItemVersion:
    version: str
    content: str = strawberry.field(description="The YAML as published, secrets masked.")
    created_at: datetime
    latest: bool


@strawberry.type(
    description="A job template or a component (docker image, data, script, storage, output, "
    "plugin) shared through the marketplace. Its `id` is what "
    "marketplace://prerequisites/itemId/<id> takes; marketplace://name/<name> takes its name."
)
class MarketplaceItem(Node):
    id: strawberry.ID
    name: str
    version: str = strawberry.field(
        description="The version shown: the latest, unless another was asked for."
    )
    latest_version: str
    type: ItemKind
    summary: str | None
    description: str | None = strawberry.field(description="Markdown.")
    tags: list[str]
    categories: list[str]
    visibility: Visibility
    groups: list[str] = strawberry.field(
        description="The groups (virtual clusters) a GROUPS item is shared with."
    )
    stars: int
    submits: int = strawberry.field(description="How many jobs were submitted from the item.")
    created_at: datetime
    updated_at: datetime
    key: strawberry.Private[str]
    owner_id: strawberry.Private[int]

    @classmethod
    def from_value(cls, item: StoredItem, version: str | None = None) -> MarketplaceItem:
        return cls(
            id=strawberry.ID(api_id(item.key)),
            name=item.name,
            version=version or item.version,
            latest_version=item.version,
            type=item.kind,
            summary=item.summary,
            description=item.description,
            tags=list(item.tags),
            categories=list(item.categories),
            visibility=item.visibility,
            groups=list(item.groups),
            stars=item.stars,
            submits=item.submits,
            created_at=item.created_at,
            updated_at=item.updated_at,
            key=item.key,
            owner_id=item.owner_id,
        )

    @strawberry.field(description="Who published the item.")
    async def owner(self, info: Info) -> User:
        return await owner_of(info, self.owner_id, f"marketplace item {self.key}")

    @strawberry.field(description="The YAML of the version shown, as published.")
    async def content(self, info: Info) -> str:
        found = await marketplace_loaders(info).content(self.key, self.version)
        return found.content if found is not None else ""

    @strawberry.field(description="Every published version, newest first.")
    async def versions(self, info: Info) -> list[MarketplaceItemVersion]:
        found = await marketplace_loaders(info).versions.load(self.key)
        return [
            MarketplaceItemVersion(
                version=v.version,
                content=v.content,
                created_at=v.created_at,
                latest=v.version == self.latest_version,
            )
            for v in found
        ]

    @strawberry.field(description="Whether the viewer has starred the item.")
    async def viewer_has_starred(self, info: Info) -> bool:
        return await marketplace_loaders(info).starred.load(self.key)

    @strawberry.field(description="Whether the viewer may change or delete the item.")
    def viewer_can_change(self, info: Info) -> bool:
        viewer = info.context.viewer
        return viewer.admin or viewer.id == self.owner_id

    @strawberry.field(
        description="A template's task roles (without instances), its parameters rendered "
        "with their defaults; empty for a component."
    )
    async def task_roles(self, info: Info) -> list[TaskRole]:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None or document.spec is None:
            return []
        rendered, _ = render_job(document.spec)  # the document was parsed once, by the loader
        return [TaskRole.from_spec(rendered, role) for role in rendered.task_roles]

    @strawberry.field(
        description="A template's prerequisites as it declares them; for a component, the "
        "component itself."
    )
    async def prerequisites(self, info: Info) -> list[Prerequisite]:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None:
            return []
        if document.component is not None:
            return [Prerequisite.from_spec(document.component)]
        assert document.spec is not None
        return [Prerequisite.from_spec(p) for p in document.spec.prerequisites]

    @strawberry.field(description="A template's parameters and their default values.")
    async def parameters(self, info: Info) -> JSON | None:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None or document.spec is None:
            return None
        return cast(JSON, dict(document.spec.parameters))  # JSON is a NewType of object

    @strawberry.field(
        description="The other items the version shown refers to (marketplace:// and "
        "http(s):// references in its task roles, prerequisites and `require` lists), each "
        "with the item when it is one the viewer may see."
    )
    async def requires(self, info: Info) -> list[ItemRequirement]:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None:
            return []
        found = []
        for reference in referenced(document):
            item = None
            if reference.startswith("marketplace://"):
                item = await linked_item(info, None, reference)
            found.append(ItemRequirement(reference=reference, item=item))
        return found

    @strawberry.field(
        description="Who made what the version shown describes (the content's `contributor`), "
        "when it says; the owner is who published it."
    )
    async def contributor(self, info: Info) -> str | None:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None:
            return None
        made = document.spec if document.spec is not None else document.component
        return (made.contributor or "").strip() or None if made is not None else None

    @strawberry.field(
        description="A component's template variables: each must be given a value when it "
        "is used (`useMarketplaceItem` parameters, or `template_variables` in `require`)."
    )
    async def template_variables(self, info: Info) -> list[str]:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None or document.component is None:
            return []
        return list(document.component.template_variables)

    @strawberry.field(
        description="A component's template variables with what each declares: the form a use "
        "of the item shows, prefilled with the defaults."
    )
    async def declared_variables(self, info: Info) -> list[TemplateVariable]:
        document = await marketplace_loaders(info).document(self.key, self.version)
        if document is None or document.component is None:
            return []
        component = document.component
        return [
            TemplateVariable(name=name, default=component.variable_defaults.get(name))
            for name in component.template_variables
        ]


@strawberry.type(description="A template variable a component declares.")
class TemplateVariable:
    name: str = strawberry.field(description="What `{{ name }}` in the item's content names.")
    default: str | None = strawberry.field(
        description="The value a form offers first (`default` in `template_variables`)."
    )


@strawberry.type(description="A reference an item makes to another item.")
class ItemRequirement:
    reference: str = strawberry.field(description="As the content writes it.")
    item: MarketplaceItem | None = strawberry.field(
        description="The marketplace item it names, when there is one the viewer may see."
    )


@strawberry.type
class MarketplaceItemEdge:
    cursor: str
    node: MarketplaceItem


@strawberry.type
class MarketplaceItemConnection:
    edges: list[MarketplaceItemEdge]
    page_info: PageInfo
    reader: strawberry.Private[Reader | None] = None
    where: strawberry.Private[ItemFilter | None] = None

    @strawberry.field(
        description="How many items the viewer may see match the filter: every page together."
    )
    async def total_count(self, info: Info) -> int:
        if self.reader is None:
            return len(self.edges)
        reader, where, store = self.reader, self.where, info.context.store
        return await asyncio.to_thread(store.count_items, reader, where)


@strawberry.type(description="A tag in use, and on how many of the items the viewer may see.")
class MarketplaceTag:
    name: str
    items: int


@strawberry.input(description="Which items to list; every field given must match.")
class MarketplaceItemFilter:
    type: ItemKind | None = None
    tag: str | None = strawberry.field(default=None, description="One of the item's tags.")
    category: str | None = None
    search: str | None = strawberry.field(
        default=None, description="Text in the name, summary or description (any case)."
    )
    owner: str | None = strawberry.field(default=None, description="The owner's user name.")
    name: str | None = strawberry.field(default=None, description="The exact item name.")
