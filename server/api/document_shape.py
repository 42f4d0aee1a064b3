"""How deep, how wide and how aliased an operation is once its fragments are expanded.

Fragments spread in each other double at every level, so walking spread by spread (as
strawberry's limiters do) can take as long as billions of fields; `OperationShape` measures
each fragment once, linear in the document. The measures: docs/security.md ("Limits") and
docs/architecture.md ("Query shape and the checked-text cache").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
)
from graphql.language import SKIP, VisitorAction


@dataclass(frozen=True, slots=True)
class Shape:
    depth: int
    fields: int
    aliases: int


NOTHING = Shape(0, 0, 0)


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    depth: int
    fields: int
    aliases: int


def shape_rule(limits: ShapeLimits) -> type[ValidationRule]:
    """The validation rule that refuses an operation over `limits`, naming the limit."""

    return type("LimitedOperationShape", (OperationShape,), {"limits": limits})


class OperationShape(ValidationRule):
    """Measures each operation (see the module's docstring) and reports each limit it passes."""

    limits = ShapeLimits(depth=12, fields=10_000, aliases=30)

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        self.fragments = {
            d.name.value: d.selection_set
            for d in context.document.definitions
            if isinstance(d, FragmentDefinitionNode)
        }
        self.shapes: dict[int, Shape] = {}  # by id() of a selection set of this document

    def enter_operation_definition(
        self, node: OperationDefinitionNode, *_args: Any
    ) -> VisitorAction:
        shape = self.measure(node.selection_set)
        kind = node.operation.value
        name = f"{kind} '{node.name.value}'" if node.name else f"the unnamed {kind}"
        limits = self.limits
        if shape.depth > limits.depth:
            self.report_error(
                GraphQLError(
                    f"{name} is nested {shape.depth} levels deep; the query depth limit of "
                    f"this server is {limits.depth}",
                    node,
                    extensions={"code": "QUERY_TOO_DEEP", "limit": limits.depth},
                )
            )
        if shape.fields > limits.fields:
            self.report_error(
                GraphQLError(
                    f"{name} asks for {shape.fields:,} fields, counting a fragment's fields "
                    "once for every place it is spread; the field limit of this server is "
                    f"{limits.fields:,}",
                    node,
                    extensions={"code": "QUERY_TOO_LARGE", "limit": limits.fields},
                )
            )
        if shape.aliases > limits.aliases:
            self.report_error(
                GraphQLError(
                    f"{name} uses {shape.aliases:,} aliases, counting a fragment's once for "
                    f"every place it is spread; the alias limit of this server is {limits.aliases}",
                    node,
                    extensions={"code": "TOO_MANY_ALIASES", "limit": limits.aliases},
                )
            )
        return SKIP  # the measures are all this rule needs; other rules still visit it

    def measure(self, root: SelectionSetNode) -> Shape:
        """`root`'s shape, each selection set below it measured once (depth first, with an
        explicit stack: a document may nest hundreds of levels). A fragment spread inside
        itself counts nothing here; `NoFragmentCyclesRule` refuses the document."""
        shapes = self.shapes
        started: set[int] = set()
        stack: list[tuple[SelectionSetNode, bool]] = [(root, False)]
        while stack:
            node, parts_done = stack.pop()
            key = id(node)
            if key in shapes:
                continue
            if parts_done:
                shapes[key] = self._combine(node)
                started.discard(key)
                continue
            started.add(key)
            stack.append((node, True))
            for part in self._parts(node):
                if id(part) not in shapes and id(part) not in started:
                    stack.append((part, False))
        return shapes[id(root)]

    def _parts(self, node: SelectionSetNode) -> list[SelectionSetNode]:
        parts = []
        for selection in node.selections:
            if isinstance(selection, FragmentSpreadNode):
                fragment = self.fragments.get(selection.name.value)
                if fragment is not None:
                    parts.append(fragment)
            elif isinstance(selection, FieldNode | InlineFragmentNode) and selection.selection_set:
                parts.append(selection.selection_set)
        return parts

    def _combine(self, node: SelectionSetNode) -> Shape:
        shapes = self.shapes
        depth = fields = aliases = 0
        for selection in node.selections:
            if isinstance(selection, FieldNode):
                below = (
                    shapes.get(id(selection.selection_set), NOTHING)
                    if selection.selection_set is not None
                    else NOTHING
                )
                fields += 1 + below.fields
                aliases += (selection.alias is not None) + below.aliases
                if selection.selection_set is not None and not selection.name.value.startswith(
                    "__"
                ):
                    depth = max(depth, 1 + below.depth)
                continue
            if isinstance(selection, InlineFragmentNode):
                below = shapes.get(id(selection.selection_set), NOTHING)
            elif isinstance(selection, FragmentSpreadNode):
                fragment = self.fragments.get(selection.name.value)
                below = NOTHING if fragment is None else shapes.get(id(fragment), NOTHING)
            else:
                continue
            fields += below.fields
            aliases += below.aliases
            depth = max(depth, below.depth)
        return Shape(depth, fields, aliases)
