"""OpenPAI job protocol v2: `protocolVersion: 2`, a `taskRoles` map, `<% $parameters.x %>`.

Follows the rest-server's schema and semantic checks (reference/protocol_v2.md sections 1 and
2) with its exact messages where it has them, then the shared stricter rules.
"""

from __future__ import annotations

import re
from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.ignored import (
    ANY_OTHER,
    EXTRAS_FIELDS,
    IGNORED,
    extras_warnings,
    unread_warnings,
)
from server.protocol.issues import Issues, join
from server.protocol.layout import misplaced_fields, misplaced_message, owner_role
from server.protocol.model import (
    Completion,
    Deployment,
    Dialect,
    JobSpec,
    PortRequest,
    Prerequisite,
    Resources,
    TaskRole,
)
from server.protocol.prerequisites import FIELDS as PREREQUISITE_FIELDS
from server.protocol.prerequisites import read_prerequisite_list
from server.protocol.privileges import check_options
from server.protocol.rules import (
    MAX_RETRIES,
    RolePaths,
    add_default_ports,
    check_job_instances,
    check_role,
    check_role_references,
    too_many_roles,
)
from server.protocol.secrets import MASK, mask_secrets
from server.protocol.start_order import read_start_order
from server.protocol.v2_names import V2_NAME, V2_NAME_RULE, original_name, rename_references

ROLE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
ROLE_NAME_RULE = "must match ^[a-zA-Z_][a-zA-Z0-9_]*$ (a letter or _, then letters, digits, _)"
DEFAULT_SHM_MB = 512
# paigraph keeps what protocol v2 cannot say (v1 beginAt, negative retry counts) under this key.
EXTRAS_KEY = "paigraph"

_TOP_KEYS = (
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "prerequisites",
    "parameters",
    "secrets",
    "jobRetryCount",
    "taskRoles",
    "deployments",
    "defaults",
    "extras",
)
_TOP_HINTS = {
    "tasks": "that is the draft dialect's key; protocol v2 uses a `taskRoles` map",
    "protocol_version": "protocol v2 spells it `protocolVersion`",
    "virtualCluster": "in protocol v2 it goes under `defaults.virtualCluster`",
    "retryCount": "protocol v2 calls it `jobRetryCount`",
}
_ROLE_KEYS = (
    "protocolVersion",
    "instances",
    "completion",
    "taskRetryCount",
    "prerequisites",
    "dockerImage",
    "data",
    "output",
    "script",
    "extraContainerOptions",
    "resourcePerInstance",
    "commands",
)
_RESOURCE_KEYS = ("cpu", "memoryMB", "gpu", "ports")
_COMPLETION_KEYS = ("minFailedInstances", "minSucceededInstances")
_OPTION_KEYS = ("shmMB", "infiniband")
_DEFAULTS_KEYS = ("virtualCluster", "deployment")
_DEPLOYMENT_KEYS = ("name", "taskRoles")
_DEPLOYMENT_ROLE_KEYS = ("preCommands", "postCommands")


def read_v2(doc: dict[str, Any], issues: Issues, source: str) -> JobSpec | None:
    f = Fields(issues)
    f.required(doc, "", ("protocolVersion", "type", "taskRoles"))
    f.known_keys(doc, "", _TOP_KEYS, hints=_TOP_HINTS)
    if "protocolVersion" in doc and doc["protocolVersion"] not in (2, "2"):
        issues.error(
            "protocolVersion", "enum", f"must be 2, got {describe(doc['protocolVersion'])}"
        )
    name = f.string(
        doc, "name", "", required=True, pattern=V2_NAME, rule=V2_NAME_RULE, max_length=255
    )
    if "type" in doc and doc["type"] != "job":
        issues.error("type", "enum", f"must be 'job', got {describe(doc['type'])}")
    version = f.string(doc, "version", "", allow_number=True)
    contributor = f.string(doc, "contributor", "")
    description = f.string(doc, "description", "")
    parameters = _mapping(doc, "parameters", f)
    if doc.get("secrets") == MASK:
        issues.error(
            "secrets",
            "masked-secrets",
            "the secrets were masked when this config was stored or shown; "
            "put the real values back before submitting it",
        )
        doc = {k: v for k, v in doc.items() if k != "secrets"}
    secrets = _mapping(doc, "secrets", f)
    extras = _mapping(doc, "extras", f)
    extras_warnings(extras, issues)
    ours = _dict_at(extras, EXTRAS_KEY)
    retry = f.integer(doc, "jobRetryCount", "", default=0)
    if retry is not None and "jobRetryCount" in doc and not 0 <= retry <= MAX_RETRIES:
        issues.error("jobRetryCount", "range", f"must be between 0 and {MAX_RETRIES}, got {retry}")
    if isinstance(ours.get("jobRetryCount"), int) and ours["jobRetryCount"] in (-1, -2):
        retry = ours["jobRetryCount"]

    prerequisites = _read_prerequisites(doc, f)
    deployments = _read_deployments(doc, f)
    defaults = _mapping(doc, "defaults", f)
    unread_warnings(defaults, "defaults", _DEFAULTS_KEYS, issues)
    virtual_cluster = f.string(defaults, "virtualCluster", "defaults") or "default"
    default_deployment = f.string(defaults, "deployment", "defaults")
    if default_deployment is not None and default_deployment not in {d.name for d in deployments}:
        issues.error(
            "defaults.deployment",
            "unknown-deployment",
            f"Default deployment {default_deployment} does not exist.",
        )
    reference_names = _reference_prerequisite_names(extras, f)
    begin_at = _dict_at(ours, "portBeginAt")
    role_parameters = _dict_at(ours, "roleParameters")

    roles: list[TaskRole] = []
    raw_roles = doc.get("taskRoles")
    if "taskRoles" in doc:
        mapping = f.as_mapping(raw_roles, "taskRoles", "a mapping of role names to roles")
        if mapping is not None and not mapping:
            issues.error("taskRoles", "min-items", "must define at least one task role")
        if mapping and too_many_roles(mapping, "taskRoles", issues):
            mapping = None
        misplaced = _misplaced_role_fields(mapping or {}, issues)
        for role_name, raw in (mapping or {}).items():
            if role_name in misplaced:
                continue
            before, start = issues.error_count(), len(issues.items)
            read = _read_role(str(role_name), raw, f, begin_at.get(role_name) or {})
            issues.forget_required(start, f"taskRoles.{role_name}", misplaced.get(role_name, []))
            if read is None:
                issues.ensure_error(before, f"taskRoles.{role_name}", "this task role")
                continue
            role, paths, shm_defaulted = read
            if isinstance(role_parameters.get(role.name), dict):
                role = role.model_copy(update={"parameters": role_parameters[role.name]})
            roles.append(role)
            check_role(role, paths, issues, shm_defaulted=shm_defaulted)
            check_role_references(role, paths, prerequisites, issues, extra_names=reference_names)
        check_job_instances(roles, "taskRoles", issues)
    role_names = {str(k) for k in raw_roles} if isinstance(raw_roles, dict) else set()
    roles = read_start_order(ours, roles, issues, declared=role_names)
    for d_index, deployment in enumerate(deployments):
        for role_name in {*deployment.pre_commands, *deployment.post_commands}:
            if role_name not in role_names and raw_roles is not None:
                issues.error(
                    f"deployments[{d_index}].taskRoles.{role_name}",
                    "unknown-role",
                    f"deployment {deployment.name!r} names task role {role_name!r}, which the job "
                    "does not have",
                )
    if issues.has_errors() or name is None:
        return None
    prerequisites, roles = _original_prerequisite_names(prerequisites, roles, ours)
    return JobSpec(
        dialect=Dialect.V2,
        name=original_name(name, ours.get("displayName")) or name,
        version=version,
        contributor=contributor,
        description=description,
        virtual_cluster=virtual_cluster,
        retry_count=retry or 0,
        parameters=parameters,
        secrets=secrets,
        prerequisites=prerequisites,
        task_roles=roles,
        deployments=deployments,
        default_deployment=default_deployment,
        extras={k: v for k, v in extras.items() if k != EXTRAS_KEY},
        source=mask_secrets(source, doc),
    )


def _fields() -> dict[str, frozenset[str]]:
    """Every field this dialect reads, by place (`*` any role or label, `[]` a list's items)."""
    places = {
        "": _TOP_KEYS,
        "defaults": (*_DEFAULTS_KEYS, ANY_OTHER),
        "extras": (*EXTRAS_FIELDS, ANY_OTHER),
        "deployments[]": (*_DEPLOYMENT_KEYS, ANY_OTHER),
        "deployments[].taskRoles.*": _DEPLOYMENT_ROLE_KEYS,
        "taskRoles.*": _ROLE_KEYS,
        "taskRoles.*.completion": _COMPLETION_KEYS,
        "taskRoles.*.extraContainerOptions": (*_OPTION_KEYS, ANY_OTHER),
        "taskRoles.*.resourcePerInstance": _RESOURCE_KEYS,
        **{f"prerequisites[].{k}".rstrip("."): v for k, v in PREREQUISITE_FIELDS.items()},
    }
    return {place: frozenset(keys) for place, keys in places.items()}


def _original_prerequisite_names(
    prerequisites: list[Prerequisite], roles: list[TaskRole], ours: dict[str, Any]
) -> tuple[list[Prerequisite], list[TaskRole]]:
    """Give back the draft names (`a.b`) that `extras.paigraph.prerequisiteNames` recorded for
    prerequisites written under their v2 spelling, in the prerequisites and in the roles."""
    recorded = ours.get("prerequisiteNames")
    if not isinstance(recorded, dict):
        return prerequisites, roles
    renamed = {
        p.name: found
        for p in prerequisites
        if (found := original_name(p.name, recorded.get(p.name))) is not None
    }
    if not renamed:
        return prerequisites, roles
    return (
        [p.model_copy(update={"name": renamed.get(p.name, p.name)}) for p in prerequisites],
        [rename_references(role, renamed) for role in roles],
    )


def _dict_at(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """`obj[key]` when it is a mapping, else an empty one: `extras.paigraph` and its parts
    are written by paigraph itself, and anything else found there is passed over."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _mapping(obj: dict[str, Any], key: str, f: Fields) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    return f.as_mapping(value, key) or {}


def _read_prerequisites(doc: dict[str, Any], f: Fields) -> list[Prerequisite]:
    raw = doc.get("prerequisites")
    if raw is None:
        return []
    items = f.as_list(raw, "prerequisites", min_items=1) or []
    return read_prerequisite_list(
        [(item, f"prerequisites[{i}]") for i, item in enumerate(items)], f, Dialect.V2
    )


def _read_deployments(doc: dict[str, Any], f: Fields) -> list[Deployment]:
    raw = doc.get("deployments")
    if raw is None:
        return []
    out: list[Deployment] = []
    names: set[str] = set()
    for i, item in enumerate(f.as_list(raw, "deployments", min_items=1) or []):
        path = f"deployments[{i}]"
        obj = f.as_mapping(item, path)
        if obj is None:
            continue
        unread_warnings(obj, path, _DEPLOYMENT_KEYS, f.issues)
        name = f.string(
            obj, "name", path, required=True, pattern=V2_NAME, rule=V2_NAME_RULE, max_length=255
        )
        pre: dict[str, list[str]] = {}
        post: dict[str, list[str]] = {}
        roles_path = join(path, "taskRoles")
        f.required(obj, path, ("taskRoles",))
        roles = f.as_mapping(obj["taskRoles"], roles_path) if "taskRoles" in obj else None
        if roles is not None and not roles:
            f.issues.error(roles_path, "min-items", "must name at least one task role")
        for role_name, entry in (roles or {}).items():
            entry_path = join(roles_path, str(role_name))
            entry_obj = f.as_mapping(entry, entry_path)
            if entry_obj is None:
                continue
            f.known_keys(entry_obj, entry_path, _DEPLOYMENT_ROLE_KEYS)
            before = f.string_list(entry_obj, "preCommands", entry_path, min_items=1)
            after = f.string_list(entry_obj, "postCommands", entry_path, min_items=1)
            if before:
                pre[str(role_name)] = before
            if after:
                post[str(role_name)] = after
        if name is None:
            continue
        if name in names:
            f.issues.error(f"{path}.name", "duplicate", f"Duplicate deployments {name}.")
            continue
        names.add(name)
        out.append(Deployment(name=name, pre_commands=pre, post_commands=post))
    return out


def _reference_prerequisite_names(extras: dict[str, Any], f: Fields) -> set[str]:
    """Names declared in seed 004's `extras.reference_prerequisites` (resolved later)."""
    raw = extras.get("reference_prerequisites")
    if raw is None:
        return set()
    names: set[str] = set()
    path = "extras.reference_prerequisites"
    for i, item in enumerate(f.as_list(raw, path) or []):
        entry = f.as_mapping(item, join(path, i))
        if entry is None:
            continue
        name = f.string(entry, "name", join(path, i), required=True)
        if name is not None:
            names.add(name)
    return names


def _misplaced_role_fields(roles: dict[str, Any], issues: Issues) -> dict[str, list[str]]:
    """Role fields written at the level of the task roles (dedented out of a role): one error
    that says so, instead of reading each as a role. Returns the role they belong to -> those
    fields, and each field -> itself, so neither is read as missing nor as a role."""
    fields = misplaced_fields(roles, _ROLE_KEYS)
    if not fields:
        return {}
    owner = owner_role(roles, fields)
    issues.error("taskRoles", "misplaced-field", misplaced_message(fields, "task roles", owner))
    found = {field: [field] for field in fields}
    if owner is not None:
        found[owner] = fields
    return found


_TOP_HINTS.update(
    {
        key: f"`{key}` belongs to a task role: indent it under one in `taskRoles`?"
        for key in ("instances", "dockerImage", "resourcePerInstance", "commands", "completion")
    }
)
_ROLE_HINTS = {
    "hivedScheduler": "it belongs under extras.hivedScheduler.taskRoles",
    "command": "protocol v2 uses a `commands` list",
    **{
        key: f"`{key}` belongs under `resourcePerInstance`: indent it there?"
        for key in _RESOURCE_KEYS
    },
}


def _read_role(
    name: str, raw: Any, f: Fields, begin_at: dict[str, Any]
) -> tuple[TaskRole, RolePaths, bool] | None:
    path = f"taskRoles.{name}"
    obj = f.as_mapping(raw, path)
    if not ROLE_NAME.fullmatch(name):
        f.issues.error(path, "pattern", f"task role name {name!r} {ROLE_NAME_RULE}")
    if obj is None:
        return None
    f.required(obj, path, ("resourcePerInstance",))
    f.known_keys(
        obj,
        path,
        _ROLE_KEYS,
        hints=_ROLE_HINTS,
    )
    if "protocolVersion" in obj and obj["protocolVersion"] not in (2, "2"):
        f.issues.error(join(path, "protocolVersion"), "enum", "must be 2")
    instances = f.integer(obj, "instances", path, default=1)
    retry = f.integer(obj, "taskRetryCount", path, default=0)
    docker_image = f.string(obj, "dockerImage", path, required=True)
    data = f.string(obj, "data", path)
    script = f.string(obj, "script", path)
    output = f.string(obj, "output", path)
    prerequisites = f.string_list(obj, "prerequisites", path)
    commands = f.string_list(obj, "commands", path, required=True, min_items=1)

    completion_path = join(path, "completion")
    completion_obj = obj.get("completion") or {}
    if f.as_mapping(completion_obj, completion_path) is None:
        completion_obj = {}
    f.known_keys(completion_obj, completion_path, _COMPLETION_KEYS)
    # OpenPAI treats null as the default (1 failure; every instance succeeding).
    min_failed = f.integer(
        completion_obj, "minFailedInstances", completion_path, default=1, allow_null=True
    )
    min_succeeded = f.integer(
        completion_obj,
        "minSucceededInstances",
        completion_path,
        default=instances or 1,
        allow_null=True,
    )

    options_path = join(path, "extraContainerOptions")
    options = obj.get("extraContainerOptions") or {}
    if f.as_mapping(options, options_path) is None:
        options = {}
    shm = f.integer(options, "shmMB", options_path)
    infiniband = f.boolean(options, "infiniband", options_path)
    if infiniband:
        f.issues.warn(
            join(options_path, "infiniband"),
            IGNORED,
            "`infiniband: true` asks OpenPAI for an InfiniBand device (rdma/hca) in each "
            "container; paigraph's backends give none, so the instances run without one",
        )
    refused = check_options(options, options_path, f.issues)
    for key in options:
        if key not in _OPTION_KEYS and key not in refused:
            f.issues.warn(
                join(options_path, str(key)),
                IGNORED,
                f"extraContainerOptions.{key} is not a known option and is ignored",
            )

    res_path = join(path, "resourcePerInstance")
    res = obj.get("resourcePerInstance")
    res_obj = f.as_mapping(res, res_path) if "resourcePerInstance" in obj else None
    ports: list[PortRequest] = []
    paths = RolePaths(
        name=path,
        instances=join(path, "instances"),
        cpu=join(res_path, "cpu"),
        memory_mb=join(res_path, "memoryMB"),
        gpu=join(res_path, "gpu"),
        shm_mb=join(options_path, "shmMB"),
        min_failed=join(completion_path, "minFailedInstances"),
        min_succeeded=join(completion_path, "minSucceededInstances"),
        task_retry_count=join(path, "taskRetryCount"),
        docker_image=join(path, "dockerImage"),
        data=join(path, "data"),
        script=join(path, "script"),
        output=join(path, "output"),
        prerequisites=join(path, "prerequisites"),
    )
    cpu = memory = gpu = None
    if res_obj is not None:
        f.required(res_obj, res_path, ("cpu", "memoryMB", "gpu"))
        f.known_keys(
            res_obj,
            res_path,
            _RESOURCE_KEYS,
            hints={
                "shmMB": "protocol v2 puts it under extraContainerOptions.shmMB",
            },
        )
        cpu = f.integer(res_obj, "cpu", res_path)
        memory = f.integer(res_obj, "memoryMB", res_path)
        gpu = f.integer(res_obj, "gpu", res_path)
        ports = _read_ports(res_obj, res_path, f, paths, begin_at) or []
    values = (instances, retry, docker_image, commands, cpu, memory, gpu, min_failed, min_succeeded)
    if any(v is None for v in values) or any(
        options.get(key) is not None and value is None
        for key, value in (("shmMB", shm), ("infiniband", infiniband))
    ):
        return None
    assert instances is not None and cpu is not None and memory is not None and gpu is not None
    assert min_failed is not None and min_succeeded is not None and retry is not None
    shm_defaulted = shm is None
    resources = Resources(
        cpu=cpu,
        memory_mb=memory,
        gpu=gpu,
        shm_mb=min(DEFAULT_SHM_MB, memory) if shm is None else shm,
        ports=add_default_ports(ports),
        infiniband=bool(infiniband),
    )
    role = TaskRole(
        name=name,
        instances=instances,
        docker_image=docker_image or "",
        data=data,
        script=script,
        output=output,
        prerequisites=prerequisites or [],
        resources=resources,
        completion=Completion(min_failed=min_failed, min_succeeded=min_succeeded),
        task_retry_count=retry,
        commands=commands or [],
        extra_container_options={
            k: v for k, v in options.items() if k not in ("shmMB", "infiniband")
        },
    )
    return role, paths, shm_defaulted


def _read_ports(
    res: dict[str, Any], res_path: str, f: Fields, paths: RolePaths, begin_at: dict[str, Any]
) -> list[PortRequest] | None:
    raw = res.get("ports")
    if raw is None:
        return []
    where = join(res_path, "ports")
    ports = f.as_mapping(raw, where, "a mapping of port labels to counts")
    if ports is None:
        return None
    if not ports:
        f.issues.error(where, "min-items", "must define at least one port label (or be left out)")
    out: list[PortRequest] = []
    for label in ports:
        label = str(label)
        label_path = join(where, label)
        if not ROLE_NAME.fullmatch(label):
            f.issues.error(label_path, "pattern", f"port label {label!r} {ROLE_NAME_RULE}")
        count = f.integer(ports, label, where)
        paths.ports[label] = label_path
        paths.port_labels[label] = label_path
        if count is not None:
            start = begin_at.get(label)
            out.append(
                PortRequest(
                    label=label, count=count, begin_at=start if isinstance(start, int) else 0
                )
            )
    return out


FIELDS = _fields()
