"""OpenPAI v1 JSON: `jobName`, one `image`, a `taskRoles` list (reference/protocol_v2.md section 8).

Normalised the way OpenPAI's own v1-to-v2 converter did it: the image, dataDir, outputDir and
codeDir become prerequisites named `default`, `jobEnvs` become parameters and exported
environment variables, and each role's `portList` keeps its `beginAt`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from server.protocol.fields import Fields
from server.protocol.ignored import ANY_OTHER, EXTRAS_FIELDS, IGNORED, extras_warnings
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
    KILL_ALL_OBSOLETE,
    Place,
    RoleRead,
    Table,
    all_read,
    check,
    image_name,
    integer,
    known,
    mapping,
    null_means,
    read_roles,
    read_table,
    required,
    retry_range,
    step,
    string_map,
    text,
)
from server.protocol.port_list import PORT_KEYS, read_port_list
from server.protocol.rules import (
    RolePaths,
    add_default_ports,
    check_job_instances,
    check_role,
    check_unique,
    too_many_roles,
)
from server.protocol.secrets import mask_secrets

JOB_NAME = re.compile(r"[A-Za-z0-9\-._]+")
JOB_NAME_RULE = "must match ^[A-Za-z0-9-._]+$ (letters, digits and -._)"
ROLE_NAME = re.compile(r"[A-Za-z0-9._~]+")
ROLE_NAME_RULE = "must match ^[A-Za-z0-9._~]+$"
MIN_COUNT_MESSAGE = (
    "minFailedTaskCount or minSucceededTaskCount should not be greater than tasks number."
)
DEFAULT_SHM_MB = 64

_TOP_KEYS = (
    "jobName",
    "image",
    "authFile",
    "dataDir",
    "outputDir",
    "codeDir",
    "taskRoles",
    "gpuType",
    "killAllOnCompletedTaskNumber",
    "virtualCluster",
    "retryCount",
    "jobEnvs",
    "extras",
)
_ROLE_KEYS = (
    "name",
    "taskNumber",
    "cpuNumber",
    "memoryMB",
    "shmMB",
    "gpuNumber",
    "portList",
    "command",
    "minFailedTaskCount",
    "minSucceededTaskCount",
)
# The role's numbers and their defaults.
_NUMBERS = {"taskNumber": 1, "cpuNumber": 1, "memoryMB": 100, "gpuNumber": 0}
_DIR_VARIABLES = (
    ("dataDir", "PAI_DATA_DIR", PrerequisiteType.DATA),
    ("outputDir", "PAI_OUTPUT_DIR", PrerequisiteType.OUTPUT),
    ("codeDir", "PAI_CODE_DIR", PrerequisiteType.SCRIPT),
)


def read_v1(doc: dict[str, Any], issues: Issues, source: str) -> JobSpec | None:
    f = _V1Fields(issues)
    job = read_table(_JOB, f, doc, "")
    prerequisites, job_env = _prerequisites_and_env(doc, job["image"], job["env"])
    names: list[tuple[str, str]] = []

    def accept(role: TaskRole, paths: RolePaths, shm_defaulted: bool) -> TaskRole:
        names.append((role.name, paths.name))
        check_role(
            role, paths, issues, shm_defaulted=shm_defaulted, completion_rule=MIN_COUNT_MESSAGE
        )
        return role

    roles = read_roles(
        _role_entries(doc, f),
        lambda _index, path, raw: _read_role(path, raw, f, prerequisites),
        accept,
        issues,
        "this task role",
    )
    check_job_instances(roles, "taskRoles", issues)
    check_unique(names, issues, "task role name")
    if issues.has_errors() or job["name"] is None:
        return None
    return JobSpec(
        dialect=Dialect.V1,
        name=job["name"],
        virtual_cluster=doc.get("virtualCluster") or "default",
        retry_count=job["retry"] or 0,
        gpu_type=doc.get("gpuType") or None,
        auth_file=doc.get("authFile") or None,
        parameters=dict(job["env"] or {}),
        prerequisites=prerequisites,
        task_roles=roles,
        env=job_env,
        extras=job["extras"],
        source=mask_secrets(source, doc),
    )


def _gpu_type_ignored(p: Place) -> None:
    if isinstance(p.obj.get("gpuType"), str) and p.obj["gpuType"]:
        p.issues.warn(
            "gpuType",
            IGNORED,
            "`gpuType` picks a GPU model on OpenPAI; paigraph's nodes have no GPU models, so the "
            "job is placed on any node with enough GPUs",
        )


def _rdma_ignored(env: dict[str, str] | None, p: Place) -> dict[str, str] | None:
    if env and "paiAzRDMA" in env:
        p.issues.warn(
            "jobEnvs.paiAzRDMA",
            IGNORED,
            "`paiAzRDMA` gave the container Azure's RDMA devices on OpenPAI; paigraph gives none "
            "(the variable is still exported as written)",
        )
    return env


def _extras_warned(extras: dict[str, Any], p: Place) -> dict[str, Any]:
    extras_warnings(extras, p.issues, v1=True)
    return extras


_JOB: Table = (
    required("taskRoles"),
    known(_TOP_KEYS),
    step(
        "name",
        text("jobName", required=True, pattern=JOB_NAME, rule=JOB_NAME_RULE, max_length=255),
    ),
    step("image", text("image", required=True), image_name("image")),
    *(check(text(key)) for key in ("authFile", "gpuType", "virtualCluster")),
    *(check(text(key)) for key, _, _ in _DIR_VARIABLES),
    KILL_ALL_OBSOLETE,
    step("retry", integer("retryCount", default=0, numeric_strings=True), retry_range),
    check(_gpu_type_ignored),
    step("env", string_map("jobEnvs"), _rdma_ignored),
    step("extras", mapping("extras"), _extras_warned),
)


def _prerequisites_and_env(
    doc: dict[str, Any], image: str | None, env: dict[str, str] | None
) -> tuple[list[Prerequisite], dict[str, str]]:
    """The image and the directories as prerequisites named `default`, and the job's
    environment with each directory's variable, as OpenPAI's converter made them."""
    prerequisites: list[Prerequisite] = []
    if image:
        prerequisites.append(
            Prerequisite(name="default", type=PrerequisiteType.DOCKERIMAGE, uri=[image])
        )
    job_env = dict(env or {})
    for key, variable, type_ in _DIR_VARIABLES:
        value = doc.get(key)
        if isinstance(value, str) and value:
            prerequisites.append(Prerequisite(name="default", type=type_, uri=[value]))
            job_env[variable] = value
    return prerequisites, job_env


def _role_entries(doc: dict[str, Any], f: Fields) -> list[tuple[int, str, Any]]:
    """The `taskRoles` list's items as (index, path, raw); none when it is not a list, is
    empty, or has too many roles to read."""
    items = f.as_list(doc["taskRoles"], "taskRoles", min_items=1) if "taskRoles" in doc else None
    if items and too_many_roles(items, "taskRoles", f.issues):
        items = None
    return [(i, join("taskRoles", i), raw) for i, raw in enumerate(items or [])]


def _fields() -> dict[str, frozenset[str]]:
    """Every field this dialect reads, by place (`[]` a list's items, `*` any other key)."""
    places = {
        "": _TOP_KEYS,
        "jobEnvs": ("paiAzRDMA", ANY_OTHER),
        "extras": (*EXTRAS_FIELDS, ANY_OTHER),
        "taskRoles[]": _ROLE_KEYS,
        "taskRoles[].portList[]": PORT_KEYS,
    }
    return {place: frozenset(keys) for place, keys in places.items()}


class _V1Fields(Fields):
    """v1 reported unknown keys the Joi way: `"x" is not allowed`."""

    def known_keys(
        self,
        obj: dict[str, Any],
        path: str,
        allowed: Collection[str],
        hints: dict[str, str] | None = None,
    ) -> None:
        for key in obj:
            if key not in allowed:
                self.issues.error(
                    join(path, str(key)),
                    "unknown-field",
                    f'"{key}" is not allowed; allowed: {", ".join(allowed)}',
                )


def _read_role(
    path: str, raw: Any, f: Fields, prerequisites: list[Prerequisite]
) -> RoleRead | None:
    obj = f.as_mapping(raw, path)
    if obj is None:
        return None
    paths = _role_paths(path)
    values = read_table(_ROLE, f, obj, path, {"paths": paths})
    if not _all_read(values) or (values["shm"] is None and obj.get("shmMB") is not None):
        return None
    return _role(values, prerequisites), paths, values["shm"] is None


# Whether a role has what it needs to be one (the shm size may be left out).
_all_read = all_read("name", "command", "ports", "min_failed", "min_succeeded", *_NUMBERS)


def _role(values: dict[str, Any], prerequisites: list[Prerequisite]) -> TaskRole:
    memory, shm = values["memoryMB"], values["shm"]
    return TaskRole(
        name=values["name"],
        instances=values["taskNumber"] or 0,
        docker_image="default",
        data="default" if _has(prerequisites, PrerequisiteType.DATA) else None,
        script="default" if _has(prerequisites, PrerequisiteType.SCRIPT) else None,
        output="default" if _has(prerequisites, PrerequisiteType.OUTPUT) else None,
        resources=Resources(
            cpu=values["cpuNumber"] or 0,
            memory_mb=memory,
            gpu=values["gpuNumber"] or 0,
            shm_mb=min(DEFAULT_SHM_MB, memory) if shm is None else shm,
            ports=add_default_ports(values["ports"]),
        ),
        completion=Completion(
            min_failed=values["min_failed"] or 0, min_succeeded=values["min_succeeded"] or 0
        ),
        commands=[values["command"]],
    )


def _role_paths(path: str) -> RolePaths:
    return RolePaths(
        name=f"{path}.name",
        instances=f"{path}.taskNumber",
        cpu=f"{path}.cpuNumber",
        memory_mb=f"{path}.memoryMB",
        gpu=f"{path}.gpuNumber",
        shm_mb=f"{path}.shmMB",
        min_failed=f"{path}.minFailedTaskCount",
        min_succeeded=f"{path}.minSucceededTaskCount",
        task_retry_count=path,
    )


def _command_not_blank(command: str | None, p: Place) -> str | None:
    if command is not None and not command.strip():
        p.issues.error(p.at("command"), "empty", "command must not be empty")
    return command


def _has(prerequisites: list[Prerequisite], type_: PrerequisiteType) -> bool:
    return any(p.type == type_ for p in prerequisites)


_ROLE: Table = (
    known(_ROLE_KEYS),
    step("name", text("name", required=True, pattern=ROLE_NAME, rule=ROLE_NAME_RULE)),
    *(
        step(key, integer(key, default=default, numeric_strings=True))
        for key, default in _NUMBERS.items()
    ),
    step("shm", integer("shmMB", numeric_strings=True)),
    # v1 semantics: an explicit null disables the rule; minSucceeded is off by default.
    step(
        "min_failed",
        integer("minFailedTaskCount", default=1, allow_null=True, numeric_strings=True),
        null_means("minFailedTaskCount", -1),
    ),
    step(
        "min_succeeded",
        integer("minSucceededTaskCount", default=-1, allow_null=True, numeric_strings=True),
    ),
    step("command", text("command", required=True), _command_not_blank),
    step(
        "ports",
        lambda p: read_port_list(
            p.obj, p.path, p.f, p.values["paths"], count_required=False, numeric_strings=True
        ),
    ),
)


FIELDS = _fields()
