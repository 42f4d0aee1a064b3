"""The helpers resolvers reach through their info, holding the executor weakly.

graphql-core builds them from the executor's bound methods, a reference cycle that left
every request's objects to the cycle collector (tens of milliseconds in a later request);
resolvers use them only while the executor runs, so a weak reference is enough.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from graphql import GraphQLResolveInfoHelpers

if TYPE_CHECKING:
    from server.api.execution.executor import FastExecutionContext


def helpers_of(context: FastExecutionContext) -> GraphQLResolveInfoHelpers:
    """`context`'s gather and track helpers, holding it through a weak reference."""
    ref = weakref.ref(context)

    def gather(values: Sequence[Awaitable[Any]]) -> Awaitable[list[Any]]:
        return _live(ref).gather_async_work(values)

    def track(values: Sequence[Any]) -> None:
        _live(ref).track_async_work(values)

    return GraphQLResolveInfoHelpers(gather=gather, track=track)


def _live(ref: weakref.ReferenceType[FastExecutionContext]) -> FastExecutionContext:
    context = ref()
    if context is None:  # a resolver kept its info past the execution that made it
        raise RuntimeError("the execution this info belongs to has ended")
    return context
