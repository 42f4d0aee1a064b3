"""Rules every dialect shares, applied to the normalised roles with the paths users wrote.

OpenPAI's own schema is the floor; these are the checks where it accepts nonsense (negative
cpu, shm larger than memory, minFailed greater than instances, names that cannot be part of an
environment variable) and the cross-references between roles and prerequisites.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sized
from dataclasses import dataclass, field

from server.protocol.issues import Issues
from server.protocol.model import PortRequest, Prerequisite, PrerequisiteType, TaskRole

ENV_PART = re.compile(r"[A-Za-z0-9_]+")
# Size limits: a job's work in validation, rendering and its instances' environments (each
# instance learns every peer) grows with these, so one submission cannot occupy the server.
# Real configs have a few roles of a few instances (the corpus: at most 2 roles, 4 instances).
MAX_TASK_ROLES = 100  # task roles per job
MAX_INSTANCES = 1000  # instances per task role
MAX_JOB_INSTANCES = 5000  # instances of all task roles together
MAX_CPU = 1024
MAX_MEMORY_MB = 16 * 1024 * 1024
MAX_GPU = 128
MAX_PORTS_PER_LABEL = 100
MAX_RETRIES = 100
MIN_MEMORY_MB = 100

_MARKETPLACE_REF = re.compile(
    r"marketplace://(prerequisites/itemId/[^/@\s]+|name/[^/@\s]+(@[^/\s]+)?)"
)


@dataclass
class RolePaths:
    """Where each canonical field of a role came from in the user's document."""

    name: str
    instances: str
    cpu: str
    memory_mb: str
    gpu: str
    shm_mb: str
    ports: dict[str, str] = field(default_factory=dict)  # label -> path of its count
    port_labels: dict[str, str] = field(default_factory=dict)  # label -> path of the label
    begin_at: dict[str, str] = field(default_factory=dict)  # label -> path of beginAt
    min_failed: str = ""
    min_succeeded: str = ""
    task_retry_count: str = ""
    docker_image: str = ""
    data: str = ""
    script: str = ""
    output: str = ""
    prerequisites: str = ""


def is_reference(value: str) -> bool:
    """A marketplace:// or http(s):// reference, resolved later by the marketplace."""
    return value.startswith(("marketplace://", "http://", "https://"))


def check_reference_form(value: str, path: str, issues: Issues) -> None:
    if value.startswith("marketplace://") and not _MARKETPLACE_REF.fullmatch(value):
        issues.error(
            path,
            "reference",
            f"{value!r} is not a marketplace reference; use "
            "marketplace://prerequisites/itemId/<id> or marketplace://name/<name>[@version]",
        )


def check_role(
    role: TaskRole,
    paths: RolePaths,
    issues: Issues,
    *,
    shm_defaulted: bool,
    completion_rule: str = "",
) -> None:
    """Range and naming rules on one normalised role."""
    if not ENV_PART.fullmatch(role.name):
        issues.error(
            paths.name,
            "env-name",
            f"role name {role.name!r} cannot be part of an environment variable name "
            f"(PAI_TASK_ROLE_<role>_HOST_LIST); use only letters, digits and _",
        )
    _between(role.instances, 1, MAX_INSTANCES, paths.instances, "instances", issues)
    res = role.resources
    _between(res.cpu, 1, MAX_CPU, paths.cpu, "cpu", issues)
    _between(res.memory_mb, MIN_MEMORY_MB, MAX_MEMORY_MB, paths.memory_mb, "memoryMB", issues)
    _between(res.gpu, 0, MAX_GPU, paths.gpu, "gpu", issues)
    if not shm_defaulted:
        if res.shm_mb < 0:
            issues.error(paths.shm_mb, "range", f"shmMB must be 0 or more, got {res.shm_mb}")
        elif res.shm_mb > res.memory_mb >= MIN_MEMORY_MB:
            issues.error(
                paths.shm_mb,
                "shm-exceeds-memory",
                f"shmMB ({res.shm_mb}) must not be larger than memoryMB ({res.memory_mb}): "
                "shared memory counts against the instance's memory",
            )
    for port in res.ports:
        count_path = paths.ports.get(port.label, paths.cpu)
        if not ENV_PART.fullmatch(port.label):
            issues.error(
                paths.port_labels.get(port.label, count_path),
                "env-name",
                f"port label {port.label!r} cannot be part of an environment variable name "
                "(PAI_CONTAINER_HOST_<label>_PORT_LIST); use only letters, digits and _",
            )
        _between(
            port.count, 1, MAX_PORTS_PER_LABEL, count_path, f"port count of {port.label!r}", issues
        )
        if port.begin_at != 0:
            begin_path = paths.begin_at.get(port.label, count_path)
            last = port.begin_at + max(port.count, 1) - 1
            if not 1 <= port.begin_at <= 65535 or last > 65535:
                issues.error(
                    begin_path,
                    "port-range",
                    f"beginAt must be 0 (any free port) or a port from 1 to 65535 that leaves room "
                    f"for {port.count} port(s); got {port.begin_at}",
                )
    for value, path, label in (
        (role.completion.min_failed, paths.min_failed, "minFailed"),
        (role.completion.min_succeeded, paths.min_succeeded, "minSucceeded"),
    ):
        if value != -1 and not 1 <= value <= role.instances:
            too_many = value > role.instances and completion_rule
            issues.error(
                path,
                "completion-range",
                completion_rule
                if too_many
                else f"{label} must be -1 (disabled) or between 1 and the role's "
                f"{role.instances} instance(s), got {value}",
            )
    _between(
        role.task_retry_count, 0, MAX_RETRIES, paths.task_retry_count, "taskRetryCount", issues
    )


def too_many_roles(roles: Sized, path: str, issues: Issues) -> bool:
    """More than MAX_TASK_ROLES roles is an error, reported before any role is read, so a
    document of thousands of roles (cheap to write with YAML aliases) is cheap to refuse."""
    if len(roles) <= MAX_TASK_ROLES:
        return False
    issues.error(
        path,
        "max-items",
        f"a job may have at most {MAX_TASK_ROLES} task roles, got {len(roles)}",
    )
    return True


def check_job_instances(roles: Iterable[TaskRole], path: str, issues: Issues) -> None:
    """All roles' instances together within MAX_JOB_INSTANCES."""
    total = sum(role.instances for role in roles)
    if total > MAX_JOB_INSTANCES:
        issues.error(
            path,
            "range",
            f"the instances of all task roles together must be at most {MAX_JOB_INSTANCES}, "
            f"got {total}",
        )


def _between(value: int, low: int, high: int, path: str, what: str, issues: Issues) -> None:
    if value < low:
        issues.error(path, "range", f"{what} must be at least {low}, got {value}")
    elif value > high:
        issues.error(path, "range", f"{what} must be at most {high}, got {value}")


def check_unique(names: Iterable[tuple[str, str]], issues: Issues, what: str) -> None:
    """Report the second and later uses of a name (name, path pairs in document order)."""
    seen: set[str] = set()
    for name, path in names:
        if name in seen:
            issues.error(path, "duplicate", f"duplicate {what} {name!r}")
        seen.add(name)


def check_role_references(
    role: TaskRole,
    paths: RolePaths,
    prerequisites: list[Prerequisite],
    issues: Issues,
    *,
    extra_names: Iterable[str] = (),
) -> None:
    """Every prerequisite a role names must exist with the right type, or be a reference."""
    by_type: dict[PrerequisiteType, set[str]] = {}
    for p in prerequisites:
        by_type.setdefault(p.type, set()).add(p.name)
    all_names = {p.name for p in prerequisites} | set(extra_names)

    def check(value: str | None, path: str, types: tuple[PrerequisiteType, ...]) -> None:
        if value is None:
            return
        if is_reference(value):
            check_reference_form(value, path, issues)
            return
        if any(value in by_type.get(t, ()) for t in types):
            return
        other = next((p.type for p in prerequisites if p.name == value), None)
        hint = f" ({value} is a {other} prerequisite, not a {types[0]})" if other else ""
        issues.error(path, "unknown-prerequisite", f"Prerequisite {value} does not exist.{hint}")

    check(role.docker_image, paths.docker_image, (PrerequisiteType.DOCKERIMAGE,))
    check(role.data, paths.data, (PrerequisiteType.DATA,))
    check(role.script, paths.script, (PrerequisiteType.SCRIPT,))
    check(role.output, paths.output, (PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE))
    for i, name in enumerate(role.prerequisites):
        path = f"{paths.prerequisites}[{i}]"
        if is_reference(name):
            check_reference_form(name, path, issues)
        elif name not in all_names:
            issues.error(path, "unknown-prerequisite", f"Prerequisite {name} does not exist.")


# The ports every instance gets unless the config asks otherwise; models are frozen, so every
# role shares these two instead of validating two new ones.
_DEFAULT_PORTS = tuple(PortRequest(label=label) for label in ("ssh", "http"))


def add_default_ports(ports: list[PortRequest]) -> list[PortRequest]:
    """Every instance gets one `ssh` and one `http` port unless the config asks otherwise."""
    labels = {p.label for p in ports}
    extra = [port for port in _DEFAULT_PORTS if port.label not in labels]
    return [*ports, *extra]
