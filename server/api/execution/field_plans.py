"""How each schema field is completed in place, worked out once per field.

Replaces graphql-core's `execute_field` chain for fields strawberry resolves by reading an
attribute (or a `prebuilt` / `stored_items` resolver's held value), which cost several times
the read itself; a field whose answer could differ from graphql-core's is `SLOW`. The plan
kinds (`LeafRead`, `ObjectsRead`, `ObjectRead`, `StoredRead`): docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from graphql import (
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
    GraphQLString,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList
from graphql.pyutils import Undefined
from strawberry.types.field import StrawberryField

from server.api.prebuilt import PREBUILT, STORED_ITEMS, STORED_VIEW, StoredView

STRAWBERRY_FIELD = "strawberry-definition"  # where strawberry keeps its definition of a type
SLOW = object()  # "not completed here: take graphql-core's path"
LISTS = (list, tuple)


def _coerce(leaf: GraphQLLeafType, value: Any) -> Any:
    if isinstance(value, Exception):
        return SLOW
    try:
        coerced = leaf.coerce_output_value(value)
    except Exception:
        return SLOW
    return SLOW if coerced is None or coerced is Undefined else coerced


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
        names: dict[Any, str] = {}
        for name, enum_value in leaf.values.items():
            with suppress(TypeError):  # an unhashable value: the type answers for it
                names[enum_value.value] = name
        enum_class: Any = wrapped

        def enum_name(value: Any) -> Any:
            if type(value) is enum_class:
                name = names.get(value.value)
                if name is not None:
                    return name
            return _coerce(leaf, value)

        return enum_name
    return lambda value: _coerce(leaf, value)


def unwrap(type_: GraphQLOutputType) -> tuple[bool, GraphQLOutputType]:
    """Whether `type_` is non-null, and the type inside."""
    if isinstance(type_, GraphQLNonNull):
        return True, type_.of_type
    return False, type_


@dataclass(frozen=True, slots=True)
class ObjectList:
    """A list of objects of one concrete type: the item type as the schema has it."""

    item_type: GraphQLOutputType
    object_type: GraphQLObjectType


def object_list(type_: GraphQLOutputType) -> ObjectList | None:
    _, inner = unwrap(type_)
    if not isinstance(inner, GraphQLList):
        return None
    _, item = unwrap(inner.of_type)
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
            return SLOW if self.non_null else None
        if not self.is_list:
            return self.coerce(value)
        if type(value) not in LISTS:
            return SLOW
        coerce = self.coerce
        out: list[Any] = []
        for item in value:
            if item is None:
                if self.items_non_null:
                    return SLOW
                out.append(None)
                continue
            coerced = coerce(item)
            if coerced is SLOW:
                return SLOW
            out.append(coerced)
        return out


@dataclass(frozen=True, slots=True)
class ObjectsRead:
    """An attribute field whose type is a list of objects that do not check their values."""

    read: Callable[[Any, str], Any]
    attribute: str
    field_type: GraphQLOutputType
    shape: ObjectList


@dataclass(frozen=True, slots=True)
class StoredRead:
    """A resolver of a list of objects whose object keeps, in `attribute`, the stored values
    the items are made of; the item type has a `StoredView`."""

    attribute: str
    field_type: GraphQLOutputType
    shape: ObjectList


def view_of(object_type: GraphQLObjectType) -> StoredView | None:
    """How the fields of `object_type` read from a stored value, if its class says so."""
    definition = object_type.extensions.get(STRAWBERRY_FIELD)
    view = getattr(getattr(definition, "origin", None), STORED_VIEW, None)
    return view if isinstance(view, StoredView) else None


@dataclass(frozen=True, slots=True)
class ObjectRead:
    """An attribute field whose type is one object type (a connection's edge's node, its
    page info). Only compiled selections complete it in place (`compiled`); elsewhere it
    takes graphql-core's path."""

    read: Callable[[Any, str], Any]
    attribute: str
    non_null: bool
    object_type: GraphQLObjectType
    # strawberry's own check of a type with interfaces (a Job is a Node), which looks at the
    # value only (its resolve-info argument is unused): called with None in its place
    is_type_of: Callable[[Any, Any], object] | None


def _own_check(object_type: GraphQLObjectType) -> tuple[bool, Callable[[Any, Any], object] | None]:
    """Whether `object_type`'s values can be checked without a resolve-info, and the check
    (None: the type has none). A check the type's class defines itself may read the info."""
    check = object_type.is_type_of
    if check is None:
        return True, None
    definition = object_type.extensions.get(STRAWBERRY_FIELD)
    own = getattr(definition, "is_type_of", True)
    return own is None, check


FieldRead = LeafRead | ObjectsRead | StoredRead | ObjectRead
# A field of a selection: its response name, its nodes, and how to complete it in place (None:
# graphql-core's way).
Plan = tuple[str, FieldDetailsList, FieldRead | None]

# Schema fields live as long as their schema: what each one needs is worked out once, not per
# execution (a subscription executes its selection once per event and subscriber). Keyed by
# id(); each value holds its field, so the id cannot be reused while the entry exists.
_READS: dict[int, tuple[GraphQLField, FieldRead | None]] = {}


def field_read(field: GraphQLField, details: FieldDetailsList) -> FieldRead | None:
    """How to complete `field` in place, or None when it must take the general path."""
    if any(d.node.arguments or d.node.directives for d in details):
        return None
    cached = _READS.get(id(field))
    if cached is None or cached[0] is not field:
        cached = (field, _read_for(field))
        _READS[id(field)] = cached
    return cached[1]


def _read_for(field: GraphQLField) -> FieldRead | None:
    definition = field.extensions.get(STRAWBERRY_FIELD)
    if not isinstance(definition, StrawberryField):
        return None
    if not definition.is_basic_field:
        return _prebuilt_read(field, definition)
    if not getattr(field.resolve, "_is_default", False) or field.args:
        return None
    read, attribute = definition.default_resolver, definition.python_name
    shape = object_list(field.type)
    if shape is not None:
        if shape.object_type.is_type_of is not None:
            return None
        return ObjectsRead(read, attribute, field.type, shape)
    non_null, inner = unwrap(field.type)
    if isinstance(inner, GraphQLObjectType):
        checkable, check = _own_check(inner)
        return ObjectRead(read, attribute, non_null, inner, check) if checkable else None
    is_list = isinstance(inner, GraphQLList)
    items_non_null = False
    if isinstance(inner, GraphQLList):
        items_non_null, inner = unwrap(inner.of_type)
    if not is_leaf_type(inner):
        return None
    return LeafRead(read, attribute, non_null, leaf_coercer(inner), is_list, items_non_null)


def _prebuilt_read(
    field: GraphQLField, definition: StrawberryField
) -> ObjectsRead | StoredRead | None:
    """A resolver marked `prebuilt` whose field is a list of objects: read from the attribute
    its object may hold the answer in (a value that is not a list, None when nothing was
    built ahead, makes the executor call the resolver). One marked `stored_items`: a
    `StoredRead` when its item type has a view."""
    resolver = definition.base_resolver
    wrapped = resolver.wrapped_func if resolver is not None else None
    attribute = getattr(wrapped, PREBUILT, None)
    stored = getattr(wrapped, STORED_ITEMS, None)
    if field.args or definition.extensions or definition.permission_classes:
        return None
    shape = object_list(field.type)
    if shape is None or shape.object_type.is_type_of is not None:
        return None
    if isinstance(stored, str) and view_of(shape.object_type) is not None:
        return StoredRead(stored, field.type, shape)
    if not isinstance(attribute, str):
        return None
    return ObjectsRead(getattr, attribute, field.type, shape)
