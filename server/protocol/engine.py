"""The protocol engine's front door: text in, a canonical JobSpec or component (or errors) out.

parse_document(text)        a job in any dialect, or a standalone component
parse_job(text, params)     a job only; a component is an error that says what it is
resolve_job(text, params)   parse_job, then replace references (when given a way to), render
                            parameters into commands, and check what can never launch: the
                            one path of every dry run and submission
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from server.protocol.credentials import Lifted, lift_credentials, with_masked_secrets
from server.protocol.dialect_draft import read_draft
from server.protocol.dialect_v1 import read_v1
from server.protocol.dialect_v2 import read_v2
from server.protocol.fields import Fields, describe
from server.protocol.issues import Issue, Issues, WithIssues
from server.protocol.launch_checks import launch_issues, nul_issues
from server.protocol.loader import DEFAULT_MAX_BYTES, LoadError, load_document
from server.protocol.model import DIALECT_TITLES, Dialect, JobSpec, Prerequisite
from server.protocol.prerequisites import COMPONENT_TYPES, read_prerequisite
from server.protocol.privileges import check_tree
from server.protocol.render import render_job
from server.protocol.runtime_plugins import apply_runtime_plugins

# Replaces a job's references with what they name: the spec (None when it cannot be done) and
# what was found on the way. The marketplace provides one; the protocol engine knows none.
ReferenceStep = Callable[[JobSpec], tuple[JobSpec | None, list[Issue]]]


class Kind(StrEnum):
    JOB = "job"
    COMPONENT = "component"


@dataclass
class ParseResult(WithIssues):
    dialect: Dialect | None = None
    kind: Kind | None = None
    spec: JobSpec | None = None
    component: Prerequisite | None = None
    issues: list[Issue] = field(default_factory=list)
    # the text as it may be kept and shown: secrets masked, credentials lifted into secrets
    source: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors and (self.spec is not None or self.component is not None)

    def summary(self) -> str:
        """What was found, in words: 'OpenPAI protocol v2 job' or 'dockerimage component'."""
        if self.kind is Kind.COMPONENT:
            kind = self.component.type if self.component else "prerequisite"
            return f"{kind} component ({DIALECT_TITLES[self.dialect or Dialect.V2]})"
        if self.dialect is None:
            return "unrecognised document"
        return f"job in {DIALECT_TITLES[self.dialect]}"


def parse_document(
    text: str | bytes,
    parameters: dict[str, Any] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    variables: dict[str, Any] | None = None,
) -> ParseResult:
    """Parse and validate a job (any dialect) or a standalone component; `{{ name }}`
    placeholders in YAML take the text of `variables[name]`, else stay as written."""
    result = ParseResult()
    try:
        loaded = load_document(text, max_bytes=max_bytes, variables=variables)
    except LoadError as exc:
        result.issues.append(exc.issue)
        return result
    doc, source = loaded.data, loaded.text
    if not isinstance(doc, dict):
        result.issues.append(
            Issue(
                "",
                "root-type",
                f"the document must be a mapping (a job or a component), got {describe(doc)}",
            )
        )
        return result
    found = [] if loaded.nul_free else nul_issues(doc)
    issues = Issues(found + nul_issues(parameters, "parameters") if parameters else found)
    detected = detect(doc)
    if detected is None:
        issues.error(
            "",
            "unknown-dialect",
            "cannot tell what this is: a job needs `protocolVersion: 2` with a `taskRoles` map "
            "(OpenPAI v2), `jobName` with a `taskRoles` list (v1 JSON), or a `tasks` list (draft); "
            "a component needs `type: dockerimage|data|script|storage|output`",
        )
        result.issues = issues.items
        return result
    result.kind, result.dialect = detected
    _read(result, result.dialect, doc, source, issues, parameters)
    result.issues = issues.items
    if issues.has_errors():
        result.spec = result.component = None
    return result


def _read(
    result: ParseResult,
    dialect: Dialect,
    doc: dict[str, Any],
    source: str,
    issues: Issues,
    parameters: dict[str, Any] | None,
) -> None:
    """Read a document whose kind and dialect `result` holds: its credentials lifted into
    secrets first, then the component or the job (given the parameters and runtime plugins)."""
    if result.kind is Kind.JOB and isinstance(doc.get("extras"), dict):
        check_tree(doc["extras"], "extras", issues)
    component = result.kind is Kind.COMPONENT
    declared = doc.get("secrets") if dialect is Dialect.V2 and not component else None
    taken = {str(k) for k in declared} if isinstance(declared, dict) else set()
    lifted = lift_credentials(doc, source, issues, component=component, taken=taken)
    doc, source = lifted.doc, lifted.text
    if component:
        result.component = read_prerequisite(doc, "", Fields(issues), dialect)
        result.source = source
    else:
        result.spec = _read_job(doc, issues, source, dialect, parameters)
    if result.spec is not None:
        result.spec = _finish_job(result.spec, doc, lifted, issues, parameters)
    if result.spec is None and result.component is None:
        issues.ensure_error(0, "", "this document")
    if result.spec is not None:
        result.source = result.spec.source


def _read_job(
    doc: dict[str, Any],
    issues: Issues,
    source: str,
    dialect: Dialect,
    parameters: dict[str, Any] | None,
) -> JobSpec | None:
    if dialect is Dialect.V2:
        return read_v2(doc, issues, source)
    if dialect is Dialect.V1:
        return read_v1(doc, issues, source)
    return read_draft(doc, issues, source, dict(parameters or {}))


def _finish_job(
    spec: JobSpec,
    doc: dict[str, Any],
    lifted: Lifted,
    issues: Issues,
    parameters: dict[str, Any] | None,
) -> JobSpec:
    """The job with the secrets lifted out of its text, the parameters given over its own,
    and its runtime plugins applied."""
    if lifted.credentials:
        kept = spec.source
        if spec.dialect is Dialect.V2 and "secrets" not in doc:
            kept = with_masked_secrets(kept)
        spec = spec.model_copy(
            update={"secrets": {**lifted.secrets, **spec.secrets}, "source": kept}
        )
    if parameters:
        spec = spec.model_copy(update={"parameters": {**spec.parameters, **parameters}})
    return apply_runtime_plugins(spec, issues)


def parse_job(
    text: str | bytes,
    parameters: dict[str, Any] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ParseResult:
    """Parse a job; a standalone component gets an error saying what it is instead."""
    result = parse_document(text, parameters, max_bytes=max_bytes)
    if result.kind is Kind.COMPONENT:
        what = result.component.type if result.component else "prerequisite"
        result.issues.insert(
            0,
            Issue(
                "type",
                "not-a-job",
                f"this is a {what} component, not a job: publish it to the marketplace, or list it "
                "under a job's `prerequisites` and reference it from a task role",
            ),
        )
        result.component = None
    return result


def resolve_job(
    text: str | bytes,
    parameters: dict[str, Any] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    references: ReferenceStep | None = None,
) -> ParseResult:
    """Parse a job, replace its references with `references`, and render its parameters;
    references left unresolved become warnings, and what the rendering makes unrunnable
    (`launch_issues`) errors."""
    result = parse_job(text, parameters, max_bytes=max_bytes)
    if result.spec is not None and references is not None:
        result.spec, found = references(result.spec)
        result.issues.extend(found)
    if result.spec is not None:
        result.spec, warnings = render_job(result.spec)
        result.issues.extend(warnings)
        errors = launch_issues(result.spec)
        result.issues.extend(errors)
        if errors:
            result.spec = None
    return result


def detect(doc: dict[str, Any]) -> tuple[Kind, Dialect] | None:
    """Which dialect a document is written in, and whether it is a job or a component."""
    type_ = doc.get("type")
    is_component_type = isinstance(type_, str) and type_ in COMPONENT_TYPES
    if "tasks" in doc or isinstance(doc.get("job"), dict):
        return Kind.JOB, Dialect.DRAFT
    if "protocol_version" in doc:
        return (Kind.COMPONENT if is_component_type else Kind.JOB), Dialect.DRAFT
    roles = doc.get("taskRoles")
    if isinstance(roles, list) or ("jobName" in doc and "protocolVersion" not in doc):
        return Kind.JOB, Dialect.V1
    if "taskRoles" in doc:
        return Kind.JOB, Dialect.V2
    if is_component_type or ("plugin" in doc and "name" in doc):
        return Kind.COMPONENT, Dialect.V2
    if "protocolVersion" in doc:
        return Kind.JOB, Dialect.V2
    return None
