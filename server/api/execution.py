"""An executor that completes plain fields without graphql-core's per-field machinery.

Why: a page of 50 jobs with their roles, instances and ports is some 5,000 field completions.
For each of them graphql-core builds a resolve-info, calls strawberry's resolver wrapper and
dispatches on the field's type, which costs several times what reading the rows does. Here a
field that strawberry resolves by reading an attribute (no resolver, no extensions, no
arguments, no directives) is completed in place when its type is

- a scalar, an enum, or a list of them: read and coerced;
- a list of objects of one concrete type: each item goes straight into the sub-selection
  (lists of objects returned by resolvers are completed the same way). When that selection
  is made of such fields only, all the way down (a role's instances and their ports), it is
  compiled into one function that builds the result without paths, per execution.

A subscription event that is a shared value (`shared_value`) is completed once for everyone
who follows it with the same query, without a per-event copy of the executor.

Anything out of the ordinary (a null where none is allowed, a value the scalar refuses, an
awaitable or an exception as a value, an attribute that raises when read, a type that checks
its values, an abstract type, `@defer` / `@stream`, middleware) takes graphql-core's own path,
which then produces the very same data and errors as without this class. Plans live as long
as one execution.

graphql-core's own executor stays available beside this one (`PAIGRAPH_EXECUTOR=standard`,
see server.api.schema); the API tests run under both, and tests/test_api_differential.py
compares them on random queries.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, cast

from graphql import (
    ExecutionResult,
    GraphQLBoolean,
    GraphQLEnumType,
    GraphQLField,
    GraphQLID,
    GraphQLInt,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLResolveInfoHelpers,
    GraphQLString,
    is_leaf_type,
)
from graphql.execution.collect_fields import (
    CollectedFields,
    FieldDetailsList,
    GroupedFieldSet,
    collect_fields,
)
from graphql.pyutils import AwaitableOrValue, Path, Undefined, gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types.field import StrawberryField

from server.api.shared_values import SHARED_VALUE

STRAWBERRY_FIELD = "strawberry-definition"
_SLOW = object()  # "not completed here: take graphql-core's path"
_LISTS = (list, tuple)


def _coerce(leaf: GraphQLLeafType, value: Any) -> Any:
    if isinstance(value, Exception):
        return _SLOW
    try:
        coerced = leaf.coerce_output_value(value)
    except Exception:
        return _SLOW
    return _SLOW if coerced is None or coerced is Undefined else coerced


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def leaf_coercer(leaf: GraphQLLeafType) -> Callable[[Any], Any]:
    """`leaf`'s output coercion, with the common cases answered without a call into it: a
    str for String and ID, an int in range for Int, a bool for Boolean, a member of the enum
    class strawberry made the enum from. Everything else goes to the type itself."""
    if leaf is GraphQLString or leaf is GraphQLID:
        return lambda value: value if type(value) is str else _coerce(leaf, value)
    if leaf is GraphQLInt:
        return lambda value: (
            value if type(value) is int and _INT_MIN <= value <= _INT_MAX else _coerce(leaf, value)
        )
    if leaf is GraphQLBoolean:
        return lambda value: value if type(value) is bool else _coerce(leaf, value)
    wrapped = getattr(leaf, "wrapped_cls", None)
    if isinstance(leaf, GraphQLEnumType) and isinstance(wrapped, type):
        names = {}
        for name, enum_value in leaf.values.items():
            with suppress(TypeError):  # an unhashable value: the type answers for it
                names[enum_value.value] = name

        def enum_name(value: Any) -> Any:
            if type(value) is wrapped:
                name = names.get(value.value)
                if name is not None:
                    return name
            return _coerce(leaf, value)

        return enum_name
    return lambda value: _coerce(leaf, value)


def _unwrap(type_: GraphQLOutputType) -> tuple[bool, GraphQLOutputType]:
    if isinstance(type_, GraphQLNonNull):
        return True, type_.of_type
    return False, type_


@dataclass(frozen=True, slots=True)
class ObjectList:
    """A list of objects of one concrete type: the item type as the schema has it."""

    item_type: GraphQLOutputType
    object_type: GraphQLObjectType


def object_list(type_: GraphQLOutputType) -> ObjectList | None:
    _, inner = _unwrap(type_)
    if not isinstance(inner, GraphQLList):
        return None
    _, item = _unwrap(inner.of_type)
    if not isinstance(item, GraphQLObjectType):
        return None
    return ObjectList(inner.of_type, item)


@dataclass(frozen=True, slots=True)
class LeafRead:
    """An attribute field of scalar or enum type, or a list of them."""

    read: Callable[[Any, str], Any]
    attribute: str
    non_null: bool
    coerce: Callable[[Any], Any]
    is_list: bool
    items_non_null: bool

    def complete(self, source: Any) -> Any:
        value = self.read(source, self.attribute)
        return self.complete_value(value)

    def complete_value(self, value: Any) -> Any:
        if value is None:
            return _SLOW if self.non_null else None
        if not self.is_list:
            return self.coerce(value)
        if type(value) not in _LISTS:
            return _SLOW
        coerce = self.coerce
        out = []
        for item in value:
            if item is None:
                if self.items_non_null:
                    return _SLOW
                out.append(None)
                continue
            coerced = coerce(item)
            if coerced is _SLOW:
                return _SLOW
            out.append(coerced)
        return out


@dataclass(frozen=True, slots=True)
class ObjectsRead:
    """An attribute field whose type is a list of objects that do not check their values."""

    read: Callable[[Any, str], Any]
    attribute: str
    field_type: GraphQLOutputType
    shape: ObjectList


# Schema fields live as long as their schema: what each one needs is worked out once, not per
# execution (a subscription executes its selection once per event and subscriber). Keyed by
# id(); each value holds its field, so the id cannot be reused while the entry exists.
_READS: dict[int, tuple[GraphQLField, LeafRead | ObjectsRead | None]] = {}


def field_read(field: GraphQLField, details: FieldDetailsList) -> LeafRead | ObjectsRead | None:
    """How to complete `field` in place, or None when it must take the general path."""
    if any(d.node.arguments or d.node.directives for d in details):
        return None
    cached = _READS.get(id(field))
    if cached is None or cached[0] is not field:
        cached = (field, _read_for(field))
        _READS[id(field)] = cached
    return cached[1]


def _read_for(field: GraphQLField) -> LeafRead | ObjectsRead | None:
    definition = field.extensions.get(STRAWBERRY_FIELD)
    if not isinstance(definition, StrawberryField) or not definition.is_basic_field:
        return None
    if not getattr(field.resolve, "_is_default", False) or field.args:
        return None
    read, attribute = definition.default_resolver, definition.python_name
    shape = object_list(field.type)
    if shape is not None:
        if shape.object_type.is_type_of is not None:
            return None
        return ObjectsRead(read, attribute, field.type, shape)
    non_null, inner = _unwrap(field.type)
    is_list = isinstance(inner, GraphQLList)
    items_non_null = False
    if is_list:
        items_non_null, inner = _unwrap(inner.of_type)
    if not is_leaf_type(inner):
        return None
    return LeafRead(read, attribute, non_null, leaf_coercer(inner), is_list, items_non_null)


_Plan = tuple[str, FieldDetailsList, LeafRead | ObjectsRead | None]
Compiled = Callable[[Any], Any]  # a value -> its completed dict, or _SLOW


@dataclass(frozen=True, slots=True)
class Step:
    """One field of a compiled selection: a leaf, or a list of objects completed by `items`
    (whose values must be of the exact class `item_class`)."""

    name: str
    get: Callable[[Any], Any]
    leaf: LeafRead | None
    items: Compiled | None = None
    item_class: type | None = None


def compile_selection(steps: Sequence[Step]) -> Compiled:
    """A completion of a selection of attribute fields only, scalars, enums and lists of
    objects whose own selections are such, with no paths built: _SLOW as soon as a value
    would need anything else (a null where none is allowed, a value a scalar refuses, an item
    of another class), and the caller then completes the whole value the general way."""
    fields = tuple((s.name, s.get, s.leaf, s.items, s.item_class) for s in steps)

    def complete(source: Any) -> Any:
        out = {}
        for name, get, leaf, items, item_class in fields:
            value = get(source)
            if leaf is not None:
                if value is None:
                    if leaf.non_null:
                        return _SLOW
                    out[name] = None
                    continue
                value = leaf.complete_value(value) if leaf.is_list else leaf.coerce(value)
                if value is _SLOW:
                    return _SLOW
                out[name] = value
                continue
            if type(value) not in _LISTS:
                return _SLOW
            value = complete_items(items, item_class, value)  # type: ignore[arg-type]
            if value is _SLOW:
                return _SLOW
            out[name] = value
        return out

    return complete


def complete_items(completion: Compiled, item_class: type, items: Sequence[Any]) -> Any:
    """Each item through `completion`, or _SLOW when one is not of `item_class` or needs
    the general way."""
    completed = []
    for item in items:
        if type(item) is not item_class:
            return _SLOW
        value = completion(item)
        if value is _SLOW:
            return _SLOW
        completed.append(value)
    return completed


def _getter(read: Callable[[Any, str], Any], attribute: str) -> Callable[[Any], Any]:
    if read is getattr:
        return attrgetter(attribute)
    return lambda source: read(source, attribute)


def origin_class(object_type: GraphQLObjectType) -> type | None:
    """The Python class strawberry made `object_type` from."""
    definition = object_type.extensions.get(STRAWBERRY_FIELD)
    origin = getattr(definition, "origin", None)
    return origin if isinstance(origin, type) else None


class _Completions:
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


_COMPLETIONS = _Completions()


class FastExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """strawberry's executor with in-place completion of attribute fields and object lists."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Keyed by id(); each value keeps its key object alive so the id cannot be reused.
        self._plans: dict[int, tuple[GroupedFieldSet, GraphQLObjectType, list[_Plan]]] = {}
        self._object_lists: dict[int, tuple[GraphQLOutputType, ObjectList | None]] = {}
        self._compilations: dict[int, tuple[GroupedFieldSet, Compiled | None]] = {}
        manager = self.middleware_manager
        self._has_middleware = manager is not None and bool(manager.middlewares)
        self.async_helpers = _helpers_of(self)
        # The root fields of a subscription, collected once: the executors graphql-core copies
        # from this one for each event share this list.
        self._event_root: list[CollectedFields] = []

    def build_per_event_executor(self, payload: Any) -> Any:
        """For an event that is a shared value, a stand-in that completes it without
        copying this executor (graphql-core's per-event executor is a copy of it)."""
        if not self._has_middleware and getattr(type(payload), SHARED_VALUE, False):
            return _SharedEvent(self, payload)
        return self._copy_for_event(payload)

    def _copy_for_event(self, payload: Any) -> FastExecutionContext:
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

    def _shared_event_data(self, event: Any) -> Any:
        """A subscription event that is a shared value, completed without executing the
        root field: strawberry's per-event resolver of a subscription field hands the event
        through unchanged, so the result is the event's completion under the field's name.
        Completing it is then the shared completion that every subscriber with the same
        query gets from `_complete_shared`, instead of a walk through graphql-core for each."""
        root_type = self.schema.subscription_type
        if root_type is None:
            return _SLOW
        if not self._event_root:
            try:
                collected = collect_fields(
                    self.schema,
                    self.fragments,
                    self.variable_values,
                    root_type,
                    self.operation,
                    self.hide_suggestions,
                )
            except RecursionError:
                return _SLOW
            self._event_root.append(collected)
        fields, new_defer_usages, _ = self._event_root[0]
        if new_defer_usages or len(fields) != 1:
            return _SLOW
        ((response_name, details),) = fields.items()
        field = self.schema.get_field(root_type, details[0].node.name.value)
        definition = field.extensions.get(STRAWBERRY_FIELD) if field is not None else None
        if (
            field is None
            or not isinstance(definition, StrawberryField)
            or not definition.is_subscription
            or any(d.node.directives for d in details)
        ):
            return _SLOW
        completed = self._complete_shared(field.type, details, event)
        if completed is _SLOW:
            return _SLOW
        return {response_name: completed}

    def _plan(self, parent_type: GraphQLObjectType, fields: GroupedFieldSet) -> list[_Plan]:
        cached = self._plans.get(id(fields))
        if cached is not None and cached[1] is parent_type:
            return cached[2]
        plan: list[_Plan] = []
        for response_name, details in fields.items():
            field = self.schema.get_field(parent_type, details[0].node.name.value)
            plan.append((response_name, details, field and field_read(field, details)))
        self._plans[id(fields)] = (fields, parent_type, plan)
        return plan

    def _compiled(self, object_type: GraphQLObjectType, fields: GroupedFieldSet) -> Compiled | None:
        """`fields` of `object_type` compiled, or None when one of them is not plain."""
        cached = self._compilations.get(id(fields))
        if cached is not None and cached[0] is fields:
            return cached[1]
        compiled = self._compile(object_type, fields)
        self._compilations[id(fields)] = (fields, compiled)
        return compiled

    def _compile(self, object_type: GraphQLObjectType, fields: GroupedFieldSet) -> Compiled | None:
        steps = []
        for name, details, read in self._plan(object_type, fields):
            if type(read) is LeafRead:
                steps.append(Step(name, _getter(read.read, read.attribute), read))
                continue
            if type(read) is not ObjectsRead or any(d.node.directives for d in details):
                return None
            items = self._compiled_items(read.shape.object_type, details)
            if items is None:
                return None
            item_class, completion = items
            getter = _getter(read.read, read.attribute)
            steps.append(Step(name, getter, None, completion, item_class))
        return compile_selection(steps)

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
            for response_name, details, read in self._plan(parent_type, grouped_field_set):
                if type(read) is LeafRead:
                    try:
                        result = read.complete(source_value)
                    except Exception:  # graphql-core's path reads again, erring at the field
                        result = _SLOW
                    if result is not _SLOW:
                        results[response_name] = result
                        continue
                field_path = Path(path, response_name, parent_type.name)  # not for plain leaves
                if type(read) is ObjectsRead:
                    result = self._objects_field(
                        read, source_value, details, field_path, position_context
                    )
                    if result is not _SLOW:
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
            return _SLOW
        if type(value) not in _LISTS:
            return _SLOW
        try:
            completed = self._complete_objects(
                read.shape, details, None, path, value, position_context
            )
        except Exception as raw_error:
            self.handle_field_error(raw_error, read.field_type, details, path)
            return None
        if completed is _SLOW or type(completed) is list:
            return completed
        return self._settle(completed, read.field_type, details, path)

    def complete_value(
        self,
        return_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo,
        path: Path,
        result: Any,
        position_context: Any,
    ) -> AwaitableOrValue[Any]:
        if self._has_middleware:
            pass
        elif type(result) in _LISTS:
            shape = self._object_list(return_type)
            if shape is not None:
                completed = self._complete_objects(
                    shape, field_details_list, info, path, result, position_context
                )
                if completed is not _SLOW:
                    return completed
        elif getattr(type(result), SHARED_VALUE, False):
            completed = self._complete_shared(return_type, field_details_list, result)
            if completed is not _SLOW:
                return completed
        return super().complete_value(
            return_type, field_details_list, info, path, result, position_context
        )

    def _complete_shared(
        self, return_type: GraphQLOutputType, details: FieldDetailsList, value: Any
    ) -> Any:
        """A shared value with a selection of leaf attribute fields, completed once."""
        _, object_type = _unwrap(return_type)
        if not isinstance(object_type, GraphQLObjectType) or object_type.is_type_of is not None:
            return _SLOW
        if any(d.node.directives for d in details):
            return _SLOW
        fields, new_defer_usages, _ = self.collect_subfields(object_type, details)
        if new_defer_usages:
            return _SLOW
        plan = self._plan(object_type, fields)
        if not all(type(read) is LeafRead for _, _, read in plan):
            return _SLOW
        # Keyed by the field nodes actually collected, not the field's own: one document with
        # `@include(if: $v)` on a fragment collects different fields for different variables.
        nodes = tuple(d.node for _, collected, _ in plan for d in collected)
        done = _COMPLETIONS.get(value, nodes)
        if done is None:
            done = {}
            for response_name, _, read in plan:
                try:
                    completed = read.complete(value)  # type: ignore[union-attr]
                except Exception:  # the general way reports it at the field that raised
                    return _SLOW
                if completed is _SLOW:
                    return _SLOW
                done[response_name] = completed
            _COMPLETIONS.put(value, nodes, done)
        return dict(done)  # each result its own dict: whoever gets it may change it

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
        info: GraphQLResolveInfo | None,
        path: Path,
        items: Sequence[Any],
        position_context: Any,
    ) -> Any:
        """Each item straight into its sub-selection; _SLOW before any work when an item is
        not a plain instance of the type, or the field asks for incremental delivery."""
        if any(d.node.directives for d in details):
            return _SLOW
        is_awaitable = self.is_awaitable
        is_type_of = shape.object_type.is_type_of
        if is_type_of is None and position_context is None:
            completed_at_once = self._complete_compiled(shape.object_type, details, items)
            if completed_at_once is not _SLOW:
                return completed_at_once
        if is_type_of is not None and info is None:
            return _SLOW
        for item in items:
            if item is None or isinstance(item, Exception) or is_awaitable(item):
                return _SLOW
            if is_type_of is not None and is_type_of(item, info) is not True:
                return _SLOW
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
        """The items through their compiled selection, or _SLOW (nothing done that counts)
        when the selection or a value is not plain."""
        compiled = self._compiled_items(object_type, details)
        if compiled is None:
            return _SLOW
        item_class, completion = compiled
        try:
            return complete_items(completion, item_class, items)
        except Exception:  # reported with its path by the general way
            return _SLOW

    def _compiled_items(
        self, object_type: GraphQLObjectType, details: FieldDetailsList
    ) -> tuple[type, Compiled] | None:
        """The class items of `object_type` must have and the compiled selection `details`
        make of them, or None when there is no such class or the selection is not plain."""
        item_class = origin_class(object_type)
        if item_class is None:
            return None
        fields, new_defer_usages, _ = self.collect_subfields(object_type, details)
        compiled = None if new_defer_usages else self._compiled(object_type, fields)
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


class _SharedEvent:
    """The per-event executor of a subscription event that is a shared value: all graphql-core
    asks of it is `execute_operation`."""

    __slots__ = ("base", "event")

    def __init__(self, base: FastExecutionContext, event: Any) -> None:
        self.base = base
        self.event = event

    def execute_operation(self, serially: bool | None = None) -> Any:
        base = self.base
        data = base._shared_event_data(self.event)
        if data is _SLOW:
            return base._copy_for_event(self.event).execute_operation(serially)
        base.run_async_work_finished_hook()
        return ExecutionResult(data, None)


def _helpers_of(context: FastExecutionContext) -> GraphQLResolveInfoHelpers:
    """The helpers resolvers reach through their info, holding the context weakly: graphql-core's
    own hold it through bound methods, a reference cycle that kept everything a request read
    and built (the context's loaders, their rows) alive until the cycle collector found it,
    which then took tens of milliseconds in whichever request came next. Resolvers only use
    the helpers while the context runs them, so it is alive then."""
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
