"""`mutation`: strawberry's mutation field with loaders of its own.

Mutation fields run one after the other, each seeing what the previous changed, so a payload
must not come from rows a loader cached before (star then unstar answered
`viewerHasStarred: true` twice); each mutation field starts with fresh loaders.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import strawberry
from strawberry.extensions.field_extension import AsyncExtensionResolver, FieldExtension
from strawberry.types.field import StrawberryField

from server.api.context import Info


class FreshLoaders(FieldExtension):
    """Give the request fresh loaders before the field resolves (see the module)."""

    async def resolve_async(
        self, next_: AsyncExtensionResolver, source: Any, info: Info, **kwargs: Any
    ) -> Any:
        info.context.loaders = info.context.loaders.fresh()
        return await next_(source, info, **kwargs)


def mutation(*, description: str) -> Callable[[Callable[..., Awaitable[Any]]], StrawberryField]:
    """`strawberry.mutation` whose field resolves with fresh loaders (FreshLoaders)."""

    def decorate(resolver: Callable[..., Awaitable[Any]]) -> StrawberryField:
        return strawberry.mutation(resolver, description=description, extensions=[FreshLoaders()])

    return decorate
