"""A selection made of plain fields all the way down, compiled into one function.

Replaces graphql-core's per-item walk (a `Path` and a field lookup per field and item) for a
page's edges, a role's instances and such, reading attributes or stored values straight into
result dicts; any value that could err makes it answer `SLOW` first, so errors keep their
paths on graphql-core's way. More in docs/architecture.md ("The fast executor").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from graphql import GraphQLObjectType
from graphql.execution.collect_fields import FieldDetailsList

from server.api.execution.field_plans import (
    LISTS,
    SLOW,
    STRAWBERRY_FIELD,
    LeafRead,
    ObjectRead,
    ObjectsRead,
    Plan,
    StoredRead,
)
from server.api.prebuilt import StoredView

Compiled = Callable[[Any], Any]  # a value -> its completed dict, or SLOW
# The class the items of an object type must have, and the compiled selection made of them
# (for its stored values when the flag is set); None when there is no such class or the
# selection is not plain.
ItemsOf = Callable[[GraphQLObjectType, FieldDetailsList, bool], "tuple[type, Compiled] | None"]


@dataclass(frozen=True, slots=True)
class Step:
    """One field of a compiled selection: a leaf, or a list of objects completed by `items`
    (whose values must be of the exact class `item_class`), or with `one` a single such
    object (`non_null` when the field's type is)."""

    name: str
    get: Callable[[Any], Any]
    leaf: LeafRead | None
    items: Compiled | None = None
    item_class: type | None = None
    one: bool = False
    non_null: bool = False
    is_type_of: Callable[[Any, Any], object] | None = None


def compile_plan(
    plan: Sequence[Plan], items_of: ItemsOf, view: StoredView | None = None
) -> Compiled | None:
    """The selection planned as `plan` compiled, or None when one of its fields is not plain
    (`items_of` compiles the selections of its objects and lists of objects). With `view`,
    compiled for the stored values it reads from: each field through its getter (None when
    it has none), and lists of objects as their item types' stored values."""
    steps = []
    for name, details, read in plan:
        if type(read) is LeafRead:
            get = _field_getter(read, view)
            if get is None:
                return None
            steps.append(Step(name, get, read))
            continue
        if type(read) is ObjectRead:
            step = _object_step(name, details, read, items_of, view)
            if step is None:
                return None
            steps.append(step)
            continue
        if type(read) is ObjectsRead:
            get, stored = _field_getter(read, view), view is not None
        elif type(read) is StoredRead and view is None:
            get, stored = attrgetter(read.attribute), True
        else:
            return None
        if get is None or any(d.node.directives for d in details):
            return None
        items = items_of(read.shape.object_type, details, stored)
        if items is None:
            return None
        item_class, completion = items
        steps.append(Step(name, get, None, completion, item_class))
    return compile_selection(steps)


def _object_step(
    name: str,
    details: FieldDetailsList,
    read: ObjectRead,
    items_of: ItemsOf,
    view: StoredView | None,
) -> Step | None:
    """A field of one object compiled (not within a view: stored values are lists only)."""
    if view is not None or any(d.node.directives for d in details):
        return None
    compiled = items_of(read.object_type, details, False)
    if compiled is None:
        return None
    item_class, completion = compiled
    get = _getter(read.read, read.attribute)
    return Step(name, get, None, completion, item_class, True, read.non_null, read.is_type_of)


def _field_getter(
    read: LeafRead | ObjectsRead, view: StoredView | None
) -> Callable[[Any], Any] | None:
    """How the field is read: from the object's attribute, or through the view's getter."""
    if view is None:
        return _getter(read.read, read.attribute)
    return view.getters.get(read.attribute)


def compile_selection(steps: Sequence[Step]) -> Compiled:
    """A completion of a selection of attribute fields only, scalars, enums, and objects and
    lists of objects whose own selections are such, with no paths built: SLOW as soon as a
    value would need anything else (a null where none is allowed, a value a scalar refuses,
    an object of another class or one its type's check refuses), and the caller then
    completes the whole value the general way."""
    fields = tuple(
        (s.name, s.get, s.leaf, s.items, s.item_class, s.one, s.non_null, s.is_type_of)
        for s in steps
    )

    def complete(source: Any) -> Any:
        out: dict[str, Any] = {}
        for name, get, leaf, items, item_class, one, non_null, is_type_of in fields:
            value = get(source)
            if one:
                if value is None:
                    if non_null:
                        return SLOW
                    out[name] = None
                    continue
                if type(value) is not item_class:
                    return SLOW
                if is_type_of is not None and is_type_of(value, None) is not True:
                    return SLOW
                value = items(value)  # type: ignore[misc]
                if value is SLOW:
                    return SLOW
                out[name] = value
                continue
            if leaf is not None:
                if value is None:
                    if leaf.non_null:
                        return SLOW
                    out[name] = None
                    continue
                value = leaf.complete_value(value) if leaf.is_list else leaf.coerce(value)
                if value is SLOW:
                    return SLOW
                out[name] = value
                continue
            if type(value) not in LISTS:
                return SLOW
            value = complete_items(items, item_class, value)  # type: ignore[arg-type]
            if value is SLOW:
                return SLOW
            out[name] = value
        return out

    return complete


def complete_items(completion: Compiled, item_class: type, items: Sequence[Any]) -> Any:
    """Each item through `completion`, or SLOW when one is not of `item_class` or needs
    the general way."""
    completed = []
    for item in items:
        if type(item) is not item_class:
            return SLOW
        value = completion(item)
        if value is SLOW:
            return SLOW
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
