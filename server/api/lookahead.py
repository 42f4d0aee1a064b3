"""Which fields a query asks for below the field being resolved, through fragments.

A list resolver that knows its items' linked fields will be wanted can read them for the whole
page at once, in the same worker-thread hop as the page itself.
"""

from __future__ import annotations

from collections.abc import Iterable

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


def selected_below(info: Info, *path: str) -> bool:
    """Whether the field being resolved has `path` (GraphQL field names) in its selection.

    Asked once per object of a list (every job of a page asks it of its taskRoles), the answer
    is kept for the request by the field's nodes in the query document."""
    nodes = info._raw_info.field_nodes
    memo = info.context.lookahead
    key = (*map(id, nodes), path)
    found = memo.get(key)
    if found is not None and all(a is b for a, b in zip(found[0], nodes, strict=True)):
        return found[1]  # the very nodes (kept in the entry, so their ids are not reused)
    answer = any(_selects(field.selections, path) for field in info.selected_fields)
    memo[key] = (nodes, answer)
    return answer
