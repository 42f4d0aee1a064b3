"""The marks of a resolver whose object may already hold its answer, built ahead or stored.

A marked field (`prebuilt`, `stored_items`, a `stored_view` type) is completed by the fast
executor from the held value, without a resolver call per job or GraphQL objects per instance;
the resolver still runs when nothing is held. Kept apart from `server.api.execution` so the
types do not import the executor's internals. More in docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., object])
T = TypeVar("T", bound=type)

PREBUILT = "__paigraph_prebuilt__"


def prebuilt(attribute: str) -> Callable[[F], F]:
    """Mark a resolver (below `@strawberry.field`) whose object may hold its answer in
    `attribute` (None when not). The resolver must itself return that value when it is
    there, so that graphql-core's standard executor, which calls it, answers alike."""

    def mark(resolver: F) -> F:
        setattr(resolver, PREBUILT, attribute)
        return resolver

    return mark


STORED_ITEMS = "__paigraph_stored_items__"
STORED_VIEW = "__paigraph_stored_view__"


@dataclass(frozen=True, slots=True)
class StoredView:
    """How a GraphQL object type's fields read from a stored value of `value_class`: each
    field (by its Python name) that can be answered from the value has a getter giving what
    the type's own attribute would hold (a list of objects as the stored values of its item
    type's view)."""

    value_class: type
    getters: Mapping[str, Callable[[Any], Any]]


def stored_view(value_class: type, **getters: Callable[[Any], Any]) -> Callable[[T], T]:
    """Mark a GraphQL object type (above `@strawberry.type`) whose objects are made from
    values of `value_class`: a field with a getter here reads the same from the stored value
    as from an object made of it. A selection of such fields only can then be completed from
    the stored values without making the objects."""

    def mark(cls: T) -> T:
        setattr(cls, STORED_VIEW, StoredView(value_class, dict(getters)))
        return cls

    return mark


def stored_items(attribute: str) -> Callable[[F], F]:
    """Mark a resolver (below `@strawberry.field`) of a list of objects whose object holds
    the stored values the items are made of in `attribute` (a sequence); the item type is
    marked `stored_view`. The resolver must return the items made of those values, which is
    what graphql-core's standard executor calls and what the fast executor falls back to for
    a selection the view cannot answer."""

    def mark(resolver: F) -> F:
        setattr(resolver, STORED_ITEMS, attribute)
        return resolver

    return mark
