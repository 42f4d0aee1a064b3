"""One reference to one component: find its text, read it with the protocol engine, fill in
its template variables.

Lookups go through the viewer's ItemLookup, so an item they may not see is not found, and what
is found must be a component, not a job template (docs/dialects.md, References).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from server.marketplace.fetch import FetchError, FetchSession
from server.marketplace.lookup import ItemContent, ItemLookup, Viewer
from server.protocol import Kind, parse_document
from server.protocol.model import Prerequisite, PrerequisiteOrigin
from server.shapes.item_kind import ItemKind

log = logging.getLogger(__name__)

BY_ID = re.compile(r"marketplace://prerequisites/itemId/([^/@\s]+)")
BY_NAME = re.compile(r"marketplace://name/([^/@\s]+)(?:@([^/\s]+))?")
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")
_SHOWN_ISSUES = 3


class Code(StrEnum):
    """The error codes of reference resolution (seed 004's errors each have their own)."""

    BAD_REFERENCE = "reference"  # not of a form this server knows
    NOT_FOUND = "not-found"  # "the corresponding prerequisite can not be found"
    UNREACHABLE = "marketplace-unreachable"  # "fail to call marketplace's API"
    DOWNLOAD_FAILED = "download-failed"  # "fail to download the prerequisite item"
    REMOTE_REFUSED = "remote-refused"
    TOO_LARGE = "too-large"
    INVALID = "invalid-component"
    NOT_A_COMPONENT = "not-a-component"
    WRONG_TYPE = "wrong-type"
    MISSING_VARIABLE = "missing-variable"
    UNKNOWN_VARIABLE = "unknown-variable"  # a warning
    CYCLE = "require-cycle"
    TOO_DEEP = "too-deep"
    TOO_MANY = "too-many"
    UNKNOWN_PREREQUISITE = "unknown-prerequisite"
    STORAGE_FORBIDDEN = "storage-forbidden"  # "no permission to requireStorages"
    STORAGE_UNDEFINED = "storage-undefined"
    STORAGE_CONFLICT = "storage-conflict"
    STORAGE_UNAVAILABLE = "storage-unavailable"


class Unresolvable(Exception):
    """A reference cannot be turned into a component; `code` and `message` say why."""

    def __init__(self, code: Code | str, message: str) -> None:
        super().__init__(message)
        self.code = str(code)
        self.message = message


@dataclass(frozen=True)
class Source:
    """The text of a referenced component and where it came from."""

    key: str  # the same component however it is referenced (for cycles and reuse)
    label: str  # how messages name it: "mnist@1.0" or the URL
    text: str | bytes
    origin: PrerequisiteOrigin


def load_source(reference: str, items: ItemLookup, viewer: Viewer, session: FetchSession) -> Source:
    """The component's text; Unresolvable when it cannot be had."""
    if reference.startswith(("http://", "https://")):
        try:
            body = session.get(reference)
        except FetchError as exc:
            raise Unresolvable(exc.failure.value, exc.message) from None
        origin = PrerequisiteOrigin(reference=reference, url=reference)
        return Source(key=f"url:{reference}", label=reference, text=body, origin=origin)
    item = _lookup(reference, items, viewer)
    if item.kind is ItemKind.JOB_TEMPLATE:
        raise Unresolvable(
            Code.NOT_A_COMPONENT,
            f"{reference} is the job template {item.name}@{item.version}, not a component; "
            "only prerequisites (dockerimage, data, script, storage, output, plugin) can be "
            "referenced here",
        )
    origin = PrerequisiteOrigin(reference=reference, item_id=item.id, item_version=item.version)
    return Source(
        key=f"item:{item.id}@{item.version}",
        label=f"{item.name}@{item.version}",
        text=item.content,
        origin=origin,
    )


def _lookup(reference: str, items: ItemLookup, viewer: Viewer) -> ItemContent:
    by_id = BY_ID.fullmatch(reference)
    by_name = BY_NAME.fullmatch(reference)
    try:
        if by_id:
            item = items.by_id(by_id.group(1), viewer)
            what = f"marketplace item {by_id.group(1)!r}"
        elif by_name:
            name, version = by_name.group(1), by_name.group(2)
            item = items.by_name(name, version, viewer)
            what = f"marketplace item {name!r}" + (f" version {version!r}" if version else "")
        else:
            raise Unresolvable(
                Code.BAD_REFERENCE,
                f"{reference!r} is not a marketplace reference; use "
                "marketplace://prerequisites/itemId/<id> or marketplace://name/<name>[@version]",
            )
    except Unresolvable:
        raise
    except Exception as exc:  # the store behind the lookup failed: a database, a remote API
        log.warning("looking up %s failed: %r", reference, exc)
        raise Unresolvable(
            Code.UNREACHABLE,
            f"the marketplace cannot be reached to look up {reference} "
            f"({type(exc).__name__}); try again later",
        ) from None
    if item is None:
        raise Unresolvable(
            Code.NOT_FOUND,
            f"prerequisite not found: {what} does not exist or is not shared with you",
        )
    return item


def read_component(source: Source) -> Prerequisite:
    """The source's text read and validated by the protocol engine as one component."""
    result = parse_document(source.text)
    if result.kind is Kind.JOB:
        raise Unresolvable(
            Code.NOT_A_COMPONENT,
            f"{source.label} is a job, not a component; only prerequisites (dockerimage, data, "
            "script, storage, output, plugin) can be referenced here",
        )
    if result.errors or result.component is None:
        shown = "; ".join(
            f"{issue.path}: {issue.message}" if issue.path else issue.message
            for issue in result.errors[:_SHOWN_ISSUES]
        )
        more = len(result.errors) - _SHOWN_ISSUES
        if more > 0:
            shown += f"; and {more} more"
        raise Unresolvable(
            Code.INVALID, f"{source.label} is not a valid component: {shown or 'unreadable'}"
        )
    return result.component


def variables_check(component: Prerequisite, values: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(declared variables without a value, given values the component does not declare)."""
    missing = [v for v in component.template_variables if values.get(v) is None]
    unknown = [k for k in values if k not in component.template_variables]
    return missing, unknown


def fill_variables(component: Prerequisite, values: dict[str, Any]) -> Prerequisite:
    """The component with `{{ name }}` of each declared variable replaced by its value, in
    every field but its name; the result declares no variables any more."""
    declared = {k: _text(v) for k, v in values.items() if k in component.template_variables}
    data = component.model_dump(
        mode="json", exclude={"name", "template_variables", "variable_defaults", "origin"}
    )
    filled = _fill(data, declared)
    return Prerequisite.model_validate({**filled, "name": component.name})


def _fill(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def size_of(text: str | bytes) -> int:
    return len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
