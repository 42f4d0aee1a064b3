"""The dry run's answer: a job after validation and rendering, as it would be launched.

Each instance shows the environment it would get. Nothing is placed in a dry run, so addresses
and ports are placeholders: an instance's host IP is its name (`worker-0`, which is also its
DNS alias on the simulator's network) and ports are numbered from `PLACEHOLDER_PORT_BASE` in
the order the backend would allocate them (a v1 `beginAt` port is used as given).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import strawberry

from backends.base import LaunchRequest, Placement
from backends.runtime_env import port_requests, runtime_env
from server.api.jobs.types import (
    PortAllocation,
    Prerequisite,
    Resource,
    UserError,
    role_prerequisites,
)
from server.jobs.launch import NotRunnable, launch_request
from server.protocol import JobSpec, to_v2_yaml
from server.protocol.model import TaskRole

PLACEHOLDER_PORT_BASE = 20000
SHOWN_ENVIRONMENTS = 100  # instances of one dry run whose environment is built
PLACEHOLDER_JOB_ID = "dry-run"

_PLACEHOLDER_NOTE = (
    "Placeholders: nothing is placed in a dry run, so the host IP is the instance's name "
    f"(role-index) and ports are illustrative, numbered from {PLACEHOLDER_PORT_BASE} "
    "(a v1 beginAt port as given); a running instance gets real ones."
)


@strawberry.type
class EnvironmentVariable:
    name: str
    value: str


@strawberry.type(
    description="One instance of a resolved job, as it would start. " + _PLACEHOLDER_NOTE
)
class ResolvedInstance:
    index: int
    host_ip: str = strawberry.field(description="A placeholder: the instance's name.")
    ports: list[PortAllocation] = strawberry.field(
        description="Placeholder ports per label, from an illustrative range."
    )
    build_environment: strawberry.Private[Callable[[], dict[str, str]]]

    @strawberry.field(
        description="The PAI_* variables and the job's and role's own env, in order, with "
        "placeholder addresses and ports. Secrets are not part of it. Shown for the first "
        f"{SHOWN_ENVIRONMENTS} instances of the job (each names every peer, so all of a large "
        "job's would be the square of its size); empty for the others, with a warning."
    )
    def environment(self) -> list[EnvironmentVariable]:
        return [EnvironmentVariable(name=k, value=v) for k, v in self.build_environment().items()]


@strawberry.type(description="A task role of a resolved (not yet submitted) job.")
class ResolvedTaskRole:
    name: str
    instance_count: int
    resource_per_instance: Resource
    commands: list[str]
    docker_image: str = strawberry.field(description="The docker image prerequisite's name.")
    prerequisites: list[Prerequisite]
    min_failed_instances: int
    min_succeeded_instances: int
    task_retry_count: int
    instances: list[ResolvedInstance]


@strawberry.type(description="A job after validation and parameter rendering, before it runs.")
class ResolvedJob:
    name: str
    dialect: str
    virtual_cluster: str
    retry_count: int
    task_roles: list[ResolvedTaskRole]
    config: str = strawberry.field(description="The job as canonical OpenPAI protocol v2 YAML.")


def placeholder_placements(request: LaunchRequest) -> dict[tuple[str, int], Placement]:
    """Every instance placed on a pretend node, with ports from the illustrative range."""
    placements: dict[tuple[str, int], Placement] = {}
    next_port = PLACEHOLDER_PORT_BASE
    for role in request.roles:
        for index in range(role.instances):
            ports: dict[str, list[int]] = {}
            for wanted in port_requests(role):
                if wanted.begin_at > 0:
                    ports[wanted.label] = list(
                        range(wanted.begin_at, wanted.begin_at + wanted.count)
                    )
                else:
                    ports[wanted.label] = list(range(next_port, next_port + wanted.count))
                    next_port += wanted.count
            placements[(role.name, index)] = Placement(
                node="<node>", host_ip=f"{role.name}-{index}", ports=ports
            )
    return placements


def _instances(
    request: LaunchRequest | None,
    placements: dict[tuple[str, int], Placement],
    role: TaskRole,
    first_position: int,
) -> list[ResolvedInstance]:
    """The role's instances; the environment of those among the job's first
    SHOWN_ENVIRONMENTS is built when a query asks for it, the others have none."""
    result = []
    for index in range(role.instances):
        placement = placements.get((role.name, index))
        shown = request is not None and first_position + index < SHOWN_ENVIRONMENTS
        result.append(
            ResolvedInstance(
                index=index,
                host_ip=f"{role.name}-{index}",
                ports=PortAllocation.from_mapping(placement.ports if placement else {}),
                build_environment=(
                    partial(runtime_env, request, placements, role.name, index)
                    if shown and request is not None
                    else dict
                ),
            )
        )
    return result


def _first_positions(spec: JobSpec) -> list[int]:
    """Where each role's first instance stands in the job's order of instances."""
    positions, total = [], 0
    for role in spec.task_roles:
        positions.append(total)
        total += role.instances
    return positions


def resolved_job(
    spec: JobSpec, *, user: str, default_fs: str = ""
) -> tuple[ResolvedJob, list[UserError]]:
    """The ResolvedJob of `spec`, and warnings when the environment cannot be shown (a role
    whose image is a reference the dry run does not follow). `default_fs`: the backend's
    default file system (PAI_DEFAULT_FS_URI)."""
    warnings: list[UserError] = []
    request: LaunchRequest | None
    try:
        request = launch_request(spec, job_id=PLACEHOLDER_JOB_ID, user=user, default_fs=default_fs)
    except NotRunnable as exc:
        request = None
        warnings.append(
            UserError(
                path=exc.path.split("."),
                code="not-runnable",
                message=f"{exc.message}; the instances' environment is not shown",
            )
        )
    placements = placeholder_placements(request) if request is not None else {}
    total = sum(role.instances for role in spec.task_roles)
    if request is not None and total > SHOWN_ENVIRONMENTS:
        warnings.append(
            UserError(
                path=["taskRoles"],
                code="environment-not-shown",
                message=f"the job has {total} instances: the environment is shown for the "
                f"first {SHOWN_ENVIRONMENTS} only",
            )
        )
    roles = [
        ResolvedTaskRole(
            name=role.name,
            instance_count=role.instances,
            resource_per_instance=Resource.from_spec(role.resources),
            commands=spec.commands_for(role),
            docker_image=role.docker_image,
            prerequisites=role_prerequisites(spec, role),
            min_failed_instances=role.completion.min_failed,
            min_succeeded_instances=role.completion.min_succeeded,
            task_retry_count=role.task_retry_count,
            instances=_instances(request, placements, role, first),
        )
        for role, first in zip(spec.task_roles, _first_positions(spec), strict=True)
    ]
    job = ResolvedJob(
        name=spec.name,
        dialect=spec.dialect.value,
        virtual_cluster=spec.virtual_cluster,
        retry_count=spec.retry_count,
        task_roles=roles,
        config=to_v2_yaml(spec),
    )
    return job, warnings
