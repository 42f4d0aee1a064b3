"""Checks that keep a job the backend can never start from being accepted.

A NUL byte or an image name outside Docker's grammar used to be stored and then fail inside the
backend, where nothing told the user why; `launch_issues` also runs on the rendered JobSpec,
since parameters and templates may bring either in later (docs/dialects.md, What paigraph refuses).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from server.protocol.image_refs import IMAGE_RULE, image_reference_problem
from server.protocol.issues import Issue, join
from server.protocol.model import Dialect, JobSpec, PrerequisiteType, TaskRole

NUL = "\0"
NUL_RULE = (
    "a NUL byte (\\0, \\u0000) cannot be passed to a shell command, an environment variable "
    "or the job store; remove it"
)
_TEMPLATE_MARKS = ("{{", "<%", "$$")


def nul_issues(value: Any, path: str = "") -> list[Issue]:
    """A `nul-byte` error for every string (mapping keys too) in `value` that holds a NUL."""
    if not _may_hold_nul(value):
        return []
    return [
        Issue(where, "nul-byte", f"{what} contains a NUL byte: {NUL_RULE}")
        for where, what in _nul_paths(value, path)
    ]


def image_issues(uri: str, path: str, *, templates: bool = True) -> list[Issue]:
    """An `image-reference` error when `uri` is not a docker image reference. With
    `templates`, one still to be filled in (`{{ x }}`, `<% $x %>`, `$$x$$`) is judged later."""
    if templates and any(mark in uri for mark in _TEMPLATE_MARKS):
        return []
    problem = image_reference_problem(uri)
    if problem is None:
        return []
    return [Issue(path, "image-reference", f"{problem}; {IMAGE_RULE}")]


def launch_issues(spec: JobSpec) -> list[Issue]:
    """The errors of a resolved, rendered job that would stop its containers from starting."""
    issues: list[Issue] = []
    for position, role in enumerate(spec.task_roles):
        base = command_path(spec, role, position)
        for i, command in enumerate(role.commands):
            if NUL in command:
                where = base if spec.dialect is Dialect.V1 else f"{base}[{i}]"
                issues.append(
                    Issue(
                        where,
                        "nul-byte",
                        f"the rendered command contains a NUL byte (from a parameter or a "
                        f"marketplace item rendered into it): {NUL_RULE}",
                    )
                )
        issues += _role_image_issues(spec, role, position)
    for d, deployment in enumerate(spec.deployments):
        for attr, key in (("pre_commands", "preCommands"), ("post_commands", "postCommands")):
            for role_name, commands in getattr(deployment, attr).items():
                where = f"deployments[{d}].taskRoles.{role_name}.{key}"
                issues += nul_issues(commands, where)
    rest = spec.model_dump(exclude={"task_roles": {"__all__": {"commands"}}, "deployments": True})
    issues += nul_issues(rest)
    issues += nul_issues(spec.secrets, "secrets")
    return issues


def command_path(spec: JobSpec, role: TaskRole, position: int) -> str:
    """Where a role's commands are in the user's document, by dialect."""
    if spec.dialect is Dialect.DRAFT:
        return f"tasks[{position}].command"
    if spec.dialect is Dialect.V1:
        return f"taskRoles[{position}].command"
    return f"taskRoles.{role.name}.commands"


def _role_image_issues(spec: JobSpec, role: TaskRole, position: int) -> list[Issue]:
    found = spec.prerequisite(role.docker_image, PrerequisiteType.DOCKERIMAGE)
    if found is None or not found.uri:
        return []
    if spec.dialect is Dialect.V1:
        where = "image"
    elif spec.dialect is Dialect.DRAFT:
        where = f"tasks[{position}].dockerimage"
    else:
        where = f"taskRoles.{role.name}.dockerImage"
    return image_issues(found.uri[0], where, templates=False)


def _may_hold_nul(value: Any) -> bool:
    """False when no string in `value` can hold a NUL: its JSON text (made in C, a tenth of
    the time of walking it here) has no escaped NUL. True when unsure (a value JSON cannot
    hold as it is, or a backslash followed by u0000 written as such): then `_nul_paths` looks."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        return True
    return "\\u0000" in text


def _nul_paths(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, what) for each string in `value` holding a NUL byte."""
    if isinstance(value, str):
        if NUL in value:
            yield path or "(document)", "the value"
    elif isinstance(value, dict):
        for key, item in value.items():
            where = join(path, str(key).replace(NUL, "\\0"))
            if isinstance(key, str) and NUL in key:
                yield where, "the key"
            yield from _nul_paths(item, where)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _nul_paths(item, join(path, i))
