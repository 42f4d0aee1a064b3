"""Values that never change once made (`shared_value`), completed once for all who ask alike.

graphql-core completes a subscription event once per subscriber, so an event for a thousand
subscribers of one query was completed a thousand times; here it is completed once and each
gets a copy. Only selections of leaf attribute fields are shared, anything else (and any
value that would err) takes graphql-core's path. More in docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from graphql import ExecutionResult, GraphQLObjectType, GraphQLOutputType
from graphql.execution.collect_fields import FieldDetailsList, collect_fields
from strawberry.types.field import StrawberryField

from server.api.execution.field_plans import SLOW, STRAWBERRY_FIELD, LeafRead, unwrap

if TYPE_CHECKING:
    from server.api.execution.executor import FastExecutionContext


class Completions:
    """Results of completing shared values, by (value, the field nodes collected from the
    selection); the newest kept."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._done: OrderedDict[tuple[int, ...], tuple[Any, tuple[Any, ...], dict[str, Any]]]
        self._done = OrderedDict()
        self._lock = threading.Lock()

    def get(self, value: Any, nodes: tuple[Any, ...]) -> dict[str, Any] | None:
        key = (id(value), *map(id, nodes))
        with self._lock:
            found = self._done.get(key)
        # The entry holds the value and nodes it was made for: the same ids mean the same objects.
        return found[2] if found is not None and found[0] is value else None

    def put(self, value: Any, nodes: tuple[Any, ...], completed: dict[str, Any]) -> None:
        key = (id(value), *map(id, nodes))
        with self._lock:
            self._done[key] = (value, nodes, completed)
            while len(self._done) > self.size:
                self._done.popitem(last=False)


COMPLETIONS = Completions()


def complete_shared(
    executor: FastExecutionContext,
    return_type: GraphQLOutputType,
    details: FieldDetailsList,
    value: Any,
) -> Any:
    """A shared value with a selection of leaf attribute fields, completed once."""
    _, object_type = unwrap(return_type)
    if not isinstance(object_type, GraphQLObjectType) or object_type.is_type_of is not None:
        return SLOW
    if any(d.node.directives for d in details):
        return SLOW
    fields, new_defer_usages, _ = executor.collect_subfields(object_type, details)
    if new_defer_usages:
        return SLOW
    plan = executor.field_plans(object_type, fields)
    if not all(type(read) is LeafRead for _, _, read in plan):
        return SLOW
    # Keyed by the field nodes actually collected, not the field's own: one document with
    # `@include(if: $v)` on a fragment collects different fields for different variables.
    nodes = tuple(d.node for _, collected, _ in plan for d in collected)
    done = COMPLETIONS.get(value, nodes)
    if done is None:
        done = {}
        for response_name, _, read in plan:
            try:
                completed = read.complete(value)  # type: ignore[union-attr]
            except Exception:  # the general way reports it at the field that raised
                return SLOW
            if completed is SLOW:
                return SLOW
            done[response_name] = completed
        COMPLETIONS.put(value, nodes, done)
    return dict(done)  # each result its own dict: whoever gets it may change it


def shared_event_data(executor: FastExecutionContext, event: Any) -> Any:
    """A subscription event that is a shared value, completed without executing the root
    field: strawberry's per-event resolver of a subscription field hands the event through
    unchanged, so the result is the event's completion under the field's name. Completing it
    is then the shared completion that every subscriber with the same query gets from
    `complete_shared`, instead of a walk through graphql-core for each."""
    root_type = executor.schema.subscription_type
    if root_type is None:
        return SLOW
    root = executor.subscription_root
    if not root:
        try:
            collected = collect_fields(
                executor.schema,
                executor.fragments,
                executor.variable_values,
                root_type,
                executor.operation,
                executor.hide_suggestions,
            )
        except RecursionError:
            return SLOW
        root.append(collected)
    fields, new_defer_usages, _ = root[0]
    if new_defer_usages or len(fields) != 1:
        return SLOW
    ((response_name, details),) = fields.items()
    field = executor.schema.get_field(root_type, details[0].node.name.value)
    definition = field.extensions.get(STRAWBERRY_FIELD) if field is not None else None
    if (
        field is None
        or not isinstance(definition, StrawberryField)
        or not definition.is_subscription
        or any(d.node.directives for d in details)
    ):
        return SLOW
    completed = complete_shared(executor, field.type, details, event)
    if completed is SLOW:
        return SLOW
    return {response_name: completed}


class SharedEvent:
    """The per-event executor of a subscription event that is a shared value: all graphql-core
    asks of it is `execute_operation`."""

    __slots__ = ("base", "event")

    def __init__(self, base: FastExecutionContext, event: Any) -> None:
        self.base = base
        self.event = event

    def execute_operation(self, serially: bool | None = None) -> Any:
        base = self.base
        data = shared_event_data(base, self.event)
        if data is SLOW:
            return base.copy_for_event(self.event).execute_operation(serially)
        base.run_async_work_finished_hook()
        return ExecutionResult(data, None)
