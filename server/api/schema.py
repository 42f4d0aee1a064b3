"""The GraphQL schema. Field names follow the contract in DESIGN.md ("GraphQL contract")."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import strawberry
from strawberry.scalars import JSON

from server.protocol import Issue, JobSpec, TaskRole, resolve_job, to_v2_yaml


@strawberry.type(
    description="A problem the user can fix: where it is, a stable code, and what to do."
)
class UserError:
    path: list[str]
    code: str
    message: str

    @classmethod
    def from_issue(cls, issue: Issue) -> UserError:
        return cls(path=issue.path_parts(), code=issue.code, message=issue.message)


@strawberry.type
class PortRequest:
    label: str
    count: int
    begin_at: int


@strawberry.type
class Resource:
    cpu: int
    memory_mb: int = strawberry.field(name="memoryMB")
    gpu: int
    shm_mb: int = strawberry.field(name="shmMB")
    ports: list[PortRequest]


@strawberry.type(description="A task role of a resolved (not yet submitted) job.")
class ResolvedTaskRole:
    name: str
    instance_count: int
    resource_per_instance: Resource
    commands: list[str]
    docker_image: str
    min_failed_instances: int
    min_succeeded_instances: int

    @classmethod
    def from_role(cls, spec: JobSpec, role: TaskRole) -> ResolvedTaskRole:
        res = role.resources
        return cls(
            name=role.name,
            instance_count=role.instances,
            resource_per_instance=Resource(
                cpu=res.cpu,
                memory_mb=res.memory_mb,
                gpu=res.gpu,
                shm_mb=res.shm_mb,
                ports=[
                    PortRequest(label=p.label, count=p.count, begin_at=p.begin_at)
                    for p in res.ports
                ],
            ),
            commands=spec.commands_for(role),
            docker_image=role.docker_image,
            min_failed_instances=role.completion.min_failed,
            min_succeeded_instances=role.completion.min_succeeded,
        )


@strawberry.type(description="A job after validation and parameter rendering, before it runs.")
class ResolvedJob:
    name: str
    dialect: str
    virtual_cluster: str
    retry_count: int
    task_roles: list[ResolvedTaskRole]
    config: str = strawberry.field(description="The job as canonical OpenPAI protocol v2 YAML.")


@strawberry.input
class ResolveJobInput:
    config: str = strawberry.field(description="The job config: YAML or JSON, any dialect.")
    parameters: JSON | None = strawberry.field(
        default=None, description="Parameter values that override the config's."
    )


@strawberry.type
class ResolveJobPayload:
    job: ResolvedJob | None
    errors: list[UserError]
    warnings: list[UserError]


def _version() -> str:
    try:
        return version("paigraph")
    except PackageNotFoundError:
        return "0+unknown"


@strawberry.type
class Query:
    @strawberry.field(description="The running paigraph version.")
    def version(self) -> str:
        return _version()


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Dry run: validate and resolve a job without running it.")
    def resolve_job(self, input: ResolveJobInput) -> ResolveJobPayload:
        parameters = input.parameters
        if parameters is not None and not isinstance(parameters, dict):
            error = UserError(
                path=["parameters"], code="type", message="parameters must be a JSON object"
            )
            return ResolveJobPayload(job=None, errors=[error], warnings=[])
        result = resolve_job(input.config, parameters)
        job = None
        if result.spec is not None:
            spec = result.spec
            job = ResolvedJob(
                name=spec.name,
                dialect=spec.dialect.value,
                virtual_cluster=spec.virtual_cluster,
                retry_count=spec.retry_count,
                task_roles=[ResolvedTaskRole.from_role(spec, r) for r in spec.task_roles],
                config=to_v2_yaml(spec),
            )
        return ResolveJobPayload(
            job=job,
            errors=[UserError.from_issue(i) for i in result.errors],
            warnings=[UserError.from_issue(i) for i in result.warnings],
        )


schema = strawberry.Schema(query=Query, mutation=Mutation)
