"""Which fields a query asks for below the field being resolved, through fragments.

A list resolver that knows its items' linked fields will be wanted can read them for the whole
page at once, in the same worker-thread hop as the page itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from graphql.pyutils import Path
from strawberry.types.nodes import SelectedField, Selection

from server.api.context import Info


def _selects(selections: Iterable[Selection], path: tuple[str, ...]) -> bool:
    if not path:
        return True
    for selection in selections:
        if isinstance(selection, SelectedField):
            if selection.name == path[0] and _selects(selection.selections, path[1:]):
                return True
        elif _selects(selection.selections, path):  # a fragment: look inside, same level
            return True
    return False


def _names_at(selections: Iterable[Selection], path: tuple[str, ...], into: set[str]) -> None:
    for selection in selections:
        if not isinstance(selection, SelectedField):  # a fragment: look inside, same level
            _names_at(selection.selections, path, into)
        elif not path:
            into.add(selection.name)
        elif selection.name == path[0]:
            _names_at(selection.selections, path[1:], into)


def fields_selected_at(info: Info, *path: str) -> set[str]:
    """The names of every field the query selects at `path` below the field being resolved,
    in every place it reaches `path` (aliases, fragments; a field under `@skip` counts too)."""
    names: set[str] = set()
    for field in info.selected_fields:
        _names_at(field.selections, path, names)
    return names


def _field_path(at: Path | None) -> tuple[tuple[str, str | None], ...]:
    """The response path to a field without list indices (every item of a list has the same
    fields of the query), each key with its parent type's name (which fragments apply)."""
    keys = []
    while at is not None:
        if type(at.key) is str:
            keys.append((at.key, at.typename))
        at = at.prev
    return tuple(keys)


def selected_below(info: Info, *path: str) -> bool:
    """Whether the field being resolved has `path` (GraphQL field names) in its selection.

    Asked once per object of a list (every job of a page asks it of its taskRoles), the answer
    is kept for the execution by the field's response path: within one operation and one set
    of variables (which decide `@include` and `@skip`), that path names the same nodes of the
    query document."""
    operation, variables = info.operation, info.variable_values
    memo = info.context.lookahead
    key = (id(operation), _field_path(info.path), path)
    found = memo.get(key)
    if found is not None and found[0] is operation and found[1] is variables:
        # The very objects the entry keeps (so their ids are not reused): the same execution.
        return found[2]
    answer = any(_selects(field.selections, path) for field in info.selected_fields)
    memo[key] = (operation, variables, answer)
    return answer
