"""The mark of a GraphQL object type whose values never change once made.

Kept apart from `server.api.execution` (which overrides graphql-core internals) so that the
types can be defined, and the schema served with graphql-core's standard executor, even when
those internals change under a graphql-core outside the supported range.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

SHARED_VALUE = "__paigraph_shared_value__"


def shared_value(cls: type[T]) -> type[T]:
    """Mark a GraphQL object type whose values are never changed once made. Completing such
    a value with a selection of attribute fields is then a function of the value and the
    selection alone, and the fast executor does it once: an event fanned out to a thousand
    subscribers of the same query (one value, one parsed document) is turned into its result
    once, not a thousand times."""
    setattr(cls, SHARED_VALUE, True)
    return cls
