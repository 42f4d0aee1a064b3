"""Random valid GraphQL queries for a schema, for differential testing of executors.

Each query picks root fields and, below them, random fields of each type, with what tends to
reach an executor's corners: aliases, named fragments on the object type or on an interface
it implements, inline fragments on the possible types of an abstract field, `@skip` and
`@include` with Boolean variables on fields, fragments and spreads, and arguments drawn from
values the caller knows to be interesting (existing and unknown ids, cursors valid and not,
page sizes at and past their limits). Every query is checked against the schema; the rare
one that breaks a validation rule (fields that cannot merge) is drawn again.

hypothesis-graphql was considered: it builds queries from the schema alone, so its arguments
are random strings that find nothing, and it writes no named fragments, variables or
directives, which is where executors differ.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    GraphQLArgument,
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLUnionType,
    get_named_type,
    is_leaf_type,
    parse,
    validate,
)

# Values to pick for arguments, by argument name first, then by type name; None is "omit it".
Values = Mapping[str, Sequence[Any]]


@dataclass
class GeneratedQuery:
    text: str
    variables: dict[str, Any]


@dataclass
class GeneratedSelection:
    """A selection set of one type, with the fragments it spreads and its variables."""

    text: str
    fragments: list[str]
    variables: dict[str, bool]


@dataclass
class _Draft:
    """What one query being written has collected besides its text."""

    rng: random.Random
    fragments: dict[str, str] = field(default_factory=dict)
    variables: dict[str, bool] = field(default_factory=dict)
    aliases: int = 0

    def alias(self) -> str:
        self.aliases += 1
        return f"a{self.aliases}"

    def condition(self) -> str:
        """` @skip(if: $vN)` or ` @include(if: $vN)` with a fresh variable, or nothing."""
        if self.rng.random() > 0.25:
            return ""
        name = f"v{len(self.variables)}"
        self.variables[name] = self.rng.random() < 0.5
        directive = self.rng.choice(("skip", "include"))
        return f" @{directive}(if: ${name})"


class QueryGenerator:
    """Queries over `schema`'s query type, arguments from `values` (see Values)."""

    def __init__(
        self,
        schema: GraphQLSchema,
        values: Values,
        *,
        max_depth: int = 5,
        max_fields: int = 4,
        field_conditions: bool = True,
    ) -> None:
        """`field_conditions=False` puts `@skip`/`@include` on fragments and spreads only."""
        assert schema.query_type is not None
        self.schema = schema
        self.field_conditions = field_conditions
        self.values = values
        self.max_depth = max_depth
        self.max_fields = max_fields
        self.rejected = 0  # drafts that broke a validation rule and were drawn again

    def query(self, rng: random.Random) -> GeneratedQuery:
        while True:
            draft = _Draft(rng)
            root = self.schema.query_type
            assert root is not None
            body = self._selection(draft, root, 0, at_least=1)
            declared = "".join(f", ${name}: Boolean!" for name in draft.variables)[2:]
            header = f"query Q({declared})" if declared else "query Q"
            text = " ".join([f"{header} {body}", *draft.fragments.values()])
            if not validate(self.schema, parse(text)):
                return GeneratedQuery(text, dict(draft.variables))
            self.rejected += 1

    def selection_of(self, rng: random.Random, type_: GraphQLNamedType) -> GeneratedSelection:
        """A random selection set of `type_` (e.g. a subscription's event type)."""
        draft = _Draft(rng)
        text = self._selection(draft, type_, 1)
        return GeneratedSelection(text, list(draft.fragments.values()), dict(draft.variables))

    def _selection(
        self, draft: _Draft, parent: GraphQLNamedType, depth: int, *, at_least: int = 1
    ) -> str:
        rng = draft.rng
        parts: list[str] = []
        if isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
            fields = list(parent.fields.items())
            count = rng.randint(at_least, min(self.max_fields, len(fields)))
            for name, definition in rng.sample(fields, count):
                part = self._field(draft, name, definition, depth)
                if part is not None:
                    parts.append(part)
        if depth > 0 and rng.random() < 0.3:
            parts.append(self._fragment(draft, parent, depth))
        if isinstance(parent, GraphQLInterfaceType | GraphQLUnionType):
            for possible in self.schema.get_possible_types(parent):
                if rng.random() < 0.6:
                    inner = self._selection(draft, possible, depth)
                    parts.append(f"... on {possible.name}{draft.condition()} {inner}")
        if not parts:  # everything drawn needed more depth than is left
            parts.append("__typename")
        return "{ " + " ".join(parts) + " }"

    def _field(self, draft: _Draft, name: str, definition: GraphQLField, depth: int) -> str | None:
        named = get_named_type(definition.type)
        if not is_leaf_type(named) and depth + 1 >= self.max_depth:
            return None
        arguments = self._arguments(draft, definition.args)
        if arguments is None:
            return None
        # A field with arguments gets an alias of its own: two of them cannot clash.
        aliased = bool(arguments) or draft.rng.random() < 0.2
        head = f"{draft.alias()}: {name}" if aliased else name
        text = f"{head}{arguments}{draft.condition() if self.field_conditions else ''}"
        if is_leaf_type(named):
            return text
        return f"{text} {self._selection(draft, named, depth + 1)}"

    def _fragment(self, draft: _Draft, parent: GraphQLNamedType, depth: int) -> str:
        """A spread of a new named fragment on `parent` or on an interface it implements."""
        on: GraphQLNamedType = parent
        interfaces = getattr(parent, "interfaces", ())
        if interfaces and draft.rng.random() < 0.6:
            on = draft.rng.choice(interfaces)
        name = f"F{len(draft.fragments)}"
        draft.fragments[name] = ""  # reserved before its body, which may add fragments too
        body = self._selection(draft, on, depth)
        draft.fragments[name] = f"fragment {name} on {on.name} {body}"
        return f"...{name}{draft.condition()}"

    def _arguments(self, draft: _Draft, arguments: Mapping[str, GraphQLArgument]) -> str | None:
        """`(a: 1, b: "x")`, "" for none, or None when a required one has no value to give."""
        given = []
        for name, argument in arguments.items():
            required = isinstance(argument.type, GraphQLNonNull)
            if not required and draft.rng.random() < 0.4:
                continue
            value = self._value(draft.rng, name, argument.type)
            if value is None:
                if required:
                    return None
                continue
            given.append(f"{name}: {value}")
        return f"({', '.join(given)})" if given else ""

    def _value(self, rng: random.Random, name: str, type_: GraphQLInputType) -> str | None:
        """A literal for an argument or input field, or None to leave it out."""
        inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
        candidates = self.values.get(name)
        if candidates is None:
            candidates = self.values.get(get_named_type(inner).name)
        if candidates is not None:
            chosen = rng.choice(list(candidates))
            return None if chosen is None else _literal(inner, chosen)
        if isinstance(inner, GraphQLList):
            item = self._value(rng, name, inner.of_type)
            return None if item is None else f"[{item}]"
        if isinstance(inner, GraphQLEnumType):
            return rng.choice(list(inner.values))
        if isinstance(inner, GraphQLInputObjectType):
            parts = []
            for field_name, input_field in inner.fields.items():
                if rng.random() < 0.5:
                    value = self._value(rng, field_name, input_field.type)
                    if value is not None:
                        parts.append(f"{field_name}: {value}")
            return "{" + ", ".join(parts) + "}"
        if isinstance(inner, GraphQLScalarType) and inner.name == "Boolean":
            return rng.choice(("true", "false"))
        return None


def _literal(type_: GraphQLInputType, value: Any) -> str:
    """`value` written as a GraphQL literal of `type_` (enum values by name, lists as lists)."""
    inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
    if isinstance(inner, GraphQLList):
        items = value if isinstance(value, list | tuple) else [value]
        return "[" + ", ".join(_literal(inner.of_type, item) for item in items) + "]"
    if isinstance(inner, GraphQLEnumType):
        return str(value)
    return json.dumps(value)  # strings, numbers, booleans: JSON's spelling is GraphQL's
