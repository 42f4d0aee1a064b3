"""Converting a job of any dialect to protocol v2 text that is meant to be edited further.

Unlike `paigraph resolve`, which writes the rendered job, this keeps parameters as v2 templates
so they keep their effect, and writes as values (with a warning) what v2 cannot say
(docs/dialects.md, Converting a job to protocol v2 for editing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from server.protocol.engine import parse_job
from server.protocol.issues import Issue, Severity
from server.protocol.loader import LoadError, load_document
from server.protocol.model import Dialect, JobSpec, TaskRole
from server.protocol.writer import to_v2_yaml

_DRAFT_PARAM = re.compile(r"\$\$([A-Za-z_][\w-]*)\$\$")
_DRAFT_JOB = re.compile(r"\$job\.(parameters\.[A-Za-z_][\w-]*|tasks\.[\w.~-]+?\.[A-Za-z_]\w*)\b")
_PARAMETER_NAME = re.compile(r"[A-Za-z_][\w-]*")
_INSTANCES_REF = re.compile(r"\$job\.parameters\.(\w+)|\$\$(\w+)\$\$")
_PROPERTY_TAGS = {
    "data": "<% $data.name %>",
    "script": "<% $script.name %>",
    "storage": "<% $output.name %>",
    "output": "<% $output.name %>",
}


@dataclass
class Conversion:
    """A job as editable protocol v2 text, or why the protocol cannot read it."""

    dialect: Dialect | None
    config: str | None  # None when the protocol cannot read the job
    issues: list[Issue] = field(default_factory=list)  # the original's, at its own paths
    notes: list[Issue] = field(default_factory=list)  # warnings at the v2 text's paths

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity is Severity.ERROR]


def convert_to_v2(text: str) -> Conversion:
    """`text` as protocol v2 YAML for editing (a v2 job is given back as written). A JSON
    file whose only fault is `//` or `/* */` comments (OpenPAI's v1 docs write their examples
    so) is converted without them, and a note says they were left out."""
    result = parse_job(text)
    dropped: list[Issue] = []
    if result.spec is None and [i.code for i in result.errors] == ["json-comment"]:
        result = parse_job(without_json_comments(text))
        dropped.append(
            Issue(
                "",
                "converted",
                "the file's comments are not JSON: the converted job leaves them out",
                Severity.WARNING,
            )
        )
    if result.spec is None:
        return Conversion(result.dialect, None, list(result.issues))
    spec = result.spec
    if spec.dialect is Dialect.V2:
        return Conversion(spec.dialect, text, list(result.issues))
    notes = dropped
    if spec.dialect is Dialect.DRAFT:
        spec = _with_templates(spec, notes)
        notes += _rendered_instances(text, spec)
    if spec.dialect is Dialect.V1:
        spec = _exported_parameters(spec)
    return Conversion(spec.dialect, to_v2_yaml(spec), list(result.issues), notes)


def _exported_parameters(spec: JobSpec) -> JobSpec:
    """`spec` exporting each v1 jobEnv that is also a parameter of the same value as a
    reference to that parameter (rendered at submit time, inside the export's quotes)."""
    env = {
        name: (
            f"<% $parameters.{name} %>"
            if _PARAMETER_NAME.fullmatch(name) and spec.parameters.get(name) == value
            else value
        )
        for name, value in spec.env.items()
    }
    return spec.model_copy(update={"env": env})


def _note(role: TaskRole, where: str, message: str) -> Issue:
    return Issue.at(
        ["taskRoles", role.name, *where.split(".")], "converted", message, Severity.WARNING
    )


def _with_templates(spec: JobSpec, notes: list[Issue]) -> JobSpec:
    """`spec` with each role's commands written with v2 templates (see the module's doc)."""
    properties = {role.name: _properties(role) for role in spec.task_roles}
    roles = []
    for role in spec.task_roles:
        commands = []
        for index, command in enumerate(role.commands):
            rendered: list[str] = []
            converted = _convert_command(command, spec, role, properties, rendered)
            if rendered:
                values = "its value" if len(rendered) == 1 else "their values"
                message = (
                    f"{', '.join(rendered)} written as {values}: protocol v2 has no template for it"
                )
                notes.append(_note(role, f"commands.{index}", message))
            commands.append(converted)
        roles.append(role.model_copy(update={"commands": commands}))
    return spec.model_copy(update={"task_roles": roles})


def _properties(role: TaskRole) -> dict[str, str | None]:
    return {
        "data": role.data,
        "script": role.script,
        "storage": role.output,
        "output": role.output,
        "dockerimage": role.docker_image,
        "role": role.name,
    }


def _convert_command(
    command: str,
    spec: JobSpec,
    role: TaskRole,
    properties: dict[str, dict[str, str | None]],
    rendered: list[str],
) -> str:
    own = properties[role.name]

    def parameter(name: str, shown: str) -> str:
        if name in role.parameters:  # a task's own parameter: v2 roles have none
            value = role.parameters[name]
            ref = _DRAFT_PARAM.fullmatch(value) if isinstance(value, str) else None
            if ref and ref.group(1) in spec.parameters:
                return f"<% $parameters.{ref.group(1)} %>"
            rendered.append(shown)
            return _text(value)
        if name in spec.parameters:
            return f"<% $parameters.{name} %>"
        return shown  # undefined: left as written, as rendering leaves it

    def draft_param(match: re.Match[str]) -> str:
        name = match.group(1)
        if own.get(name) is not None:
            if name in _PROPERTY_TAGS:
                return _PROPERTY_TAGS[name]
            rendered.append(match.group(0))
            return str(own[name])
        return parameter(name, match.group(0))

    def job_ref(match: re.Match[str]) -> str:
        reference = match.group(1)
        if reference.startswith("parameters."):
            return parameter(reference.removeprefix("parameters."), match.group(0))
        role_name, _, prop = reference.removeprefix("tasks.").rpartition(".")
        value = properties.get(role_name, {}).get(prop)
        if value is None:
            return match.group(0)
        rendered.append(match.group(0))
        return value

    if "$$" in command:
        command = _DRAFT_PARAM.sub(draft_param, command)
    if "$job." in command:
        command = _DRAFT_JOB.sub(job_ref, command)
    return command


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _rendered_instances(text: str, spec: JobSpec) -> list[Issue]:
    """A note for each role whose instance count a parameter gave: v2 needs the number."""
    try:
        doc = load_document(text).data
    except LoadError:
        return []
    job = doc.get("job") if isinstance(doc, dict) and "tasks" not in doc else doc
    tasks = job.get("tasks") if isinstance(job, dict) else None
    if not isinstance(tasks, list) or len(tasks) != len(spec.task_roles):
        return []
    notes = []
    for task, role in zip(tasks, spec.task_roles, strict=True):
        resource = task.get("resource") if isinstance(task, dict) else None
        raw = resource.get("instances") if isinstance(resource, dict) else None
        match = _INSTANCES_REF.fullmatch(raw.strip()) if isinstance(raw, str) else None
        if match:
            name = match.group(1) or match.group(2)
            notes.append(
                _note(
                    role,
                    "instances",
                    f"was parameter {name!r}, written as its value {role.instances}: protocol v2 "
                    "takes a number here, not a template; changing the parameter does not "
                    "change it",
                )
            )
    return notes


def without_json_comments(text: str) -> str:
    """`text` with its `//` and `/* */` comments outside JSON strings removed (line breaks
    kept, so that what remains keeps its line numbers)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(text[i : i + 2] if ch == "\\" else ch)
            i += 2 if ch == "\\" else 1
            in_string = ch != '"'
            continue
        if ch == '"':
            in_string = True
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            comment = text[i : n if end < 0 else end + 2]
            out.append("\n" * comment.count("\n"))
            i = n if end < 0 else end + 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
