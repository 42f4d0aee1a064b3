"""Rendering parameter references into commands: draft `$$name$$`, v2 `<% $parameters.x %>`,
and `{{ name }}` in every dialect.

Secrets are never rendered here (they reach a command only at launch), and a reference that
cannot be resolved is left in place with a warning, as OpenPAI does and real configs rely on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.protocol.issues import Issue, Severity
from server.protocol.model import Dialect, JobSpec, Prerequisite, PrerequisiteType, TaskRole

_V2_TAG = re.compile(r"<%\s*(\$[A-Za-z_]\w*(?:\.[\w-]+|\[\d+\])*)\s*%>")
_MUSTACHE = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")
_DRAFT_PARAM = re.compile(r"\$\$([A-Za-z_][\w-]*)\$\$")
_DRAFT_JOB = re.compile(r"\$job\.(parameters\.[A-Za-z_][\w-]*|tasks\.[\w.~-]+?\.[A-Za-z_]\w*)\b")
_TOKEN = re.compile(r"[^.\[\]]+")
_TASK_PROPERTIES = ("data", "script", "storage", "output", "dockerimage", "role")

_MISSING = object()


def render_job(spec: JobSpec) -> tuple[JobSpec, list[Issue]]:
    """Render every role's commands and the deployments' pre/post commands."""
    if spec.dialect is Dialect.V1:
        return spec, []  # v1 commands use shell variables; OpenPAI substituted nothing
    warnings: list[Issue] = []
    shared = _JobScope.of(spec)
    roles = []
    for index, role in enumerate(spec.task_roles):
        lookup = _scope(spec, role, shared)
        base = _role_path(spec, role, index)
        commands = [
            _render(text, lookup, spec.dialect, f"{base}[{i}]", warnings)
            for i, text in enumerate(role.commands)
        ]
        roles.append(role.model_copy(update={"commands": commands}))
    deployments = []
    for d_index, deployment in enumerate(spec.deployments):
        rendered: dict[str, dict[str, list[str]]] = {"pre_commands": {}, "post_commands": {}}
        for attr, key in (("pre_commands", "preCommands"), ("post_commands", "postCommands")):
            for role_name, commands in getattr(deployment, attr).items():
                lookup = _scope(spec, shared.roles.get(role_name), shared)
                base = f"deployments[{d_index}].taskRoles.{role_name}.{key}"
                rendered[attr][role_name] = [
                    _render(text, lookup, spec.dialect, f"{base}[{i}]", warnings)
                    for i, text in enumerate(commands)
                ]
        deployments.append(deployment.model_copy(update=rendered))
    return spec.model_copy(update={"task_roles": roles, "deployments": deployments}), warnings


def _role_path(spec: JobSpec, role: TaskRole, index: int) -> str:
    if spec.dialect is Dialect.DRAFT:
        return f"tasks[{index}].command"
    return f"taskRoles.{role.name}.commands"


@dataclass(frozen=True)
class _JobScope:
    """What every role's scope shares, built once per job: building it per role made
    rendering quadratic in the number of roles."""

    tasks: dict[str, dict[str, str | None]]
    roles: dict[str, TaskRole]
    prerequisites: dict[str, list[Prerequisite]]  # by name, in the job's order

    @classmethod
    def of(cls, spec: JobSpec) -> _JobScope:
        tasks = {r.name: _task_properties(r) for r in spec.task_roles}
        roles: dict[str, TaskRole] = {}
        for r in spec.task_roles:
            roles.setdefault(r.name, r)
        by_name: dict[str, list[Prerequisite]] = {}
        for p in spec.prerequisites:
            by_name.setdefault(p.name, []).append(p)
        return cls(tasks=tasks, roles=roles, prerequisites=by_name)


def _task_properties(role: TaskRole) -> dict[str, str | None]:
    """A role's properties as `$$data$$` / `$job.tasks.<role>.<property>` name them."""
    return {
        "data": role.data,
        "script": role.script,
        "output": role.output,
        "storage": role.output,
        "dockerimage": role.docker_image,
        "role": role.name,
    }


def _scope(spec: JobSpec, role: TaskRole | None, shared: _JobScope) -> Callable[[str], Any]:
    """A resolver for dotted references in the scope of one role."""

    def prerequisite(name: str | None, *types: PrerequisiteType) -> dict[str, Any] | None:
        if not name:
            return None
        named = shared.prerequisites.get(name, [])
        found = next((p for p in named if p.type in types), None)
        return _as_template_object(found) if found else None

    parameters = dict(spec.parameters)
    if role is not None:
        for key, value in role.parameters.items():
            # a role parameter may itself be a reference to a job parameter ($$name$$)
            ref = _DRAFT_PARAM.fullmatch(value) if isinstance(value, str) else None
            parameters[key] = spec.parameters.get(ref.group(1), value) if ref else value
    scope: dict[str, Any] = {"$parameters": parameters, "parameters": parameters}
    if role is not None:
        scope["$data"] = prerequisite(role.data, PrerequisiteType.DATA)
        scope["$script"] = prerequisite(role.script, PrerequisiteType.SCRIPT)
        scope["$output"] = prerequisite(
            role.output, PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE
        )
        properties = _task_properties(role)
        scope["task"] = {k: v for k, v in properties.items() if v is not None}
    scope["tasks"] = shared.tasks

    def lookup(reference: str) -> Any:
        tokens = _TOKEN.findall(reference)
        value: Any = scope
        for token in tokens:
            if isinstance(value, dict) and token in value:
                value = value[token]
            elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                value = value[int(token)]
            else:
                return _MISSING
        return _MISSING if value is None else value

    return lookup


def _as_template_object(p: Prerequisite) -> dict[str, Any]:
    """A prerequisite as templates see it: uri is a list for data, a string otherwise."""
    obj: dict[str, Any] = {
        "name": p.name,
        "type": p.type.value,
        "version": p.version,
        "contributor": p.contributor,
        "description": p.description,
        **p.plugin_parameters,
    }
    obj["uri"] = list(p.uri) if p.type is PrerequisiteType.DATA else (p.uri[0] if p.uri else None)
    return {k: v for k, v in obj.items() if v is not None}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _render(
    text: str,
    lookup: Callable[[str], Any],
    dialect: Dialect,
    path: str,
    warnings: list[Issue],
) -> str:
    def unresolved(reference: str) -> None:
        warnings.append(
            Issue(
                path,
                "unresolved-reference",
                f"{reference} is not defined here and is left in the command as written",
                Severity.WARNING,
            )
        )

    def substitute(reference: str, shown: str) -> str:
        value = lookup(reference)
        if value is _MISSING:
            unresolved(shown)
            return shown
        return _text(value)

    def v2_tag(match: re.Match[str]) -> str:
        if match.group(1).startswith("$secrets"):
            return match.group(0)
        return substitute(match.group(1), match.group(0))

    def draft_param(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in _TASK_PROPERTIES and lookup(f"task.{name}") is not _MISSING:
            return _text(lookup(f"task.{name}"))
        return substitute(f"parameters.{name}", match.group(0))

    if "<%" in text:
        text = _V2_TAG.sub(v2_tag, text)
    if dialect is Dialect.DRAFT:
        if "$$" in text:
            text = _DRAFT_PARAM.sub(draft_param, text)
        if "$job." in text:
            text = _DRAFT_JOB.sub(lambda m: substitute(m.group(1), m.group(0)), text)
    if "{{" in text:
        text = _MUSTACHE.sub(lambda m: substitute(f"parameters.{m.group(1)}", m.group(0)), text)
    return text
