"""Which other items an item's content refers to, as its page lists them.

A template refers to items through its task roles (docker image, data, script, output and
prerequisites named by `marketplace://` or `http(s)://` reference), through its prerequisites'
`require` lists and through `extras.reference_prerequisites` (seed 004); a component through its
own `require` list. Only the text is read here: whether a reference resolves, and whether the
viewer may see the item, is for the caller.
"""

from __future__ import annotations

from collections.abc import Iterable

from server.marketplace.items import ItemDocument
from server.marketplace.references import REFERENCE_PREREQUISITES
from server.protocol.model import Prerequisite
from server.protocol.rules import is_reference


def referenced(document: ItemDocument) -> list[str]:
    """Every reference the content makes, once each, in the order it makes them."""
    found: list[str] = []
    if document.component is not None:
        found += _required(document.component)
    if document.spec is not None:
        spec = document.spec
        for role in spec.task_roles:
            found += [role.docker_image, role.data or "", role.script or "", role.output or ""]
            found += role.prerequisites
        for prerequisite in spec.prerequisites:
            found += _required(prerequisite)
        aliases = spec.extras.get(REFERENCE_PREREQUISITES)
        for entry in aliases if isinstance(aliases, list) else []:
            requires = entry.get("require") if isinstance(entry, dict) else None
            for item in requires if isinstance(requires, list) else []:
                name = item.get("name") if isinstance(item, dict) else item
                found.append(name if isinstance(name, str) else "")
    return list(dict.fromkeys(_references(found)))


def _required(prerequisite: Prerequisite) -> list[str]:
    return [requirement.name for requirement in prerequisite.require]


def _references(names: Iterable[str]) -> Iterable[str]:
    return (name for name in names if name and is_reference(name))
