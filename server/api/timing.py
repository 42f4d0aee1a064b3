"""How long GraphQL operations take, by operation type, for whoever keeps the figures (the
Prometheus endpoint, `server.metrics.api`): a schema extension that times each operation and
hands the seconds to the runtime's `timings`, when it has one.

A query or mutation is timed from its text being parsed to its answer; a subscription from its
start to its source stream being ready (its whole life would say how long people watch, not how
fast the server is).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType


class OperationTimings(Protocol):
    def observe(self, operation: str, seconds: float) -> None:
        """One operation of type `operation` ("query", "mutation", "subscription") took
        `seconds`."""


class TimedOperations(SchemaExtension):
    """Times each operation; costs two clock reads when nobody keeps the figures."""

    def on_operation(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        kind = self._kind()
        if kind is not None and kind is not OperationType.SUBSCRIPTION:
            self._record(kind, time.perf_counter() - started)

    def on_execute(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        if self._kind() is OperationType.SUBSCRIPTION:
            self._record(OperationType.SUBSCRIPTION, time.perf_counter() - started)

    def _kind(self) -> OperationType | None:
        """The operation's type; None when its text never parsed (no operation to time)."""
        if self.execution_context.graphql_document is None:
            return None
        try:
            return self.execution_context.operation_type
        except Exception:  # no operation of that name in the document: answered as an error
            return None

    def _record(self, kind: OperationType, seconds: float) -> None:
        runtime = getattr(self.execution_context.context, "runtime", None)
        timings: OperationTimings | None = getattr(runtime, "timings", None)
        if timings is not None:
            timings.observe(kind.value, seconds)
