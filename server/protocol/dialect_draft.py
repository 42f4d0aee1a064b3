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
    PrerequisiteType,
    Resources,
    TaskRole,
)
from server.protocol.port_list import PORT_KEYS, read_port_list
from server.protocol.prerequisites import DRAFT_NAME, DRAFT_NAME_RULE, read_prerequisite_list
from server.protocol.prerequisites import FIELDS as PREREQUISITE_FIELDS
from server.protocol.rules import (
    MAX_RETRIES,
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
    job, base = doc, ""
    prerequisites_raw: list[tuple[Any, str]] = []
    if "job" in doc and "tasks" not in doc:
        f.known_keys(doc, "", _WRAPPER_KEYS)
        job = f.as_mapping(doc["job"], "job") or {}
        base = "job"
        prerequisites_raw += _raw_list(doc, "prerequisites", "", f)
    prerequisites_raw += _raw_list(job, "prerequisites", base, f)
    f.known_keys(
        job,
        base,
        _JOB_KEYS,
        hints={
            "taskRoles": "the draft dialect lists roles under `tasks`",
            "protocolVersion": "the draft dialect spells it `protocol_version`",
        },
    )
    f.required(job, base, ("type", "tasks"))
    name = f.string(
        job, "name", base, required=True, pattern=DRAFT_NAME, rule=DRAFT_NAME_RULE, max_length=255
    )
    if "type" in job and job["type"] != "job":
        issues.error(join(base, "type"), "enum", f"must be 'job', got {describe(job['type'])}")
    version = f.string(job, "version", base, allow_number=True)
    contributor = f.string(job, "contributor", base)
    description = f.string(job, "description", base)
    virtual_cluster = f.string(job, "virtualCluster", base) or "default"
    retry = f.integer(job, "retryCount", base, default=0)
    if retry is not None and not -2 <= retry <= MAX_RETRIES:
        issues.error(
            join(base, "retryCount"),
            "range",
            f"must be -2 (always retry), -1 (retry failures without limit) or 0 to "
            f"{MAX_RETRIES}, got {retry}",
        )
    if "killAllOnCompletedTaskNumber" in job:
        issues.warn(
            join(base, "killAllOnCompletedTaskNumber"),
            "obsolete",
            "killAllOnCompletedTaskNumber is obsolete and ignored; use minSucceededTaskCount",
        )
    parameters = job.get("parameters") or {}
    if f.as_mapping(parameters, join(base, "parameters")) is None:
        parameters = {}
    parameters = {**parameters, **overrides}

    prerequisites = read_prerequisite_list(prerequisites_raw, f, Dialect.DRAFT)
    images = [p.name for p in prerequisites if p.type is PrerequisiteType.DOCKERIMAGE]
    if not prerequisites_raw and "prerequisites" not in job:
        issues.error(
            join(base, "prerequisites"),
            "required",
            "`prerequisites` is required: list at least the dockerimage the tasks run in",
        )

    roles: list[TaskRole] = []
    names: list[tuple[str, str]] = []
    tasks_path = join(base, "tasks")
    tasks = f.as_list(job["tasks"], tasks_path, min_items=1) if "tasks" in job else None
    if tasks and too_many_roles(tasks, tasks_path, issues):
        tasks = None
    for i, raw in enumerate(tasks or []):
        before = issues.error_count()
        read = _read_task(join(tasks_path, i), raw, f, parameters, images)
        if read is None:
            issues.ensure_error(before, join(tasks_path, i), "this task")
            continue
        role, paths, shm_defaulted = read
        names.append((role.name, paths.name))
        roles.append(role)
        check_role(role, paths, issues, shm_defaulted=shm_defaulted)
        check_role_references(role, paths, prerequisites, issues)
    check_job_instances(roles, tasks_path, issues)
    check_unique(names, issues, "task role name")
    if issues.has_errors() or name is None:
        return None
    return JobSpec(
        dialect=Dialect.DRAFT,
        name=name,
        version=version,
        contributor=contributor,
        description=description,
        virtual_cluster=virtual_cluster,
        retry_count=retry or 0,
        parameters=parameters,
        prerequisites=prerequisites,
        task_roles=roles,
        source=mask_secrets(source, doc),
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
) -> tuple[TaskRole, RolePaths, bool] | None:
    obj = f.as_mapping(raw, path)
    if obj is None:
        return None
    for key in START_ORDER_FIELDS:
        if key in obj:
            f.issues.warn(join(path, key), IGNORED, start_order_elsewhere(key))
    f.known_keys(
        {k: v for k, v in obj.items() if k not in START_ORDER_FIELDS},
        path,
        _TASK_KEYS,
        hints={"commands": "the draft dialect uses `command`"},
    )
    role_key = "role" if "role" in obj or "name" not in obj else "name"
    if "role" in obj and "name" in obj:
        f.issues.error(join(path, "name"), "conflict", "give the task's role name once, as `role`")
    name = f.string(obj, role_key, path, required=True, pattern=ROLE_NAME, rule=ROLE_NAME_RULE)
    if "storage" in obj and "output" in obj:
        f.issues.error(
            join(path, "output"), "conflict", "name either a `storage` or an `output`, not both"
        )
    output_key = "output" if "output" in obj else "storage"
    output = f.string(obj, output_key, path)
    script = f.string(obj, "script", path)
    data_names = _name_list(obj, "data", path, f)
    image = f.string(obj, "dockerimage", path)
    if image is None and "dockerimage" not in obj:
        if len(images) == 1:
            image = images[0]
        else:
            f.issues.error(
                join(path, "dockerimage"),
                "required",
                "`dockerimage` is required: name the dockerimage prerequisite this task runs in"
                + (f" (one of: {', '.join(images)})" if images else ""),
            )
    command = f.string_list(obj, "command", path, required=True, min_items=1)
    env = f.string_map(obj, "env", path)
    task_parameters = obj.get("parameters") or {}
    if f.as_mapping(task_parameters, join(path, "parameters")) is None:
        task_parameters = {}
    min_failed = f.integer(obj, "minFailedTaskCount", path, default=1, allow_null=True)
    if "minFailedTaskCount" in obj and obj["minFailedTaskCount"] is None:
        min_failed = -1
    min_succeeded = f.integer(obj, "minSucceededTaskCount", path, default=-1, allow_null=True)

    res_path = join(path, "resource")
    f.required(obj, path, ("resource",))
    res = f.as_mapping(obj["resource"], res_path) if "resource" in obj else None
    per_path = join(res_path, "resourcePerInstance")
    paths = RolePaths(
        name=join(path, role_key),
        instances=join(res_path, "instances"),
        cpu=join(per_path, "cpu"),
        memory_mb=join(per_path, "memoryMB"),
        gpu=join(per_path, "gpu"),
        shm_mb=join(per_path, "shmMB"),
        min_failed=join(path, "minFailedTaskCount"),
        min_succeeded=join(path, "minSucceededTaskCount"),
        task_retry_count=path,
        docker_image=join(path, "dockerimage"),
        data=join(path, "data"),
        script=join(path, "script"),
        output=join(path, output_key),
        prerequisites=join(path, "data"),
    )
    if res is None:
        return None
    f.known_keys(res, res_path, _RESOURCE_KEYS)
    instances = _instances(res, res_path, f, parameters)
    f.required(res, res_path, ("resourcePerInstance",))
    per = (
        f.as_mapping(res["resourcePerInstance"], per_path) if "resourcePerInstance" in res else None
    )
    if per is None:
        return None
    f.known_keys(per, per_path, _PER_INSTANCE_KEYS)
    f.required(per, per_path, ("cpu", "memoryMB", "gpu"))
    cpu, memory, gpu = (f.integer(per, k, per_path) for k in ("cpu", "memoryMB", "gpu"))
    shm = f.integer(per, "shmMB", per_path)
    ports = read_port_list(res, res_path, f, paths, count_required=True)
    values = (
        name,
        image,
        command,
        env,
        data_names,
        instances,
        cpu,
        memory,
        gpu,
        min_failed,
        min_succeeded,
        ports,
    )
    if any(v is None for v in values) or (shm is None and per.get("shmMB") is not None):
        return None
    assert name is not None and image is not None and command is not None and memory is not None
    assert data_names is not None and ports is not None
    role = TaskRole(
        name=name,
        instances=instances or 0,
        docker_image=image,
        data=data_names[0] if data_names else None,
        script=script,
        output=output,
        prerequisites=data_names[1:],
        env=env or {},
        parameters=task_parameters,
        resources=Resources(
            cpu=cpu or 0,
            memory_mb=memory,
            gpu=gpu or 0,
            shm_mb=min(DEFAULT_SHM_MB, memory) if shm is None else shm,
            ports=add_default_ports(ports),
        ),
        completion=Completion(min_failed=min_failed or 0, min_succeeded=min_succeeded or 0),
        commands=command,
    )
    return role, paths, shm is None


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
