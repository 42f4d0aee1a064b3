"""The canonical job model that every dialect normalises into.

Everything after `server.protocol` (marketplace, jobs, backends) sees only these types. Values
are complete: defaults are applied, names are resolved to what the user wrote, and the original
text is kept so the job can be shown exactly as it was submitted (with secrets masked).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Dialect(StrEnum):
    DRAFT = "draft"  # protocol_version / tasks list / $$param$$ (the seeds' draft)
    V2 = "v2"  # OpenPAI protocol v2: protocolVersion 2 / taskRoles map / <% $parameters.x %>
    V1 = "v1"  # OpenPAI v1 JSON: jobName / taskRoles list


DIALECT_TITLES: dict[Dialect, str] = {
    Dialect.DRAFT: "draft protocol (tasks list)",
    Dialect.V2: "OpenPAI protocol v2",
    Dialect.V1: "OpenPAI v1 JSON",
}


class PrerequisiteType(StrEnum):
    DOCKERIMAGE = "dockerimage"
    DATA = "data"
    SCRIPT = "script"
    OUTPUT = "output"
    STORAGE = "storage"
    PLUGIN = "plugin"  # a marketplace plugin item (seed 004) that declares no type


class CallbackEvent(StrEnum):
    TASK_STARTS = "taskStarts"
    TASK_SUCCEEDS = "taskSucceeds"
    TASK_FAILS = "taskFails"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DockerAuth(_Model):
    username: str | None = None
    password: str | None = None  # usually "<% $secrets.x %>", rendered only at launch
    registryuri: str | None = None


class Callback(_Model):
    event: CallbackEvent
    commands: list[str]


class StorageRequest(_Model):
    name: str
    mount_path: str | None = None


class Requirement(_Model):
    """One entry of a prerequisite's `require` list: a name or reference, with variable values."""

    name: str
    template_variables: dict[str, Any] = Field(default_factory=dict)


class PrerequisiteOrigin(_Model):
    """Where a prerequisite resolved from a reference came from, so it can be linked back."""

    reference: str  # as the job (or the item that required it) wrote it
    item_id: str | None = None  # the marketplace item, when it came from the marketplace
    item_version: str | None = None
    url: str | None = None  # the http(s) URL it was downloaded from, when it was
    template_variables: dict[str, Any] = Field(default_factory=dict)  # the values it was given


class Prerequisite(_Model):
    name: str
    type: PrerequisiteType
    uri: list[str] = Field(default_factory=list)
    # `uri` was written as a list: a script's repositories are then each checked out at
    # <name>/<repository name>/ (the seed's layout) instead of one repository at <name>/.
    uri_list: bool = False
    version: str | None = None
    contributor: str | None = None
    description: str | None = None
    auth: DockerAuth | None = None
    plugin: str | None = None
    require: list[Requirement] = Field(default_factory=list)
    callbacks: list[Callback] = Field(default_factory=list)
    require_storages: list[StorageRequest] = Field(default_factory=list)
    template_variables: list[str] = Field(default_factory=list)
    # A declared variable's `default`: what a form offers first, and what publishing checks
    # the item with (a use still gives every variable its value).
    variable_defaults: dict[str, str] = Field(default_factory=dict)
    failure_policy: str | None = None
    # Other keys are parameters for the prerequisite's plugin (OpenPAI passes them through).
    plugin_parameters: dict[str, Any] = Field(default_factory=dict)
    origin: PrerequisiteOrigin | None = None  # set when resolved from a reference


class PortRequest(_Model):
    label: str
    count: int = 1
    begin_at: int = 0  # v1 / draft only: the first port wanted, 0 for any


class Resources(_Model):
    cpu: int
    memory_mb: int
    gpu: int = 0
    shm_mb: int
    ports: list[PortRequest] = Field(default_factory=list)
    infiniband: bool = False

    def port(self, label: str) -> PortRequest | None:
        return next((p for p in self.ports if p.label == label), None)


class Completion(_Model):
    """How many instances decide the role's outcome. -1 disables the rule."""

    min_failed: int = 1
    min_succeeded: int = -1


class DependencyPhase(StrEnum):
    """How far a depended-on role's instances must have come before a dependent starts."""

    RUNNING = "running"  # its commands started
    READY = "ready"  # its readiness check passed
    SUCCEEDED = "succeeded"  # it ended with exit code 0


class Dependency(_Model):
    """A role's instances start their commands only once `instances` of `role` reached `when`."""

    role: str
    when: DependencyPhase
    instances: int | None = None  # None: every instance of that role


class Readiness(_Model):
    """How to tell that an instance serves: a TCP connection to one of its port labels, or a
    command run inside it exiting 0, tried every period, each try given the timeout."""

    port: str | None = None
    command: list[str] = Field(default_factory=list)
    period_seconds: float = 1.0
    timeout_seconds: float = 1.0
    failure_threshold: int = 3


DEFAULT_DEPENDENCY_TIMEOUT_SECONDS = 600


class StorageMount(_Model):
    """An admin-defined storage a resolved role mounts (requireStorages, extras.storages, or
    its output naming that storage), with the definition it had when the job was resolved."""

    name: str
    source: str  # an absolute host directory, or a volume / claim name
    volume: bool = False
    read_only: bool = False
    mount_path: str  # absolute, in the container


class TaskRole(_Model):
    name: str
    instances: int = 1
    docker_image: str  # the name of a dockerimage prerequisite, or a reference
    data: str | None = None
    script: str | None = None
    output: str | None = None  # an output or (draft) storage prerequisite
    prerequisites: list[str] = Field(default_factory=list)  # names or marketplace / http refs
    resources: Resources
    completion: Completion = Completion()
    task_retry_count: int = 0
    commands: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(default_factory=dict)  # draft: override the job's here
    extra_container_options: dict[str, Any] = Field(default_factory=dict)
    storages: list[StorageMount] = Field(default_factory=list)  # filled by reference resolution
    # Start order (v2 `extras.paigraph.taskRoles.<role>`): what the role waits for, how its own
    # readiness is checked, and how long it waits before it ends.
    depends_on: list[Dependency] = Field(default_factory=list)
    readiness: Readiness | None = None
    dependency_timeout_seconds: int = DEFAULT_DEPENDENCY_TIMEOUT_SECONDS


class Deployment(_Model):
    name: str
    pre_commands: dict[str, list[str]] = Field(default_factory=dict)
    post_commands: dict[str, list[str]] = Field(default_factory=dict)


class JobSpec(_Model):
    dialect: Dialect
    name: str
    version: str | None = None
    contributor: str | None = None
    description: str | None = None
    virtual_cluster: str = "default"
    # -2: always retry (even on success); -1: retry failures without limit; N: up to N retries.
    retry_count: int = 0
    gpu_type: str | None = None
    auth_file: str | None = None  # v1 authFile: registry, username and password, one a line
    parameters: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, Any] = Field(default_factory=dict, repr=False, exclude=True)
    prerequisites: list[Prerequisite] = Field(default_factory=list)
    task_roles: list[TaskRole]
    deployments: list[Deployment] = Field(default_factory=list)
    default_deployment: str | None = None
    env: dict[str, str] = Field(default_factory=dict)  # exported to every instance (v1 jobEnvs)
    extras: dict[str, Any] = Field(default_factory=dict)
    source: str = Field(default="", repr=False)  # the text as submitted, secrets masked

    def role(self, name: str) -> TaskRole | None:
        return next((r for r in self.task_roles if r.name == name), None)

    def prerequisite(self, name: str, type_: PrerequisiteType | None = None) -> Prerequisite | None:
        """Look a prerequisite up by name; with a type, only among that type."""
        for p in self.prerequisites:
            if p.name == name and (type_ is None or p.type == type_):
                return p
        return None

    def commands_for(self, role: TaskRole) -> list[str]:
        """The role's commands wrapped by the default deployment's pre and post commands."""
        deployment = next((d for d in self.deployments if d.name == self.default_deployment), None)
        if deployment is None:
            return list(role.commands)
        return [
            *deployment.pre_commands.get(role.name, []),
            *role.commands,
            *deployment.post_commands.get(role.name, []),
        ]

    @property
    def total_instances(self) -> int:
        return sum(r.instances for r in self.task_roles)
