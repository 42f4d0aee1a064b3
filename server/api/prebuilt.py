"""The mark of a resolver whose object may already hold its answer, built ahead.

A page of jobs reads every job's spec and instances in one go, and can then build each job's
task roles at once: the resolver would only hand them back. Marked, its field is completed by
the fast executor as a plain field is, from the attribute, without a resolver call (and the
resolve-info and argument handling around it) per job; when the attribute is None the
resolver runs as before. Kept apart from `server.api.execution`, as `shared_values` is, so the
types do not import the executor's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

PREBUILT = "__paigraph_prebuilt__"


def prebuilt(attribute: str) -> Callable[[F], F]:
    """Mark a resolver (below `@strawberry.field`) whose object may hold its answer in
    `attribute` (None when not). The resolver must itself return that value when it is
    there, so that graphql-core's standard executor, which calls it, answers alike."""

    def mark(resolver: F) -> F:
        setattr(resolver, PREBUILT, attribute)
        return resolver

    return mark
