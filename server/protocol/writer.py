"""Write a canonical JobSpec back as OpenPAI protocol v2 YAML.

This is how `paigraph resolve` converts draft and v1 configs to v2. What v2 cannot say
(v1/draft `beginAt`, retry counts of -1 / -2) goes under `extras.paigraph`, which paigraph's
own v2 reader understands, so the output reads back to the same job. Secrets are never written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from server.protocol.dialect_v2 import DEFAULT_SHM_MB, EXTRAS_KEY
from server.protocol.model import Dialect, JobSpec, Prerequisite, PrerequisiteType, TaskRole
from server.protocol.start_order import ROLES_KEY, start_order_extras
from server.protocol.v2_names import rename_references, v2_name
from server.protocol.yaml_out import dump_yaml

V1_CODE = "code"  # where v1 put codeDir: $PAI_WORK_DIR/code


def to_v2_dict(spec: JobSpec) -> dict[str, Any]:
    renamed = _v2_prerequisite_names(spec)
    spec = _with_v2_prerequisite_names(spec, renamed)
    spec = v1_code_dir_as_script(spec)
    doc: dict[str, Any] = {"protocolVersion": 2, "name": v2_name(spec.name), "type": "job"}
    for key in ("version", "contributor", "description"):
        if getattr(spec, key) is not None:
            doc[key] = getattr(spec, key)
    if spec.prerequisites:
        doc["prerequisites"] = [prerequisite_dict(p) for p in spec.prerequisites]
    if spec.parameters:
        doc["parameters"] = dict(spec.parameters)
    if spec.secrets:
        doc["secrets"] = "******"
    if spec.retry_count > 0:
        doc["jobRetryCount"] = spec.retry_count
    doc["taskRoles"] = {role.name: _role(role) for role in spec.task_roles}
    deployments = _deployments(spec)
    if deployments:
        doc["deployments"] = deployments
    defaults: dict[str, Any] = {"virtualCluster": spec.virtual_cluster}
    names = [d["name"] for d in deployments]
    default_deployment = spec.default_deployment if spec.default_deployment in names else None
    default_deployment = default_deployment or (names[0] if names else None)
    if default_deployment:
        defaults["deployment"] = default_deployment
    doc["defaults"] = defaults
    extras = dict(spec.extras)
    ours = _paigraph_extras(spec)
    if v2_name(spec.name) != spec.name:
        ours["displayName"] = spec.name
    if renamed:
        ours["prerequisiteNames"] = {new: old for old, new in renamed.items()}
    if ours:
        extras[EXTRAS_KEY] = ours
    if extras:
        doc["extras"] = extras
    return doc


def to_v2_yaml(spec: JobSpec) -> str:
    """The job as v2 YAML in the protocol's key order, multi-line commands as blocks."""
    return dump_yaml(to_v2_dict(spec))


def prerequisite_dict(p: Prerequisite) -> dict[str, Any]:
    """A prerequisite (or a standalone component) as the v2 protocol writes it."""
    out: dict[str, Any] = {"name": p.name}
    if p.type is not PrerequisiteType.PLUGIN:
        out["type"] = p.type.value
    for key, field in _PREREQUISITE_SCALARS:
        value = getattr(p, field)
        if value is not None:
            out[key] = value
    for key, write in _PREREQUISITE_PARTS:
        value = write(p)
        if value is not None:
            out[key] = value
    out.update(p.plugin_parameters)
    return out


def _uri(p: Prerequisite) -> Any:
    if not p.uri:
        return None
    listed = p.type in (PrerequisiteType.DATA, PrerequisiteType.STORAGE) or (
        p.type is PrerequisiteType.SCRIPT and p.uri_list
    )
    return list(p.uri) if listed else p.uri[0]


def _auth(p: Prerequisite) -> Any:
    return None if p.auth is None else p.auth.model_dump(exclude_none=True)


def _require(p: Prerequisite) -> Any:
    if not p.require:
        return None
    return [
        {"name": r.name, "template_variables": r.template_variables}
        if r.template_variables
        else r.name
        for r in p.require
    ]


def _callbacks(p: Prerequisite) -> Any:
    if not p.callbacks:
        return None
    return [{"event": c.event.value, "commands": list(c.commands)} for c in p.callbacks]


def _storages(p: Prerequisite) -> Any:
    if not p.require_storages:
        return None
    return [
        {"name": s.name, **({"mountPath": s.mount_path} if s.mount_path else {})}
        for s in p.require_storages
    ]


def _template_variables(p: Prerequisite) -> Any:
    if not p.template_variables:
        return None
    return [
        {"name": n, **({"default": p.variable_defaults[n]} if n in p.variable_defaults else {})}
        for n in p.template_variables
    ]


# A prerequisite's fields in the order v2 writes them: (key, attribute) of the scalars written
# when set, then (key, writer) of the parts, each writer giving None when there is nothing.
_PREREQUISITE_SCALARS = (
    ("version", "version"),
    ("contributor", "contributor"),
    ("description", "description"),
    ("plugin", "plugin"),
    ("failurePolicy", "failure_policy"),
)
_PREREQUISITE_PARTS: tuple[tuple[str, Callable[[Prerequisite], Any]], ...] = (
    ("uri", _uri),
    ("auth", _auth),
    ("require", _require),
    ("callbacks", _callbacks),
    ("requireStorages", _storages),
    ("template_variables", _template_variables),
)


def _v2_prerequisite_names(spec: JobSpec) -> dict[str, str]:
    """Prerequisite names v2 does not allow (draft `a.b`, `~`) -> their v2 spelling."""
    return {p.name: v2_name(p.name) for p in spec.prerequisites if v2_name(p.name) != p.name}


def v1_code_dir_as_script(spec: JobSpec) -> JobSpec:
    """A v1 job's codeDir as a script called `code`, as the writer renames it: v1 copied
    codeDir to `code/` of the work directory, where its commands find it (`python
    code/train.py`), and a v2 script is placed at the work directory's entry of its name."""
    if spec.dialect is not Dialect.V1 or spec.prerequisite(V1_CODE, PrerequisiteType.SCRIPT):
        return spec
    code_dir = spec.prerequisite("default", PrerequisiteType.SCRIPT)
    if code_dir is None:
        return spec
    return spec.model_copy(
        update={
            "prerequisites": [
                p.model_copy(update={"name": V1_CODE}) if p is code_dir else p
                for p in spec.prerequisites
            ],
            "task_roles": [
                role.model_copy(update={"script": V1_CODE}) if role.script == "default" else role
                for role in spec.task_roles
            ],
        }
    )


def _with_v2_prerequisite_names(spec: JobSpec, renamed: dict[str, str]) -> JobSpec:
    """`spec` with its prerequisites renamed, and the roles' references to them too."""
    if not renamed:
        return spec
    return spec.model_copy(
        update={
            "prerequisites": [
                p.model_copy(update={"name": renamed.get(p.name, p.name)})
                for p in spec.prerequisites
            ],
            "task_roles": [rename_references(role, renamed) for role in spec.task_roles],
        }
    )


def _role(role: TaskRole) -> dict[str, Any]:
    res = role.resources
    out: dict[str, Any] = {"instances": role.instances}
    out["completion"] = {
        "minFailedInstances": role.completion.min_failed,
        "minSucceededInstances": role.completion.min_succeeded,
    }
    if role.task_retry_count:
        out["taskRetryCount"] = role.task_retry_count
    if role.prerequisites:
        out["prerequisites"] = list(role.prerequisites)
    out["dockerImage"] = role.docker_image
    for key in ("data", "output", "script"):
        if getattr(role, key) is not None:
            out[key] = getattr(role, key)
    options: dict[str, Any] = dict(role.extra_container_options)
    if res.shm_mb != min(DEFAULT_SHM_MB, res.memory_mb):
        options["shmMB"] = res.shm_mb
    if res.infiniband:
        options["infiniband"] = True
    if options:
        out["extraContainerOptions"] = options
    per_instance: dict[str, Any] = {"cpu": res.cpu, "memoryMB": res.memory_mb, "gpu": res.gpu}
    if res.ports:
        per_instance["ports"] = {p.label: p.count for p in res.ports}
    out["resourcePerInstance"] = per_instance
    out["commands"] = list(role.commands)
    return out


def _deployments(spec: JobSpec) -> list[dict[str, Any]]:
    """The spec's deployments, plus exported environment variables (v1 jobEnvs, draft env)."""
    out: list[dict[str, Any]] = []
    for d in spec.deployments:
        roles: dict[str, Any] = {}
        for name in {**d.pre_commands, **d.post_commands}:
            entry: dict[str, Any] = {}
            if d.pre_commands.get(name):
                entry["preCommands"] = list(d.pre_commands[name])
            if d.post_commands.get(name):
                entry["postCommands"] = list(d.post_commands[name])
            roles[name] = entry
        if roles:  # a deployment that adds no commands says nothing v2 can write
            out.append({"name": d.name, "taskRoles": roles})
    exports = {
        role.name: [
            f"export {k}={exported_value(k, v)}" for k, v in {**spec.env, **role.env}.items()
        ]
        for role in spec.task_roles
    }
    if not any(exports.values()):
        return out
    target = next((d for d in out if d["name"] == spec.default_deployment), None)
    if target is None:
        target = {"name": "environment", "taskRoles": {}}
        out.insert(0, target)
    for role_name, lines in exports.items():
        if lines:
            entry = target["taskRoles"].setdefault(role_name, {})
            entry["preCommands"] = [*lines, *entry.get("preCommands", [])]
    return out


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


# v1's dataDir, outputDir and codeDir, exported as OpenPAI's v1 runtime exported them: with the
# job-wide variables it replaced there expanded (every instance has them in its environment).
_V1_LOCATIONS = frozenset({"PAI_DATA_DIR", "PAI_OUTPUT_DIR", "PAI_CODE_DIR"})
_JOB_WIDE = (
    "PAI_DEFAULT_FS_URI|PAI_JOB_NAME|PAI_USER_NAME|PAI_USERNAME|PAI_JOB_VC_NAME|PAI_VIRTUAL_CLUSTER"
)
_EXPANDED = re.compile(rf"\$(?:\{{({_JOB_WIDE})\}}|({_JOB_WIDE})(?!\w))")


def exported_value(name: str, value: str) -> str:
    """`value` quoted for `export name=...`: as written, except that in v1's locations the
    variables OpenPAI expanded there are expanded by the shell (`'hdfs'"$PAI_JOB_NAME"`)."""
    if name not in _V1_LOCATIONS:
        return _shell_quote(value)
    parts: list[str] = []
    at = 0
    for match in _EXPANDED.finditer(value):
        if match.start() > at:
            parts.append(_shell_quote(value[at : match.start()]))
        parts.append(f'"${{{match.group(1) or match.group(2)}}}"')
        at = match.end()
    if at < len(value) or not parts:
        parts.append(_shell_quote(value[at:]))
    return "".join(parts)


def _paigraph_extras(spec: JobSpec) -> dict[str, Any]:
    ours: dict[str, Any] = {}
    if spec.retry_count < 0:
        ours["jobRetryCount"] = spec.retry_count
    begin_at = {
        role.name: {p.label: p.begin_at for p in role.resources.ports if p.begin_at}
        for role in spec.task_roles
    }
    begin_at = {k: v for k, v in begin_at.items() if v}
    if begin_at:
        ours["portBeginAt"] = begin_at
    role_parameters = {role.name: role.parameters for role in spec.task_roles if role.parameters}
    if role_parameters:
        ours["roleParameters"] = role_parameters
    start_order = start_order_extras(spec.task_roles)
    if start_order:
        ours[ROLES_KEY] = start_order
    return ours
