"""Template variables fixed when items are published (`paigraph market import --set`).

A component can leave a value to whoever uses it, as a template variable (`{{ files }}`). A
site that imports a catalogue of items often knows some of those values once for all its users
(the address of its file server, say): `--set files=10.0.0.5:8808` publishes each item that
declares `files` with the value filled in and the variable no longer declared, so jobs use the
item without giving it.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.marketplace.components import fill_variables
from server.protocol import parse_document
from server.protocol.writer import prerequisite_dict
from server.protocol.yaml_out import dump_yaml


@dataclass(frozen=True)
class Fixed:
    """An item's content after fixing, and which of the values it declared."""

    content: str
    used: frozenset[str]


def fix_variables(content: str, values: dict[str, str]) -> Fixed:
    """`content` with the template variables it declares among `values` filled in. Content
    that declares none of them, or that is not a valid component, comes back unchanged (the
    server reports what is wrong with it when it is published)."""
    if not values:
        return Fixed(content, frozenset())
    component = parse_document(content).component
    if component is None:
        return Fixed(content, frozenset())
    used = {name: values[name] for name in component.template_variables if name in values}
    if not used:
        return Fixed(content, frozenset())
    filled = fill_variables(component, used)
    left = [name for name in component.template_variables if name not in used]
    document = prerequisite_dict(filled.model_copy(update={"template_variables": left}))
    return Fixed(dump_yaml(document), frozenset(used))
