"""OpenPAI job protocol v2: `protocolVersion: 2`, a `taskRoles` map, `<% $parameters.x %>`.

Follows the rest-server's schema and semantic checks (reference/protocol_v2.md sections 1 and
2) with its exact messages where it has them, then the shared stricter rules.
"""

from __future__ import annotations

import re
from typing import Any

from server.protocol.fields import Fields
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
    Dialect,
    JobSpec,
    PortRequest,
    Prerequisite,
    Resources,
    TaskRole,
)
from server.protocol.outline import (
    JOB_TYPE,
    Place,
    RoleRead,
    Table,
    all_read,
    boolean,
    check,
    integer,
    known,
    loose_mapping,
    mapping,
    nested,
    protocol_version_2,
    read_roles,
    read_table,
    required,
    step,
    strings,
    text,
    within,
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
from server.protocol.v2_deployments import (
    DEPLOYMENT_KEYS,
    DEPLOYMENT_ROLE_KEYS,
    check_deployment_roles,
    read_deployments,
)
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


def read_v2(doc: dict[str, Any], issues: Issues, source: str) -> JobSpec | None:
    f = Fields(issues)
    values = read_table(_JOB, f, doc, "")
    ours = values["ours"]
    raw_roles = doc.get("taskRoles")
    roles = _read_roles(raw_roles, f, values) if "taskRoles" in doc else []
    role_names = {str(k) for k in raw_roles} if isinstance(raw_roles, dict) else set()
    roles = read_start_order(ours, roles, issues, declared=role_names)
    if raw_roles is not None:
        check_deployment_roles(values["deployments"], role_names, issues)
    if issues.has_errors() or values["name"] is None:
        return None
    prerequisites, roles = _original_prerequisite_names(values["prerequisites"], roles, ours)
    extras = values["extras"]
    return JobSpec(
        dialect=Dialect.V2,
        name=original_name(values["name"], ours.get("displayName")) or values["name"],
        version=values["version"],
        contributor=values["contributor"],
        description=values["description"],
        virtual_cluster=values["virtual_cluster"],
        retry_count=values["retry"] or 0,
        parameters=values["parameters"],
        secrets=values["secrets"],
        prerequisites=prerequisites,
        task_roles=roles,
        deployments=values["deployments"],
        default_deployment=values["default_deployment"],
        extras={k: v for k, v in extras.items() if k != EXTRAS_KEY},
        source=mask_secrets(source, _without_masked_secrets(doc)),
    )


def _read_roles(raw_roles: Any, f: Fields, values: dict[str, Any]) -> list[TaskRole]:
    """The `taskRoles` map: each role read, checked and given its recorded parameters."""
    issues = f.issues
    mapping = f.as_mapping(raw_roles, "taskRoles", "a mapping of role names to roles")
    if mapping is not None and not mapping:
        issues.error("taskRoles", "min-items", "must define at least one task role")
    if mapping and too_many_roles(mapping, "taskRoles", issues):
        mapping = None
    misplaced = _misplaced_role_fields(mapping or {}, issues)
    begin_at = _dict_at(values["ours"], "portBeginAt")
    role_parameters = _dict_at(values["ours"], "roleParameters")

    def read(role_name: Any, path: str, raw: Any) -> RoleRead | None:
        start = len(issues.items)
        found = _read_role(str(role_name), raw, f, begin_at.get(role_name) or {})
        if role_name in misplaced:
            issues.forget_required(start, path, misplaced[role_name])
        return found

    def accept(role: TaskRole, paths: RolePaths, shm_defaulted: bool) -> TaskRole:
        if isinstance(role_parameters.get(role.name), dict):
            role = role.model_copy(update={"parameters": role_parameters[role.name]})
        check_role(role, paths, issues, shm_defaulted=shm_defaulted)
        check_role_references(
            role, paths, values["prerequisites"], issues, extra_names=values["reference_names"]
        )
        return role

    entries = [
        (role_name, f"taskRoles.{role_name}", raw)
        for role_name, raw in (mapping or {}).items()
        if role_name not in misplaced
    ]
    roles = read_roles(entries, read, accept, issues, "this task role")
    check_job_instances(roles, "taskRoles", issues)
    return roles


def _secrets(p: Place) -> dict[str, Any]:
    if p.obj.get("secrets") == MASK:
        p.issues.error(
            "secrets",
            "masked-secrets",
            "the secrets were masked when this config was stored or shown; "
            "put the real values back before submitting it",
        )
        return {}
    return _SECRETS(p)


_SECRETS = mapping("secrets")


def _without_masked_secrets(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as masked when kept: masked secrets are none (the error says so)."""
    if doc.get("secrets") == MASK:
        return {k: v for k, v in doc.items() if k != "secrets"}
    return doc


def _extras_warned(extras: dict[str, Any], p: Place) -> dict[str, Any]:
    extras_warnings(extras, p.issues)
    return extras


def _retry(retry: int | None, p: Place) -> int | None:
    """`jobRetryCount` in range, unless `extras.paigraph` kept a v1 count v2 cannot say."""
    if retry is not None and "jobRetryCount" in p.obj and not 0 <= retry <= MAX_RETRIES:
        p.issues.error(
            "jobRetryCount", "range", f"must be between 0 and {MAX_RETRIES}, got {retry}"
        )
    ours = p.values["ours"]
    if isinstance(ours.get("jobRetryCount"), int) and ours["jobRetryCount"] in (-1, -2):
        return ours["jobRetryCount"]  # type: ignore[no-any-return]
    return retry


def _known_deployment(name: str | None, p: Place) -> str | None:
    if name is not None and name not in {d.name for d in p.values["deployments"]}:
        p.issues.error(
            "defaults.deployment",
            "unknown-deployment",
            f"Default deployment {name} does not exist.",
        )
    return name


def _fields() -> dict[str, frozenset[str]]:
    """Every field this dialect reads, by place (`*` any role or label, `[]` a list's items)."""
    places = {
        "": _TOP_KEYS,
        "defaults": (*_DEFAULTS_KEYS, ANY_OTHER),
        "extras": (*EXTRAS_FIELDS, ANY_OTHER),
        "deployments[]": (*DEPLOYMENT_KEYS, ANY_OTHER),
        "deployments[].taskRoles.*": DEPLOYMENT_ROLE_KEYS,
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


def _read_role(name: str, raw: Any, f: Fields, begin_at: dict[str, Any]) -> RoleRead | None:
    path = f"taskRoles.{name}"
    obj = f.as_mapping(raw, path)
    if not ROLE_NAME.fullmatch(name):
        f.issues.error(path, "pattern", f"task role name {name!r} {ROLE_NAME_RULE}")
    if obj is None:
        return None
    paths = _role_paths(path)
    values = read_table(
        _ROLE, f, obj, path, {**_NO_RESOURCES, "paths": paths, "begin_at": begin_at}
    )
    options = values["options"]
    if not _all_read(values) or any(
        options.get(key) is not None and values[value] is None
        for key, value in (("shmMB", "shm"), ("infiniband", "infiniband"))
    ):
        return None
    return _role(name, values), paths, values["shm"] is None


# Whether a role has what it needs (its resources among them) to be one.
# What a role without a readable resourcePerInstance has of it.
_NO_RESOURCES: dict[str, Any] = {"cpu": None, "memory": None, "gpu": None, "ports": []}
_all_read = all_read(
    "instances",
    "retry",
    "docker_image",
    "commands",
    "cpu",
    "memory",
    "gpu",
    "min_failed",
    "min_succeeded",
)


def _role(name: str, values: dict[str, Any]) -> TaskRole:
    memory, shm, infiniband = values["memory"], values["shm"], values["infiniband"]
    resources = Resources(
        cpu=values["cpu"],
        memory_mb=memory,
        gpu=values["gpu"],
        shm_mb=min(DEFAULT_SHM_MB, memory) if shm is None else shm,
        ports=add_default_ports(values["ports"]),
        infiniband=bool(infiniband),
    )
    return TaskRole(
        name=name,
        instances=values["instances"],
        docker_image=values["docker_image"] or "",
        data=values["data"],
        script=values["script"],
        output=values["output"],
        prerequisites=values["prerequisites"] or [],
        resources=resources,
        completion=Completion(
            min_failed=values["min_failed"], min_succeeded=values["min_succeeded"]
        ),
        task_retry_count=values["retry"],
        commands=values["commands"] or [],
        extra_container_options={
            k: v for k, v in values["options"].items() if k not in ("shmMB", "infiniband")
        },
    )


def _role_paths(path: str) -> RolePaths:
    res_path = f"{path}.resourcePerInstance"
    completion_path = f"{path}.completion"
    return RolePaths(
        name=path,
        instances=f"{path}.instances",
        cpu=f"{res_path}.cpu",
        memory_mb=f"{res_path}.memoryMB",
        gpu=f"{res_path}.gpu",
        shm_mb=f"{path}.extraContainerOptions.shmMB",
        min_failed=f"{completion_path}.minFailedInstances",
        min_succeeded=f"{completion_path}.minSucceededInstances",
        task_retry_count=f"{path}.taskRetryCount",
        docker_image=f"{path}.dockerImage",
        data=f"{path}.data",
        script=f"{path}.script",
        output=f"{path}.output",
        prerequisites=f"{path}.prerequisites",
    )


def _infiniband_ignored(infiniband: bool | None, p: Place) -> bool | None:
    if infiniband:
        p.issues.warn(
            p.at("infiniband"),
            IGNORED,
            "`infiniband: true` asks OpenPAI for an InfiniBand device (rdma/hca) in each "
            "container; paigraph's backends give none, so the instances run without one",
        )
    return infiniband


def _unknown_options(p: Place) -> None:
    refused = check_options(p.obj, p.path, p.issues)
    for key in p.obj:
        if key not in _OPTION_KEYS and key not in refused:
            p.issues.warn(
                p.at(str(key)),
                IGNORED,
                f"extraContainerOptions.{key} is not a known option and is ignored",
            )


def _resources(p: Place) -> dict[str, Any] | None:
    """`resourcePerInstance`, read into the role's values (its cpu, memory, gpu, ports)."""
    if "resourcePerInstance" not in p.obj:
        return None
    res_path = p.at("resourcePerInstance")
    res = p.f.as_mapping(p.obj["resourcePerInstance"], res_path)
    if res is not None:
        within(p, res, res_path, _RESOURCE)
    return res


def _min_succeeded(p: Place) -> int | None:
    """Every instance succeeding by default."""
    default = p.values["instances"] or 1
    return p.f.integer(p.obj, "minSucceededInstances", p.path, default=default, allow_null=True)


_RESOURCE: Table = (
    required("cpu", "memoryMB", "gpu"),
    known(_RESOURCE_KEYS, hints={"shmMB": "protocol v2 puts it under extraContainerOptions.shmMB"}),
    step("cpu", integer("cpu")),
    step("memory", integer("memoryMB")),
    step("gpu", integer("gpu")),
    step(
        "ports",
        lambda p: _read_ports(p.obj, p.path, p.f, p.values["paths"], p.values["begin_at"]) or [],
    ),
)
_ROLE: Table = (
    required("resourcePerInstance"),
    known(_ROLE_KEYS, hints=_ROLE_HINTS),
    protocol_version_2(detail=False),
    step("instances", integer("instances", default=1)),
    step("retry", integer("taskRetryCount", default=0)),
    step("docker_image", text("dockerImage", required=True)),
    step("data", text("data")),
    step("script", text("script")),
    step("output", text("output")),
    step("prerequisites", strings("prerequisites")),
    step("commands", strings("commands", required=True, min_items=1)),
    nested(
        "completion",
        loose_mapping("completion"),
        (
            known(_COMPLETION_KEYS),
            # OpenPAI treats null as the default (1 failure; every instance succeeding).
            step("min_failed", integer("minFailedInstances", default=1, allow_null=True)),
            step("min_succeeded", _min_succeeded),
        ),
    ),
    nested(
        "extraContainerOptions",
        loose_mapping("extraContainerOptions"),
        (
            step("shm", integer("shmMB")),
            step("infiniband", boolean("infiniband"), _infiniband_ignored),
            check(_unknown_options),
        ),
        key="options",
    ),
    step("resources", _resources),
)


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


_JOB: Table = (
    required("protocolVersion", "type", "taskRoles"),
    known(_TOP_KEYS, hints=_TOP_HINTS),
    protocol_version_2(),
    step("name", text("name", required=True, pattern=V2_NAME, rule=V2_NAME_RULE, max_length=255)),
    JOB_TYPE,
    step("version", text("version", allow_number=True)),
    step("contributor", text("contributor")),
    step("description", text("description")),
    step("parameters", mapping("parameters")),
    step("secrets", _secrets),
    step("extras", mapping("extras"), _extras_warned),
    step("ours", lambda p: _dict_at(p.values["extras"], EXTRAS_KEY)),
    step("retry", integer("jobRetryCount", default=0), _retry),
    step("prerequisites", lambda p: _read_prerequisites(p.obj, p.f)),
    step("deployments", lambda p: read_deployments(p.obj, p.f)),
    nested(
        "defaults",
        mapping("defaults"),
        (
            check(lambda p: unread_warnings(p.obj, p.path, _DEFAULTS_KEYS, p.issues)),
            step(
                "virtual_cluster",
                lambda p: p.f.string(p.obj, "virtualCluster", p.path) or "default",
            ),
            step("default_deployment", text("deployment"), _known_deployment),
        ),
    ),
    step("reference_names", lambda p: _reference_prerequisite_names(p.values["extras"], p.f)),
)


FIELDS = _fields()
