"""The PAI_* environment of one task instance, and the shell file that carries it.

Instances find each other only through these variables, so their names and formats follow what
user code already reads (docs/runtime-environment.md, with the two deliberate differences from
OpenPAI on Kubernetes: role names as written, `PAI_JOB_NAME` the plain job name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from backends.base import (
    DEFAULT_FS_URI,
    WORK_DIR,
    LaunchRequest,
    Placement,
    PortRequest,
    RoleLaunch,
)

DEFAULT_PORT_LABELS = ("ssh", "http")  # every instance gets one of each unless the role asks
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def port_requests(role: RoleLaunch) -> list[PortRequest]:
    """The ports an instance of `role` is given: its own labels, then `ssh` and `http`.

    OpenPAI adds one `ssh` and one `http` port to every task unless the role names them itself;
    `PAI_CONTAINER_SSH_PORT` and the `HOST_LIST` variables rely on them.
    """
    wanted = list(role.resources.ports)
    named = {p.label for p in wanted}
    wanted += [PortRequest(label=label) for label in DEFAULT_PORT_LABELS if label not in named]
    return wanted


def runtime_env(
    request: LaunchRequest,
    placements: Mapping[tuple[str, int], Placement],
    role: str,
    index: int,
    *,
    work_dir: str = WORK_DIR,
) -> dict[str, str]:
    """Every PAI_* variable of instance `role`-`index`, then the job's and the role's own env.

    `placements` must hold every instance of the attempt, since each learns its peers'
    addresses and ports. The order is stable and `request.env` and the role's `env` come last,
    overriding what is before them. ValueError when the instance or a placement is missing.
    """
    current = _find_role(request, role)
    if not 0 <= index < current.instances:
        raise ValueError(
            f"role {role!r} has {current.instances} instance(s); there is no index {index}"
        )
    for r in request.roles:
        _check_placements(r, placements)

    env: dict[str, str] = {}
    env.update(_job_variables(request))
    env["PAI_CURRENT_TASK_ROLE_NAME"] = current.name
    env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] = str(index)
    env["PAI_TASK_INDEX"] = str(index)
    env.update(_runtime_variables(request, placements, current.name, index))
    env.update(_compat_variables(request, current, index))
    env["PAI_WORK_DIR"] = work_dir
    env.update(request.env)
    env.update(current.env)
    return env


def shell_env_file(env: Mapping[str, str]) -> str:
    """A file of `export K='V'` lines that `. file` in any POSIX shell turns back into `env`.

    Values are single-quoted, so nothing in them is expanded; a `'` becomes `'\\''` and newlines
    are kept as they are. Names a shell cannot export are left out with a comment line (the
    container's own environment still has them). A NUL byte cannot be in an environment
    variable at all and is refused with ValueError.
    """
    lines = ["# PAI runtime environment of this task instance; read it with: . runtime_env.sh"]
    for key, value in env.items():
        if "\0" in key or "\0" in value:
            raise ValueError(f"environment variable {key!r} contains a NUL byte")
        if _SHELL_NAME.fullmatch(key):
            lines.append(f"export {key}={_single_quote(value)}")
        else:
            shown = key.encode("unicode_escape").decode("ascii")
            lines.append(f"# not exported, not a shell variable name: {shown}")
    return "\n".join(lines) + "\n"


def _single_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _find_role(request: LaunchRequest, name: str) -> RoleLaunch:
    for candidate in request.roles:
        if candidate.name == name:
            return candidate
    known = ", ".join(r.name for r in request.roles)
    raise ValueError(f"job {request.job_name!r} has no task role {name!r} (roles: {known})")


def _check_placements(role: RoleLaunch, placements: Mapping[tuple[str, int], Placement]) -> None:
    """Every instance of `role` is placed and has the ports the role asks for."""
    for index in range(role.instances):
        placement = placements.get((role.name, index))
        where = f"{role.name}-{index}"
        if placement is None:
            raise ValueError(f"no placement for instance {where}")
        for port in port_requests(role):
            got = placement.ports.get(port.label)
            if got is None:
                raise ValueError(f"placement of {where} has no ports for label {port.label!r}")
            if len(got) != port.count:
                raise ValueError(
                    f"placement of {where} has {len(got)} port(s) for label {port.label!r},"
                    f" the role asks for {port.count}"
                )


def _port_lists(role: RoleLaunch, placement: Placement) -> dict[str, str]:
    """label -> "p1,p2": the role's labels in request order, then any others the backend gave."""
    order = [p.label for p in port_requests(role)]
    order += [label for label in placement.ports if label not in order]
    return {label: ",".join(str(p) for p in placement.ports[label]) for label in order}


def _job_variables(request: LaunchRequest) -> dict[str, str]:
    """What OpenPAI's rest-server gives every container of the job, in its order."""
    names = ",".join(r.name for r in request.roles)
    roles = str(len(request.roles))
    tasks = str(request.total_instances)
    env = {
        "PAI_FRAMEWORK_NAME": f"{request.user}~{request.job_name}",
        "PAI_JOB_NAME": request.job_name,
        "PAI_USER_NAME": request.user,
        "PAI_DEFAULT_FS_URI": DEFAULT_FS_URI,
        "PAI_TASK_ROLE_COUNT": roles,
        "PAI_TASK_ROLE_LIST": names,
        "PAI_VIRTUAL_CLUSTER": request.virtual_cluster,
        "PAI_JOB_VC_NAME": request.virtual_cluster,
    }
    for r in request.roles:
        res = r.resources
        env[f"PAI_TASK_ROLE_TASK_COUNT_{r.name}"] = str(r.instances)
        env[f"PAI_RESOURCE_{r.name}"] = f"{res.gpu},{res.cpu},{res.memory_mb},{res.shm_mb}"
        env[f"PAI_MIN_FAILED_TASK_COUNT_{r.name}"] = str(r.min_failed)
        env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{r.name}"] = str(r.min_succeeded)
    env |= {
        "PAI_USERNAME": request.user,
        "PAI_TASKS_NUM": tasks,
        "PAI_JOB_TASK_COUNT": tasks,
        "PAI_TASK_ROLES_NUM": roles,
        "PAI_JOB_TASK_ROLE_COUNT": roles,
        "PAI_JOB_TASK_ROLE_LIST": names,
    }
    return env


def _runtime_variables(
    request: LaunchRequest,
    placements: Mapping[tuple[str, int], Placement],
    current_role: str,
    current_index: int,
) -> dict[str, str]:
    """Addresses and ports of every instance, in the order the OpenPAI runtime writes them."""
    env: dict[str, str] = {}
    instances: list[str] = []
    for r in request.roles:
        hosts: list[str] = []
        for index in range(r.instances):
            placement = placements[(r.name, index)]
            ports = _port_lists(r, placement)
            instances.append(f"{r.name}:{index}")
            for label, value in ports.items():
                env[f"PAI_PORT_LIST_{r.name}_{index}_{label}"] = value
                env[f"PAI_{r.name}_{index}_{label}_PORT"] = value
            ip = placement.host_ip
            http = str(placement.ports["http"][0])
            env[f"PAI_HOST_IP_{r.name}_{index}"] = ip
            hosts.append(f"{ip}:{http}")
            if r.name == current_role and index == current_index:
                env.update(_own_address(r, placement))
        env[f"PAI_TASK_ROLE_{r.name}_HOST_LIST"] = ",".join(hosts)
    env["PAI_TASK_ROLE_INSTANCES"] = ",".join(instances)
    return env


def _own_address(role: RoleLaunch, placement: Placement) -> dict[str, str]:
    """The current instance's own address and ports."""
    ports = _port_lists(role, placement)
    ip = placement.host_ip
    http = str(placement.ports["http"][0])
    env = {
        "PAI_CURRENT_CONTAINER_IP": ip,
        "PAI_CURRENT_CONTAINER_PORT": http,
        "PAI_CONTAINER_HOST_IP": ip,
        "PAI_CONTAINER_HOST_PORT": http,
        "PAI_CONTAINER_SSH_PORT": str(placement.ports["ssh"][0]),
    }
    for label, value in ports.items():
        env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] = value
    env["PAI_CONTAINER_HOST_PORT_LIST"] = "".join(
        f"{label}:{value};" for label, value in ports.items()
    )
    return env


def instance_variables(role: RoleLaunch, index: int, placement: Placement) -> dict[str, str]:
    """The PAI_* variables in which instances of one role differ: their index, own address
    and own ports. Instance `index`'s environment is instance 0's with these in place (and
    the job's and role's own env over them, as always), so a backend with many instances
    builds the rest once: runtime_env(..., role, 0) | instance_variables(role, i, ...)."""
    return {
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_INDEX": str(index),
        **_own_address(role, placement),
        "PAI_TASK_ROLE_INDEX": str(index),
    }


def _compat_variables(request: LaunchRequest, role: RoleLaunch, index: int) -> dict[str, str]:
    """The current role's names from the seeds' tables and the v1 (YARN) era."""
    res = role.resources
    position = next(i for i, r in enumerate(request.roles) if r.name == role.name)
    return {
        "PAI_CURRENT_TASK_ROLE_TASK_COUNT": str(role.instances),
        "PAI_CURRENT_TASK_ROLE_CPU_COUNT": str(res.cpu),
        "PAI_CURRENT_TASK_ROLE_MEM_MB": str(res.memory_mb),
        "PAI_CURRENT_TASK_ROLE_SHM_MB": str(res.shm_mb),
        "PAI_CURRENT_TASK_ROLE_GPU_COUNT": str(res.gpu),
        "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT": str(role.min_failed),
        "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT": str(role.min_succeeded),
        "PAI_TASK_ROLE_NAME": role.name,
        "PAI_TASK_ROLE_NUM": str(role.instances),  # v1: instances of the current role
        "PAI_TASK_ROLE_NO": str(position),  # v1: position of the current role in the config
        "PAI_TASK_ROLE_INDEX": str(index),  # v1: index of this task within its role
        "PAI_TASK_CPU_NUM": str(res.cpu),
        "PAI_TASK_MEM_MB": str(res.memory_mb),
        "PAI_TASK_GPU_NUM": str(res.gpu),
    }
