"""The seeds' draft dialect: `protocol_version`, a `tasks` list, `$$param$$` references.

Also accepts the variant that nests the job under `job:` beside a top-level `prerequisites:`
list, tasks that name an `output` instead of a `storage`, a task `name` in place of `role`,
and `instances: $job.parameters.x`.
"""

from __future__ import annotations

import re
from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.ignored import IGNORED, START_ORDER_FIELDS, start_order_elsewhere
from server.protocol.issues import Issues, join
from server.protocol.model import (
    Completion,
    Dialect,
    JobSpec,
    Prerequisite,
    PrerequisiteType,
    Resources,
    TaskRole,
)
from server.protocol.outline import (
    JOB_TYPE,
    KILL_ALL_OBSOLETE,
    Place,
    RoleRead,
    Table,
    all_read,
    check,
    integer,
    known,
    loose_mapping,
    null_means,
    read_roles,
    read_table,
    required,
    retry_range,
    run,
    step,
    string_map,
    strings,
    text,
    within,
)
from server.protocol.port_list import PORT_KEYS, read_port_list
from server.protocol.prerequisites import DRAFT_NAME, DRAFT_NAME_RULE, read_prerequisite_list
from server.protocol.prerequisites import FIELDS as PREREQUISITE_FIELDS
from server.protocol.rules import (
    RolePaths,
    add_default_ports,
    check_job_instances,
    check_role,
    check_role_references,
    check_unique,
    too_many_roles,
)
from server.protocol.secrets import mask_secrets

ROLE_NAME = re.compile(r"[A-Za-z0-9._~]+")
ROLE_NAME_RULE = "must match ^[A-Za-z0-9._~]+$"
DEFAULT_SHM_MB = 64
_PARAMETER_REF = re.compile(r"\$job\.parameters\.(\w+)|\$\$(\w+)\$\$")

_JOB_KEYS = (
    "protocol_version",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "retryCount",
    "virtualCluster",
    "parameters",
    "tasks",
    "prerequisites",
    "killAllOnCompletedTaskNumber",
)
_TASK_KEYS = (
    "role",
    "name",
    "data",
    "script",
    "storage",
    "output",
    "dockerimage",
    "resource",
    "minFailedTaskCount",
    "minSucceededTaskCount",
    "command",
    "env",
    "parameters",
)
_WRAPPER_KEYS = ("job", "prerequisites")  # the job nested under `job:`, beside prerequisites
_RESOURCE_KEYS = ("instances", "resourcePerInstance", "portList")
_PER_INSTANCE_KEYS = ("cpu", "memoryMB", "shmMB", "gpu")


def read_draft(
    doc: dict[str, Any], issues: Issues, source: str, overrides: dict[str, Any]
) -> JobSpec | None:
    f = Fields(issues)
    job, base, outer = _unwrap(doc, f)
    values = read_table(_JOB, f, job, base, {"overrides": overrides})
    prerequisites = _read_prerequisites(job, base, outer + values["own_prerequisites"], f)
    images = [p.name for p in prerequisites if p.type is PrerequisiteType.DOCKERIMAGE]
    names: list[tuple[str, str]] = []

    def accept(role: TaskRole, paths: RolePaths, shm_defaulted: bool) -> TaskRole:
        names.append((role.name, paths.name))
        check_role(role, paths, issues, shm_defaulted=shm_defaulted)
        check_role_references(role, paths, prerequisites, issues)
        return role

    tasks_path = join(base, "tasks")
    roles = read_roles(
        _task_entries(job, tasks_path, f),
        lambda _index, path, raw: _read_task(path, raw, f, values["parameters"], images),
        accept,
        issues,
        "this task",
    )
    check_job_instances(roles, tasks_path, issues)
    check_unique(names, issues, "task role name")
    if issues.has_errors() or values["name"] is None:
        return None
    return JobSpec(
        dialect=Dialect.DRAFT,
        name=values["name"],
        version=values["version"],
        contributor=values["contributor"],
        description=values["description"],
        virtual_cluster=values["virtual_cluster"],
        retry_count=values["retry"] or 0,
        parameters=values["parameters"],
        prerequisites=prerequisites,
        task_roles=roles,
        source=mask_secrets(source, doc),
    )


def _unwrap(doc: dict[str, Any], f: Fields) -> tuple[dict[str, Any], str, list[tuple[Any, str]]]:
    """The job, its path, and the prerequisites listed beside it when it is nested under
    `job:`."""
    if "job" in doc and "tasks" not in doc:
        f.known_keys(doc, "", _WRAPPER_KEYS)
        job = f.as_mapping(doc["job"], "job") or {}
        return job, "job", _raw_list(doc, "prerequisites", "", f)
    return doc, "", []


def _read_prerequisites(
    job: dict[str, Any], base: str, raw: list[tuple[Any, str]], f: Fields
) -> list[Prerequisite]:
    prerequisites = read_prerequisite_list(raw, f, Dialect.DRAFT)
    if not raw and "prerequisites" not in job:
        f.issues.error(
            join(base, "prerequisites"),
            "required",
            "`prerequisites` is required: list at least the dockerimage the tasks run in",
        )
    return prerequisites


def _task_entries(job: dict[str, Any], tasks_path: str, f: Fields) -> list[tuple[int, str, Any]]:
    """The `tasks` list's items as (index, path, raw); none when it is not a list, is empty,
    or has too many tasks to read."""
    tasks = f.as_list(job["tasks"], tasks_path, min_items=1) if "tasks" in job else None
    if tasks and too_many_roles(tasks, tasks_path, f.issues):
        tasks = None
    return [(i, join(tasks_path, i), raw) for i, raw in enumerate(tasks or [])]


def _with_overrides(parameters: dict[str, Any], p: Place) -> dict[str, Any]:
    return {**parameters, **p.values["overrides"]}


_JOB: Table = (
    step("own_prerequisites", lambda p: _raw_list(p.obj, "prerequisites", p.path, p.f)),
    known(
        _JOB_KEYS,
        hints={
            "taskRoles": "the draft dialect lists roles under `tasks`",
            "protocolVersion": "the draft dialect spells it `protocol_version`",
        },
    ),
    required("type", "tasks"),
    step(
        "name",
        text("name", required=True, pattern=DRAFT_NAME, rule=DRAFT_NAME_RULE, max_length=255),
    ),
    JOB_TYPE,
    step("version", text("version", allow_number=True)),
    step("contributor", text("contributor")),
    step("description", text("description")),
    step("virtual_cluster", lambda p: p.f.string(p.obj, "virtualCluster", p.path) or "default"),
    step("retry", integer("retryCount", default=0), retry_range),
    KILL_ALL_OBSOLETE,
    step("parameters", loose_mapping("parameters"), _with_overrides),
)


def _fields() -> dict[str, frozenset[str]]:
    """Every field this dialect reads, by place (`[]` a list's items); the job's own fields
    may also sit under `job:`, beside the wrapper's `prerequisites`."""
    places = {
        "": (*_JOB_KEYS, *_WRAPPER_KEYS),
        "tasks[]": _TASK_KEYS,
        "tasks[].resource": _RESOURCE_KEYS,
        "tasks[].resource.resourcePerInstance": _PER_INSTANCE_KEYS,
        "tasks[].resource.portList[]": PORT_KEYS,
        **{f"prerequisites[].{k}".rstrip("."): v for k, v in PREREQUISITE_FIELDS.items()},
    }
    return {place: frozenset(keys) for place, keys in places.items()}


def _raw_list(obj: dict[str, Any], key: str, base: str, f: Fields) -> list[tuple[Any, str]]:
    if obj.get(key) is None:
        return []
    path = join(base, key)
    return [(item, join(path, i)) for i, item in enumerate(f.as_list(obj[key], path) or [])]


def _read_task(
    path: str, raw: Any, f: Fields, parameters: dict[str, Any], images: list[str]
) -> RoleRead | None:
    obj = f.as_mapping(raw, path)
    if obj is None:
        return None
    place = Place(
        f,
        obj,
        path,
        {
            "job_parameters": parameters,
            "images": images,
            "role_key": "role" if "role" in obj or "name" not in obj else "name",
            "output_key": "output" if "output" in obj else "storage",
        },
    )
    run(_TASK, place)
    values = place.values
    res_path = join(path, "resource")
    res = f.as_mapping(obj["resource"], res_path) if "resource" in obj else None
    paths = _task_paths(path, values["role_key"], values["output_key"])
    if res is None:
        return None
    within(place, res, res_path, _RESOURCE)
    per_path = join(res_path, "resourcePerInstance")
    per = (
        f.as_mapping(res["resourcePerInstance"], per_path) if "resourcePerInstance" in res else None
    )
    if per is None:
        return None
    within(place, per, per_path, _PER_INSTANCE)
    values["ports"] = read_port_list(res, res_path, f, paths, count_required=True)
    if not _all_read(values) or (values["shm"] is None and per.get("shmMB") is not None):
        return None
    return _task_role(values), paths, values["shm"] is None


# Whether a task has what it needs to become a role (the shm size may be left out).
_all_read = all_read(
    "name",
    "image",
    "command",
    "env",
    "data",
    "instances",
    "cpu",
    "memory",
    "gpu",
    "min_failed",
    "min_succeeded",
    "ports",
)


def _task_role(values: dict[str, Any]) -> TaskRole:
    memory, shm, data_names = values["memory"], values["shm"], values["data"]
    return TaskRole(
        name=values["name"],
        instances=values["instances"] or 0,
        docker_image=values["image"],
        data=data_names[0] if data_names else None,
        script=values["script"],
        output=values["output"],
        prerequisites=data_names[1:],
        env=values["env"] or {},
        parameters=values["parameters"],
        resources=Resources(
            cpu=values["cpu"] or 0,
            memory_mb=memory,
            gpu=values["gpu"] or 0,
            shm_mb=min(DEFAULT_SHM_MB, memory) if shm is None else shm,
            ports=add_default_ports(values["ports"]),
        ),
        completion=Completion(
            min_failed=values["min_failed"] or 0, min_succeeded=values["min_succeeded"] or 0
        ),
        commands=values["command"],
    )


def _task_paths(path: str, role_key: str, output_key: str) -> RolePaths:
    res_path = f"{path}.resource"
    per_path = f"{res_path}.resourcePerInstance"
    return RolePaths(
        name=f"{path}.{role_key}",
        instances=f"{res_path}.instances",
        cpu=f"{per_path}.cpu",
        memory_mb=f"{per_path}.memoryMB",
        gpu=f"{per_path}.gpu",
        shm_mb=f"{per_path}.shmMB",
        min_failed=f"{path}.minFailedTaskCount",
        min_succeeded=f"{path}.minSucceededTaskCount",
        task_retry_count=path,
        docker_image=f"{path}.dockerimage",
        data=f"{path}.data",
        script=f"{path}.script",
        output=f"{path}.{output_key}",
        prerequisites=f"{path}.data",
    )


def _start_order_elsewhere(p: Place) -> None:
    for key in START_ORDER_FIELDS:
        if key in p.obj:
            p.issues.warn(p.at(key), IGNORED, start_order_elsewhere(key))


def _known_task_keys(p: Place) -> None:
    p.f.known_keys(
        {k: v for k, v in p.obj.items() if k not in START_ORDER_FIELDS},
        p.path,
        _TASK_KEYS,
        hints={"commands": "the draft dialect uses `command`"},
    )


def _role_name(p: Place) -> str | None:
    if "role" in p.obj and "name" in p.obj:
        p.issues.error(p.at("name"), "conflict", "give the task's role name once, as `role`")
    key = p.values["role_key"]
    return p.f.string(p.obj, key, p.path, required=True, pattern=ROLE_NAME, rule=ROLE_NAME_RULE)


def _output(p: Place) -> str | None:
    if "storage" in p.obj and "output" in p.obj:
        p.issues.error(
            p.at("output"), "conflict", "name either a `storage` or an `output`, not both"
        )
    return p.f.string(p.obj, p.values["output_key"], p.path)


def _image(p: Place) -> str | None:
    """The task's `dockerimage`; left out, the job's one dockerimage prerequisite."""
    image = p.f.string(p.obj, "dockerimage", p.path)
    if image is not None or "dockerimage" in p.obj:
        return image
    images: list[str] = p.values["images"]
    if len(images) == 1:
        return images[0]
    p.issues.error(
        p.at("dockerimage"),
        "required",
        "`dockerimage` is required: name the dockerimage prerequisite this task runs in"
        + (f" (one of: {', '.join(images)})" if images else ""),
    )
    return None


_TASK: Table = (
    check(_start_order_elsewhere),
    check(_known_task_keys),
    step("name", _role_name),
    step("output", _output),
    step("script", text("script")),
    step("data", lambda p: _name_list(p.obj, "data", p.path, p.f)),
    step("image", _image),
    step("command", strings("command", required=True, min_items=1)),
    step("env", string_map("env")),
    step("parameters", loose_mapping("parameters")),
    step(
        "min_failed",
        integer("minFailedTaskCount", default=1, allow_null=True),
        null_means("minFailedTaskCount", -1),
    ),
    step("min_succeeded", integer("minSucceededTaskCount", default=-1, allow_null=True)),
    required("resource"),
)
_RESOURCE: Table = (
    known(_RESOURCE_KEYS),
    step("instances", lambda p: _instances(p.obj, p.path, p.f, p.values["job_parameters"])),
    required("resourcePerInstance"),
)
_PER_INSTANCE: Table = (
    known(_PER_INSTANCE_KEYS),
    required("cpu", "memoryMB", "gpu"),
    step("cpu", integer("cpu")),
    step("memory", integer("memoryMB")),
    step("gpu", integer("gpu")),
    step("shm", integer("shmMB")),
)


def _name_list(obj: dict[str, Any], key: str, path: str, f: Fields) -> list[str] | None:
    """A task's `data`: one name, a comma-separated list, or a YAML list."""
    raw = obj.get(key)
    if raw is None:
        return []
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return f.string_list(obj, key, path)


def _instances(res: dict[str, Any], path: str, f: Fields, parameters: dict[str, Any]) -> int | None:
    raw = res.get("instances")
    if isinstance(raw, str):
        match = _PARAMETER_REF.fullmatch(raw.strip())
        if match:
            parameter = match.group(1) or match.group(2)
            value = parameters.get(parameter)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            f.issues.error(
                join(path, "instances"),
                "parameter",
                f"instances refers to parameter {parameter!r}, which "
                + (
                    "is not defined"
                    if parameter not in parameters
                    else f"is not an integer ({describe(value)})"
                ),
            )
            return None
    return f.integer(res, "instances", path, default=1)


FIELDS = _fields()
