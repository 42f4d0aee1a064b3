"""The executor: strawberry's, with plain fields completed in place.

A page of 50 jobs is some 5,000 field completions, and graphql-core's resolve-info, resolver
wrapper and dispatch per field cost several times what reading the rows does. This class
completes such fields in place and hands anything out of the ordinary to graphql-core, so
data and errors stay the same; what takes which path: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, cast

from graphql import GraphQLObjectType, GraphQLOutputType, GraphQLResolveInfo
from graphql.execution.collect_fields import CollectedFields, FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, Undefined, gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from server.api.execution.compiled import Compiled, compile_plan, complete_items, origin_class
from server.api.execution.field_plans import (
    LISTS,
    SLOW,
    LeafRead,
    ObjectList,
    ObjectsRead,
    Plan,
    StoredRead,
    field_read,
    object_list,
    view_of,
)
from server.api.execution.shared_events import SharedEvent, complete_shared
from server.api.execution.weak_helpers import helpers_of
from server.api.prebuilt import StoredView
from server.api.shared_values import SHARED_VALUE


class FastExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """strawberry's executor with in-place completion of attribute fields and object lists."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Keyed by id(); each value keeps its key object alive so the id cannot be reused.
        self._plans: dict[int, tuple[GroupedFieldSet, GraphQLObjectType, list[Plan]]] = {}
        self._object_lists: dict[int, tuple[GraphQLOutputType, ObjectList | None]] = {}
        self._compilations: dict[tuple[int, bool], tuple[GroupedFieldSet, Compiled | None]] = {}
        manager = self.middleware_manager
        self._has_middleware = manager is not None and bool(manager.middlewares)
        self.async_helpers = helpers_of(self)
        # The root fields of a subscription, collected once: the executors graphql-core copies
        # from this one for each event share this list.
        self.subscription_root: list[CollectedFields] = []

    def build_per_event_executor(self, payload: Any) -> Any:
        """For an event that is a shared value, a stand-in that completes it without
        copying this executor (graphql-core's per-event executor is a copy of it)."""
        if not self._has_middleware and getattr(type(payload), SHARED_VALUE, False):
            return SharedEvent(self, payload)
        return self.copy_for_event(payload)

    def copy_for_event(self, payload: Any) -> FastExecutionContext:
        """graphql-core's per-event executor: a copy of this one, with memos of its own."""
        executor = cast(FastExecutionContext, super().build_per_event_executor(payload))
        executor._forget_memos()
        return executor

    def _forget_memos(self) -> None:
        """Memos of its own for a per-event copy. A copy shares its original's dicts, and
        each event collects its fields anew, so every event of a long subscription (a log
        followed for hours) would otherwise add entries that live as long as it does."""
        self._plans = {}
        self._object_lists = {}
        self._compilations = {}
        if hasattr(self, "_relevant_sub_fields"):  # graphql-core's memo of collected subfields
            self._relevant_sub_fields = {}

    def field_plans(self, parent_type: GraphQLObjectType, fields: GroupedFieldSet) -> list[Plan]:
        """How each of `fields` is completed, worked out once per execution."""
        cached = self._plans.get(id(fields))
        if cached is not None and cached[1] is parent_type:
            return cached[2]
        plan: list[Plan] = []
        for response_name, details in fields.items():
            field = self.schema.get_field(parent_type, details[0].node.name.value)
            read = field_read(field, details) if field is not None else None
            plan.append((response_name, details, read))
        self._plans[id(fields)] = (fields, parent_type, plan)
        return plan

    def _compiled(
        self, object_type: GraphQLObjectType, fields: GroupedFieldSet, view: StoredView | None
    ) -> Compiled | None:
        """`fields` of `object_type` compiled (for the stored values `view` reads from, when
        given), or None when one of them is not plain."""
        key = (id(fields), view is not None)
        cached = self._compilations.get(key)
        if cached is not None and cached[0] is fields:
            return cached[1]
        plan = self.field_plans(object_type, fields)
        compiled = compile_plan(plan, self._compiled_items, view)
        self._compilations[key] = (fields, compiled)
        return compiled

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        if self._has_middleware:
            return super().execute_fields(
                parent_type, source_value, path, grouped_field_set, position_context
            )
        results: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        awaitable_fields: list[str] = []
        try:
            for response_name, details, read in self.field_plans(parent_type, grouped_field_set):
                if type(read) is StoredRead and position_context is None:
                    result = self._stored_field(read, source_value, details)
                    if result is not SLOW:
                        results[response_name] = result
                        continue
                if type(read) is LeafRead:
                    try:
                        result = read.complete(source_value)
                    except Exception:  # graphql-core's path reads again, erring at the field
                        result = SLOW
                    if result is not SLOW:
                        results[response_name] = result
                        continue
                field_path = Path(path, response_name, parent_type.name)  # not for plain leaves
                if type(read) is ObjectsRead:
                    result = self._objects_field(
                        read, source_value, details, field_path, position_context
                    )
                    if result is not SLOW:
                        results[response_name] = result
                        if result is not None and type(result) is not list:  # still settling
                            awaitable_fields.append(response_name)
                        continue
                result = self.execute_field(
                    parent_type, source_value, details, field_path, position_context
                )
                if result is not Undefined:
                    results[response_name] = result
                    if is_awaitable(result):
                        awaitable_fields.append(response_name)
        except Exception:
            if awaitable_fields:
                self.settle_in_background([results[name] for name in awaitable_fields])
            raise
        if not awaitable_fields:
            return results
        return _await_at(results, awaitable_fields)

    def _stored_field(self, read: StoredRead, source: Any, details: FieldDetailsList) -> Any:
        """The field's items completed straight from the stored values its object keeps, or
        SLOW (nothing done that counts: the resolver then makes the items) when the view
        cannot answer the selection or a value is not plain."""
        compiled = self._compiled_items(read.shape.object_type, details, True)
        if compiled is None:
            return SLOW
        try:
            values = getattr(source, read.attribute)
        except Exception:
            return SLOW
        if type(values) not in LISTS:
            return SLOW
        item_class, completion = compiled
        try:
            return complete_items(completion, item_class, values)
        except Exception:  # the resolver's way reports it with its path
            return SLOW

    def _objects_field(
        self,
        read: ObjectsRead,
        source: Any,
        details: FieldDetailsList,
        path: Path,
        position_context: Any,
    ) -> Any:
        """The field's list completed in place; errors handled as graphql-core handles them
        for a field (a null here, or raised on to the parent when the field is non-null)."""
        try:
            value = read.read(source, read.attribute)
        except Exception:  # graphql-core's path reads again and reports it at this field
            return SLOW
        if type(value) not in LISTS:
            return SLOW
        try:
            completed = self._complete_objects(
                read.shape, details, None, path, value, position_context
            )
        except Exception as raw_error:
            self.handle_field_error(raw_error, read.field_type, details, path)
            return None
        if completed is SLOW or type(completed) is list:
            return completed
        return self._settle(completed, read.field_type, details, path)

    def complete_value(
        self,
        return_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        result: Any,
        position_context: Any,
    ) -> AwaitableOrValue[Any]:
        if self._has_middleware:
            pass
        elif type(result) in LISTS:
            shape = self._object_list(return_type)
            if shape is not None:
                completed = self._complete_objects(
                    shape, field_details_list, info, path, result, position_context
                )
                if completed is not SLOW:
                    return completed
        elif getattr(type(result), SHARED_VALUE, False):
            completed = complete_shared(self, return_type, field_details_list, result)
            if completed is not SLOW:
                return completed
        return super().complete_value(
            return_type, field_details_list, info, path, result, position_context
        )

    def _object_list(self, type_: GraphQLOutputType) -> ObjectList | None:
        cached = self._object_lists.get(id(type_))
        if cached is None:
            cached = (type_, object_list(type_))
            self._object_lists[id(type_)] = cached
        return cached[1]

    def _complete_objects(
        self,
        shape: ObjectList,
        details: FieldDetailsList,
        info: GraphQLResolveInfo[Any] | None,
        path: Path,
        items: Sequence[Any],
        position_context: Any,
    ) -> Any:
        """Each item straight into its sub-selection; SLOW before any work when an item is
        not a plain instance of the type, or the field asks for incremental delivery."""
        if any(d.node.directives for d in details):
            return SLOW
        is_type_of = shape.object_type.is_type_of
        if is_type_of is None and position_context is None:
            completed_at_once = self._complete_compiled(shape.object_type, details, items)
            if completed_at_once is not SLOW:
                return completed_at_once
        if not self._plain_items(shape, info, items):
            return SLOW
        return self._complete_each(shape, details, path, items, position_context)

    def _plain_items(
        self, shape: ObjectList, info: GraphQLResolveInfo[Any] | None, items: Sequence[Any]
    ) -> bool:
        """Whether every item is a value of the list's type as it is (no null, error or
        awaitable, and accepted by the type's is_type_of when it has one)."""
        is_awaitable = self.is_awaitable
        is_type_of = shape.object_type.is_type_of
        if is_type_of is not None and info is None:
            return False
        type_info = cast("GraphQLResolveInfo[Any]", info)  # there is one when is_type_of is asked
        for item in items:
            if item is None or isinstance(item, Exception) or is_awaitable(item):
                return False
            if is_type_of is not None and is_type_of(item, type_info) is not True:
                return False
        return True

    def _complete_each(
        self,
        shape: ObjectList,
        details: FieldDetailsList,
        path: Path,
        items: Sequence[Any],
        position_context: Any,
    ) -> Any:
        """Each (plain) item completed into its sub-selection, an error at an item handled
        there; the awaitable ones awaited together at the end."""
        is_awaitable = self.is_awaitable
        object_type = shape.object_type
        fields, new_defer_usages, _ = self.collect_subfields(object_type, details)
        direct = position_context is None and not new_defer_usages
        completed: list[Any] = []
        pending: list[int] = []
        try:
            for index, item in enumerate(items):
                item_path = path.add_key(index, None)
                try:
                    if direct:  # what the incremental executor does without deferral
                        value = self.execute_fields(object_type, item, item_path, fields, None)
                    else:
                        value = self.collect_and_execute_subfields(
                            object_type, details, item_path, item, position_context
                        )
                except Exception as raw_error:
                    self.handle_field_error(raw_error, shape.item_type, details, item_path)
                    value = None
                if type(value) is not dict and is_awaitable(value):
                    value = self._settle(value, shape.item_type, details, item_path)
                    pending.append(index)
                completed.append(value)
        except Exception:
            if pending:  # an error reached the list: let the items already started finish
                self.settle_in_background([completed[index] for index in pending])
            raise
        if not pending:
            return completed
        return _await_at(completed, pending)

    def _complete_compiled(
        self, object_type: GraphQLObjectType, details: FieldDetailsList, items: Sequence[Any]
    ) -> Any:
        """The items through their compiled selection, or SLOW (nothing done that counts)
        when the selection or a value is not plain."""
        compiled = self._compiled_items(object_type, details, False)
        if compiled is None:
            return SLOW
        item_class, completion = compiled
        try:
            return complete_items(completion, item_class, items)
        except Exception:  # reported with its path by the general way
            return SLOW

    def _compiled_items(
        self, object_type: GraphQLObjectType, details: FieldDetailsList, stored: bool
    ) -> tuple[type, Compiled] | None:
        """The class items of `object_type` must have and the compiled selection `details`
        make of them, or None when there is no such class or the selection is not plain.
        `stored`: the items are the stored values the type's view reads from, not objects
        of the type."""
        view = view_of(object_type) if stored else None
        item_class = view.value_class if view is not None else origin_class(object_type)
        if item_class is None or (stored and view is None):
            return None
        fields, new_defer_usages, _ = self.collect_subfields(object_type, details)
        compiled = None if new_defer_usages else self._compiled(object_type, fields, view)
        return None if compiled is None else (item_class, compiled)

    async def _settle(
        self,
        value: Awaitable[Any],
        type_: GraphQLOutputType,
        details: FieldDetailsList,
        path: Path,
    ) -> Any:
        try:
            return await value
        except Exception as raw_error:
            self.handle_field_error(raw_error, type_, details, path)
            return None


async def _await_at(values: Any, keys: list[Any]) -> Any:
    """`values` (a dict of results or a list of items) with the awaitables at `keys` awaited
    in its place, together, the first error cancelling the rest."""
    if len(keys) == 1:
        values[keys[0]] = await values[keys[0]]
        return values
    awaited = await gather_with_cancel(*(values[key] for key in keys))
    for key, value in zip(keys, awaited, strict=True):
        values[key] = value
    return values
