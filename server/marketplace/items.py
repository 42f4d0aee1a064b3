"""What an item is made of: YAML the protocol engine accepts, and descriptive fields with rules.

A job template must be a valid job and a component a valid component; the item's kind follows
from the content (a job is a JOB_TEMPLATE, a component its prerequisite type). Its name and
version come from the content too. Every problem is an `Issue` with a path into the input, a
stable code and a sentence that says what to do.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from server.api.ids import BadId, global_id, parse_global_id
from server.protocol import Issue, Kind, parse_document
from server.protocol.issues import Severity
from server.protocol.model import Dialect, JobSpec, Prerequisite, PrerequisiteType
from server.protocol.secrets import declare_secrets
from server.shapes.accounts import check_name
from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import ItemDetails, Visibility
from server.shapes.store_errors import InvalidValue

API_TYPE = "MarketplaceItem"  # the type name in an item's global ID
MAX_LABELS = 20
MAX_LABEL_LENGTH = 64
MAX_SUMMARY = 300
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,99}")
VERSION_RULE = "1 to 100 letters, digits or . _ + ~ -, starting with a letter or digit"
_KIND_OF_TYPE: dict[PrerequisiteType, ItemKind] = {
    PrerequisiteType.DOCKERIMAGE: ItemKind.DOCKERIMAGE,
    PrerequisiteType.DATA: ItemKind.DATA,
    PrerequisiteType.SCRIPT: ItemKind.SCRIPT,
    PrerequisiteType.STORAGE: ItemKind.STORAGE,
    PrerequisiteType.OUTPUT: ItemKind.OUTPUT,
    PrerequisiteType.PLUGIN: ItemKind.PLUGIN,
}


class IssuesFound(Exception):
    """Raised inside the marketplace to hand back every issue at once."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("; ".join(issue.message for issue in issues))
        self.issues = issues


@dataclass(frozen=True)
class ItemDocument:
    """Published content, read: its kind, name and version, and what it describes."""

    kind: ItemKind
    name: str
    version: str | None
    description: str | None  # the content's own description, a default for the item's
    content: str  # as it is stored: secrets declared without values, credentials lifted
    spec: JobSpec | None = None  # a template's job (parameters not rendered)
    component: Prerequisite | None = None
    warnings: tuple[Issue, ...] = ()  # for the publisher: e.g. a credential made a secret


def api_id(key: str) -> str:
    """The ID the API shows for an item, which marketplace://prerequisites/itemId/ takes."""
    return global_id(API_TYPE, key)


def item_key(item_id: str) -> str | None:
    """The store key of an item's API ID; a bare key is accepted as well. None when `item_id`
    is the ID of something else."""
    try:
        type_name, key = parse_global_id(item_id)
    except BadId:
        return item_id if re.fullmatch(r"[0-9a-f]{1,32}", item_id) else None
    return key if type_name == API_TYPE else None


def read_item(content: str, *, path: str = "content") -> ItemDocument:
    """The item `content` describes; raises IssuesFound (paths start at `path`) when the
    protocol engine rejects it or its version breaks the version rule."""
    result = parse_document(content)
    if not result.ok:
        raise IssuesFound([issue.within(path) for issue in result.errors])
    if result.kind is Kind.COMPONENT:
        component = result.component
        assert component is not None
        _check_with_defaults(content, component, path)
        kind, name = _KIND_OF_TYPE[component.type], component.name
        version, description = component.version, component.description
        spec = None
    else:
        spec = result.spec
        assert spec is not None
        kind, name, version = ItemKind.JOB_TEMPLATE, spec.name, spec.version
        description = spec.description
        component = None
    if version is not None:
        version = str(version).strip()
        issue = check_version(version, [path, "version"])
        if issue is not None:
            raise IssuesFound([issue])
    # What is kept: the text with its credentials lifted into secrets (a reference in their
    # place) and a job's secrets declared by name with empty values, for its user to supply.
    stored = result.source or content
    warnings = [issue.within(path) for issue in result.warnings]
    if spec is not None and spec.dialect is Dialect.V2 and spec.secrets:
        names = list(spec.secrets)
        stored = declare_secrets(stored, names)
        warnings.append(
            Issue.at(
                [path, "secrets"],
                "secrets-not-published",
                f"published without their values: the secrets {', '.join(map(repr, names))}; "
                "whoever uses this template supplies them",
                Severity.WARNING,
            )
        )
    return ItemDocument(
        kind=kind,
        name=name,
        version=version or None,
        description=(description or "").strip() or None,
        content=stored,
        spec=spec,
        component=component,
        warnings=tuple(warnings),
    )


def _check_with_defaults(content: str, component: Prerequisite, path: str) -> None:
    """A component whose declared variables have defaults must also be valid with them filled
    in (a variable without one stays a placeholder, which the checks leave alone)."""
    defaults = {
        name: component.variable_defaults[name]
        for name in component.template_variables
        if name in component.variable_defaults
    }
    if not defaults:
        return
    filled = parse_document(content, variables=defaults)
    if filled.errors:
        raise IssuesFound(
            [
                dataclasses.replace(
                    issue.within(path),
                    message=f"{issue.message} (with the declared defaults filled in: "
                    + ", ".join(f"{k}={v!r}" for k, v in defaults.items())
                    + ")",
                )
                for issue in filled.errors
            ]
        )


def check_version(version: str, path: list[str]) -> Issue | None:
    if VERSION.fullmatch(version):
        return None
    return Issue.at(path, "pattern", f"version {version!r} is not allowed: use {VERSION_RULE}")


def summary_from(description: str | None) -> str | None:
    """A default summary: the first line of the content's description, shortened."""
    if not description:
        return None
    first = description.strip().splitlines()[0].strip()
    return first if len(first) <= MAX_SUMMARY else first[: MAX_SUMMARY - 1].rstrip() + "…"


def check_labels(
    values: list[str] | None, field: str
) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """Tags or categories: trimmed, 1 to 64 characters, at most 20, duplicates dropped."""
    if values is None:
        return None, []
    issues: list[Issue] = []
    seen: dict[str, str] = {}
    for index, raw in enumerate(values):
        value = raw.strip()
        if not value or len(value) > MAX_LABEL_LENGTH or any(ord(c) < 32 for c in value):
            issues.append(
                Issue.at(
                    [field, str(index)],
                    "label",
                    f"{field} {raw!r} is not allowed: use 1 to {MAX_LABEL_LENGTH} printable "
                    "characters",
                )
            )
            continue
        seen.setdefault(value.lower(), value)
    if len(seen) > MAX_LABELS:
        issues.append(
            Issue.at([field], "too-many", f"give at most {MAX_LABELS} {field}, got {len(seen)}")
        )
    return tuple(seen.values()), issues


def check_groups(groups: list[str] | None) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """Group names follow the virtual cluster name rule (groups are virtual clusters)."""
    if groups is None:
        return None, []
    issues: list[Issue] = []
    names: list[str] = []
    for index, group in enumerate(groups):
        try:
            names.append(check_name(group.strip(), "group name"))
        except InvalidValue as exc:
            issues.append(Issue.at(["groups", str(index)], "pattern", str(exc)))
    return tuple(dict.fromkeys(names)), issues


def check_visibility(
    visibility: Visibility | None,
    groups: tuple[str, ...] | None,
    *,
    current: Visibility | None = None,
    current_groups: tuple[str, ...] = (),
) -> tuple[Visibility | None, list[Issue]]:
    """The visibility that results: groups alone mean GROUPS; GROUPS needs at least one group
    (given now or kept from before); PUBLIC and PRIVATE take no groups."""
    if visibility is None and groups:
        visibility = Visibility.GROUPS
    if visibility is Visibility.GROUPS:
        if groups == () or (
            groups is None and not (current is Visibility.GROUPS and current_groups)
        ):
            return None, [
                Issue.at(
                    ["groups"],
                    "required",
                    "visibility GROUPS shares the item with groups: name at least one group "
                    "(a virtual cluster)",
                )
            ]
    elif visibility is not None and groups:
        return None, [
            Issue.at(
                ["groups"],
                "conflict",
                f"groups apply only with visibility GROUPS, not {visibility.name}",
            )
        ]
    return visibility, []


def details_for(
    document: ItemDocument,
    *,
    summary: str | None,
    description: str | None,
    tags: list[str] | None,
    categories: list[str] | None,
    visibility: Visibility | None,
    groups: list[str] | None,
) -> ItemDetails:
    """A new item's details: given values, else the content's description (and its first
    line as the summary), public. Raises IssuesFound."""
    checked_tags, issues = check_labels(tags, "tags")
    checked_categories, more = check_labels(categories, "categories")
    issues += more
    checked_groups, more = check_groups(groups)
    issues += more
    chosen, more = check_visibility(visibility, checked_groups)
    issues += more
    if summary is not None and len(summary.strip()) > MAX_SUMMARY:
        issues.append(
            Issue.at(["summary"], "too-long", f"a summary has at most {MAX_SUMMARY} characters")
        )
    if issues:
        raise IssuesFound(issues)
    text = description.strip() if description is not None else document.description
    return ItemDetails(
        summary=(summary.strip() if summary is not None else summary_from(text)) or None,
        description=text or None,
        tags=checked_tags or (),
        categories=checked_categories or (),
        visibility=chosen or Visibility.PUBLIC,
        groups=checked_groups or (),
    )
