"""The marketplace's Query fields: one item (at a version), a filtered, sorted page, the tags.

`node(id:)` finds a marketplace item through `marketplace_loaders` (server.api.root_query).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import strawberry

from server.api.context import Info
from server.api.errors import ApiError
from server.api.graph_types import PageInfo
from server.api.ids import BadId, cursor, expect_global_id, parse_cursor
from server.api.limits import page_size
from server.api.marketplace.types import (
    MarketplaceItem,
    MarketplaceItemConnection,
    MarketplaceItemEdge,
    MarketplaceItemFilter,
    MarketplaceTag,
    marketplace_loaders,
)
from server.marketplace.items import API_TYPE
from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import ItemCursor, ItemFilter, ItemPage, ItemSort

_CURSOR_TAG = "mi"


def encode_cursor(position: ItemCursor) -> str:
    value = position.value
    return cursor(
        _CURSOR_TAG,
        position.sort.value,
        value.isoformat() if isinstance(value, datetime) else value,
        position.key,
    )


def decode_cursor(text: str, sort: ItemSort, *, argument: str = "after") -> ItemCursor:
    """The position `text` names in a list sorted by `sort`; BadId naming the argument when it
    is no marketplace cursor, or one of a list sorted otherwise."""
    parts = parse_cursor(text, argument=argument)
    problem = BadId(f"{argument}: {text!r} is not a marketplace item cursor this service gave out")
    if len(parts) != 4 or parts[0] != _CURSOR_TAG or not isinstance(parts[3], str):
        raise problem
    try:
        found = ItemSort(parts[1])
    except ValueError:
        raise problem from None
    if found is not sort:
        raise BadId(
            f"{argument}: the cursor belongs to a list sorted by {found.name}, not {sort.name}; "
            "start again without `after`"
        )
    value = parts[2]
    if sort is ItemSort.RECENT:
        try:
            value = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            raise problem from None
        if value.tzinfo is None:
            raise problem
    elif not isinstance(value, int):
        raise problem
    return ItemCursor(sort, value, parts[3])


@strawberry.type
class Query:
    @strawberry.field(
        description="A marketplace item the viewer may see, at its latest version or at "
        "`version`; null when there is none (or it is not shared with the viewer)."
    )
    async def marketplace_item(
        self, info: Info, id: strawberry.ID, version: str | None = None
    ) -> MarketplaceItem | None:
        key = expect_global_id(id, API_TYPE)
        loaders = marketplace_loaders(info)
        item = await loaders.visible(key, version)
        if item is None or version is None:
            return item
        if await loaders.content(key, version) is None:
            known = ", ".join(v.version for v in await loaders.versions.load(key))
            raise ApiError(
                f"version: item {item.name!r} has no version {version!r} (its versions: {known})",
                "NOT_FOUND",
            )
        return item

    @strawberry.field(
        description="The marketplace items the viewer may see, `first` (at most 100) a page, "
        "highest first by `sort` (RECENT: most recently published or changed)."
    )
    async def marketplace_items(
        self,
        info: Info,
        first: int | None = None,
        after: str | None = None,
        filter: MarketplaceItemFilter | None = None,
        sort: ItemSort = ItemSort.RECENT,
    ) -> MarketplaceItemConnection:
        size = page_size(first)
        position = decode_cursor(after, sort) if after is not None else None
        where = ItemFilter(
            kind=filter.type if filter else None,
            tag=filter.tag if filter else None,
            category=filter.category if filter else None,
            search=filter.search if filter else None,
            owner=filter.owner if filter else None,
            name=filter.name if filter else None,
        )
        loaders = marketplace_loaders(info)
        reader = await loaders.reader()
        store = info.context.store

        def read() -> ItemPage:
            return store.list_items(reader, where, sort=sort, first=size, after=position)

        page = await asyncio.to_thread(read)
        loaders.item.prime_many({item.key: item for item in page.items})
        edges = [
            MarketplaceItemEdge(
                cursor=encode_cursor(page.cursor_of(item)), node=MarketplaceItem.from_value(item)
            )
            for item in page.items
        ]
        return MarketplaceItemConnection(
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next, end_cursor=edges[-1].cursor if edges else after
            ),
            reader=reader,
            where=where,
        )

    @strawberry.field(
        description="The tags of the items the viewer may see (of `type`, if given), most used "
        "first: what a list can be filtered by."
    )
    async def marketplace_tags(
        self, info: Info, type: ItemKind | None = None
    ) -> list[MarketplaceTag]:
        reader = await marketplace_loaders(info).reader()
        store = info.context.store
        found = await asyncio.to_thread(store.tags_in_use, reader, type)
        return [MarketplaceTag(name=name, items=count) for name, count in found]
