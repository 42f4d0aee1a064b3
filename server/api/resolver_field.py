"""`resolver_field`: `@strawberry.field` with options, as a decorator a type checker follows.

Called with options (`@strawberry.field(description=...)`), strawberry's `field` is typed to
return Any, so every resolver it decorates would lose its type. This makes the same
`StrawberryField` from the resolver it is given, through the overload of `strawberry.field`
that is typed, so the schema is unchanged and the types stay checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import strawberry
from strawberry.types.field import StrawberryField


def resolver_field(
    *, description: str, graphql_type: Any | None = None
) -> Callable[[Callable[..., Any]], StrawberryField]:
    """`@strawberry.field(description=..., graphql_type=...)`, typed."""

    def decorate(resolver: Callable[..., Any]) -> StrawberryField:
        return strawberry.field(resolver, description=description, graphql_type=graphql_type)

    return decorate
