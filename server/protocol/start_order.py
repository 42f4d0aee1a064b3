"""Role start order: `extras.paigraph.taskRoles.<role>` says what a role waits for.

OpenPAI has no start order, so it lives where OpenPAI's validator accepts anything (`extras`).
This module reads and checks it, every problem at its path; the wait itself is the job
machine's and the backends' (docs/dialects.md, Start order).
"""

from __future__ import annotations

from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.issues import Issues, join
from server.protocol.model import (
    DEFAULT_DEPENDENCY_TIMEOUT_SECONDS,
    Dependency,
    DependencyPhase,
    Readiness,
    TaskRole,
)

ROLES_KEY = "taskRoles"
_ROLE_KEYS = ("dependsOn", "readiness", "dependencyTimeoutSeconds")
_DEPENDENCY_KEYS = ("role", "when", "instances")
_READINESS_KEYS = ("port", "command", "periodSeconds", "timeoutSeconds", "failureThreshold")
_PHASES = ", ".join(p.value for p in DependencyPhase)
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600


def read_start_order(
    ours: dict[str, Any],
    roles: list[TaskRole],
    issues: Issues,
    *,
    declared: set[str],
    base: str = "extras.paigraph",
) -> list[TaskRole]:
    """The roles with what `ours[taskRoles]` says about their start order, checked. `declared`
    are every role the document names, `roles` those read without error: an entry for a role
    that could not be read is passed over (its own errors say why)."""
    raw = ours.get(ROLES_KEY)
    if raw is None:
        return roles
    f = Fields(issues)
    path = join(base, ROLES_KEY)
    mapping = f.as_mapping(raw, path, "a mapping of task role names to their start order")
    if not mapping:
        return roles
    by_name = {role.name: role for role in roles}
    updates: dict[str, dict[str, Any]] = {}
    dep_paths: dict[str, str] = {}
    for name, entry in mapping.items():
        role_path = join(path, str(name))
        if str(name) in declared and str(name) not in by_name:
            continue
        if str(name) not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            issues.error(
                role_path,
                "unknown-role",
                f"the job has no task role {str(name)!r} (its roles: {known})",
            )
            continue
        obj = f.as_mapping(entry, role_path)
        if obj is None:
            continue
        updates[str(name)] = _read_entry(name, obj, role_path, f, by_name, declared, dep_paths)
    out = [role.model_copy(update=updates.get(role.name, {})) for role in roles]
    _check_dependencies(out, dep_paths, issues, role_base=base)
    return out


def _read_entry(
    name: Any,
    obj: dict[str, Any],
    role_path: str,
    f: Fields,
    by_name: dict[str, TaskRole],
    declared: set[str],
    dep_paths: dict[str, str],
) -> dict[str, Any]:
    """One role's start order: the fields of its TaskRole to update (recording where its
    `dependsOn` was in `dep_paths`)."""
    f.known_keys(obj, role_path, _ROLE_KEYS)
    update: dict[str, Any] = {}
    if "readiness" in obj:
        readiness = _read_readiness(obj["readiness"], join(role_path, "readiness"), f)
        if readiness is not None:
            _check_readiness_port(name, readiness, by_name[str(name)], role_path, f.issues)
            update["readiness"] = readiness
    if "dependsOn" in obj:
        dep_paths[str(name)] = join(role_path, "dependsOn")
        update["depends_on"] = _read_dependencies(
            obj["dependsOn"], dep_paths[str(name)], f, by_name, declared
        )
    timeout = f.integer(
        obj, "dependencyTimeoutSeconds", role_path, default=DEFAULT_DEPENDENCY_TIMEOUT_SECONDS
    )
    if timeout is not None and not 1 <= timeout <= MAX_TIMEOUT_SECONDS:
        f.issues.error(
            join(role_path, "dependencyTimeoutSeconds"),
            "range",
            f"must be between 1 and {MAX_TIMEOUT_SECONDS} seconds, got {timeout}",
        )
    elif timeout is not None:
        update["dependency_timeout_seconds"] = timeout
    return update


def _check_readiness_port(
    name: Any, readiness: Readiness, role: TaskRole, role_path: str, issues: Issues
) -> None:
    """A readiness port must be one of the role's port labels."""
    if readiness.port is None or role.resources.port(readiness.port):
        return
    labels = ", ".join(p.label for p in role.resources.ports)
    issues.error(
        join(role_path, "readiness.port"),
        "unknown-port",
        f"task role {name!r} has no port label {readiness.port!r} (its labels: {labels or 'none'})",
    )


def _read_readiness(raw: Any, path: str, f: Fields) -> Readiness | None:
    obj = f.as_mapping(raw, path, "a mapping with `port` or `command`")
    if obj is None:
        return None
    f.known_keys(obj, path, _READINESS_KEYS)
    port = f.string(obj, "port", path)
    command = f.string_list(obj, "command", path, min_items=1) if "command" in obj else None
    if ("port" in obj) == ("command" in obj):
        f.issues.error(
            path, "one-of", "must say exactly one of `port` (a port label) or `command` (a list)"
        )
        return None
    values: dict[str, Any] = {}
    for key, field, low in (
        ("periodSeconds", "period_seconds", 0.1),
        ("timeoutSeconds", "timeout_seconds", 0.1),
    ):
        if key in obj:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                f.issues.error(join(path, key), "type", f"must be a number, got {describe(value)}")
                return None
            if not low <= value <= 3600:
                f.issues.error(
                    join(path, key), "range", f"must be between {low} and 3600, got {value}"
                )
                return None
            values[field] = float(value)
    threshold = f.integer(obj, "failureThreshold", path, default=3)
    if threshold is not None and threshold < 1:
        f.issues.error(
            join(path, "failureThreshold"), "range", f"must be 1 or more, got {threshold}"
        )
        return None
    if threshold is None or (port is None and command is None):
        return None
    return Readiness(port=port, command=command or [], failure_threshold=threshold, **values)


def _read_dependencies(
    raw: Any, path: str, f: Fields, by_name: dict[str, TaskRole], declared: set[str]
) -> list[Dependency]:
    items = f.as_list(raw, path, min_items=1) or []
    out: list[Dependency] = []
    for i, item in enumerate(items):
        item_path = join(path, i)
        obj = f.as_mapping(item, item_path, "a mapping with `role` and `when`")
        if obj is None:
            continue
        f.known_keys(obj, item_path, _DEPENDENCY_KEYS)
        role = f.string(obj, "role", item_path, required=True)
        when = f.string(obj, "when", item_path, required=True)
        instances = f.integer(obj, "instances", item_path)
        if when is not None and when not in {p.value for p in DependencyPhase}:
            f.issues.error(
                join(item_path, "when"), "enum", f"must be one of {_PHASES}, got {when!r}"
            )
            continue
        if role is None or when is None or ("instances" in obj and instances is None):
            continue
        target = by_name.get(role)
        if target is None and role in declared:
            continue
        if target is None:
            known = ", ".join(sorted(by_name))
            f.issues.error(
                join(item_path, "role"),
                "unknown-role",
                f"the job has no task role {role!r} to wait for (its roles: {known})",
            )
            continue
        if instances is not None and not 1 <= instances <= target.instances:
            f.issues.error(
                join(item_path, "instances"),
                "range",
                f"task role {role!r} has {target.instances} instance(s); must be between 1 and "
                f"{target.instances}, got {instances}",
            )
            continue
        if any(d.role == role for d in out):
            f.issues.error(
                join(item_path, "role"), "duplicate", f"task role {role!r} is waited for twice"
            )
            continue
        out.append(Dependency(role=role, when=DependencyPhase(when), instances=instances))
    return out


def _check_dependencies(
    roles: list[TaskRole], dep_paths: dict[str, str], issues: Issues, *, role_base: str
) -> None:
    """What can never hold: `ready` without a readiness check, `succeeded` on a role whose
    success ends the job, and a cycle."""
    by_name = {role.name: role for role in roles}
    for role in roles:
        for i, dep in enumerate(role.depends_on):
            where = join(dep_paths.get(role.name, ""), i)
            target = by_name[dep.role]
            if dep.when is DependencyPhase.READY and target.readiness is None:
                issues.error(
                    join(where, "when"),
                    "no-readiness",
                    f"task role {dep.role!r} has no readiness check to be ready by; give it one "
                    f"at {join(role_base, ROLES_KEY)}.{dep.role}.readiness "
                    "(`port: <label>` or `command: [...]`)",
                )
            if dep.when is DependencyPhase.SUCCEEDED and target.completion.min_succeeded != -1:
                issues.error(
                    join(where, "when"),
                    "deciding-role",
                    f"task role {dep.role!r} ending successfully ends the job (its "
                    f"minSucceededInstances is {target.completion.min_succeeded}), so "
                    f"{role.name!r} would be stopped as it starts; set "
                    f"taskRoles.{dep.role}.completion.minSucceededInstances: -1",
                )
    cycle = find_cycle(roles)
    if cycle is not None:
        issues.error(
            dep_paths.get(cycle[0], join(role_base, ROLES_KEY)),
            "cycle",
            f"task roles wait for each other in a cycle: {' -> '.join(cycle)}; none could start",
        )


def find_cycle(roles: list[TaskRole]) -> list[str] | None:
    """A cycle of waits, as the roles along it with the first repeated at the end, or None."""
    waits = {role.name: [d.role for d in role.depends_on] for role in roles}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return [*trail[trail.index(name) :], name]
        if name in done:
            return None
        for nxt in waits.get(name, []):
            found = visit(nxt, [*trail, name])
            if found is not None:
                return found
        done.add(name)
        return None

    for role in roles:
        found = visit(role.name, [])
        if found is not None:
            return found
    return None


def start_order_extras(roles: list[TaskRole]) -> dict[str, Any]:
    """`extras.paigraph.taskRoles` for these roles: what `read_start_order` reads back."""
    out: dict[str, Any] = {}
    for role in roles:
        entry: dict[str, Any] = {}
        if role.readiness is not None:
            entry["readiness"] = _readiness_dict(role.readiness)
        if role.depends_on:
            entry["dependsOn"] = [
                {"role": d.role, "when": d.when.value}
                | ({} if d.instances is None else {"instances": d.instances})
                for d in role.depends_on
            ]
            if role.dependency_timeout_seconds != DEFAULT_DEPENDENCY_TIMEOUT_SECONDS:
                entry["dependencyTimeoutSeconds"] = role.dependency_timeout_seconds
        if entry:
            out[role.name] = entry
    return out


def _readiness_dict(readiness: Readiness) -> dict[str, Any]:
    out: dict[str, Any] = (
        {"port": readiness.port} if readiness.port is not None else {"command": readiness.command}
    )
    default = Readiness(port="x")
    for key, field in (
        ("periodSeconds", "period_seconds"),
        ("timeoutSeconds", "timeout_seconds"),
        ("failureThreshold", "failure_threshold"),
    ):
        value = getattr(readiness, field)
        if value != getattr(default, field):
            out[key] = int(value) if isinstance(value, float) and value.is_integer() else value
    return out


def waits_reason(dep: Dependency, instances_of: int) -> str:
    """What a waiting instance says it waits for: `waiting for 2 of 2 ps instances to be
    ready`."""
    wanted = dep.instances if dep.instances is not None else instances_of
    phase = {
        DependencyPhase.RUNNING: "to be running",
        DependencyPhase.READY: "to be ready",
        DependencyPhase.SUCCEEDED: "to succeed",
    }[dep.when]
    return f"waiting for {wanted} of {instances_of} {dep.role} instances {phase}"
