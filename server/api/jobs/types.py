"""The job graph as clients see it: jobs, task roles, instances, events.

Re-exports the shared types (`server.api.graph_types`, `prerequisite_types.py`) so this module
names every type a job's graph uses; field names are the public contract (`schema.graphql`),
and linked fields go through the request's DataLoaders, one statement per kind of data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import datetime
from operator import attrgetter, itemgetter

import strawberry

from server.api.context import Info
from server.api.graph_types import (
    Node,
    PageInfo,
    User,
    UserError,
    json_object,
    not_found,
    owner_of,
)
from server.api.ids import BadId, cursor, global_id, parse_cursor
from server.api.jobs.metrics_types import (
    InstanceMetrics,
    JobMetrics,
    checked_step,
    instance_metrics,
    job_metrics,
    stored_points,
)
from server.api.jobs.prerequisite_types import (
    PortRequest,
    Prerequisite,
    Resource,
    docker_image,
    role_prerequisites,
)
from server.api.limits import page_size
from server.api.loaders import ready
from server.api.lookahead import selected_below
from server.api.prebuilt import prebuilt, stored_items, stored_view
from server.api.resolver_field import resolver_field
from server.api.shared_values import shared_value
from server.protocol import Issue, Severity
from server.protocol.model import JobSpec
from server.protocol.model import TaskRole as SpecTaskRole
from server.shapes.job_states import JobState
from server.shapes.values import Event, Instance
from server.shapes.values import Job as StoredJob

__all__ = [
    "InstanceCounts",
    "Job",
    "JobChange",
    "JobConnection",
    "JobEdge",
    "JobEvent",
    "JobEventConnection",
    "JobEventEdge",
    "JobFilter",
    "LogChunk",
    "Node",
    "PageInfo",
    "PortAllocation",
    "PortRequest",
    "Prerequisite",
    "Resource",
    "StartDependency",
    "TaskInstance",
    "TaskRole",
    "User",
    "UserError",
    "changes_cursor",
    "docker_image",
    "event_cursor",
    "json_object",
    "not_found",
    "owner_of",
    "parse_changes_cursor",
    "parse_event_cursor",
    "role_prerequisites",
]

strawberry.enum(JobState, name="JobState", description="The state of a job or task instance.")


@stored_view(tuple, label=itemgetter(0), ports=itemgetter(1))  # an item of Instance.ports
@strawberry.type(description="A group of host ports an instance holds under one label.")
class PortAllocation:
    label: str
    ports: list[int]

    @classmethod
    def from_mapping(cls, ports: dict[str, list[int]]) -> list[PortAllocation]:
        return [cls(label=label, ports=list(values)) for label, values in ports.items()]


@stored_view(
    Instance,
    task_role=attrgetter("role"),
    index=attrgetter("index"),
    attempt=attrgetter("attempt"),
    task_attempt=attrgetter("task_attempt"),
    state=attrgetter("state"),
    state_reason=lambda i: i.state_reason or None,
    exit_code=attrgetter("exit_code"),
    exit_reason=attrgetter("exit_reason"),
    node=attrgetter("node"),
    host_ip=attrgetter("host_ip"),
    ports=lambda i: list(i.ports.items()),
    started_at=attrgetter("started_at"),
    finished_at=attrgetter("finished_at"),
)
@strawberry.type(description="One task instance of the job's current attempt.")
class TaskInstance:
    task_role: str
    index: int
    attempt: int = strawberry.field(description="The job attempt this instance belongs to.")
    task_attempt: int = strawberry.field(
        description="1, or more once this instance was retried on its own."
    )
    state: JobState
    state_reason: str | None
    exit_code: int | None
    exit_reason: str | None
    node: str | None
    host_ip: str | None
    ports: list[PortAllocation]
    started_at: datetime | None
    finished_at: datetime | None
    value: strawberry.Private[Instance]

    @resolver_field(
        description="What the instance used over time, from `since` (all that is kept "
        "without), averaged over `step` seconds when given (as stored without: the sampling "
        "interval for the last hour, minute means before)."
    )
    async def metrics(
        self, info: Info, since: datetime | None = None, step: int | None = None
    ) -> InstanceMetrics:
        i = self.value
        every = checked_step(step)
        points = (await stored_points(info, i.job_id, since, i.attempt)).get((i.role, i.index), [])
        spec = await info.context.loaders.spec.load(i.job_id)
        role = spec.role(i.role) if spec is not None else None
        return instance_metrics(info.context.runtime, points, every, role, i)

    @classmethod
    def from_value(cls, i: Instance) -> TaskInstance:
        return cls(
            value=i,
            task_role=i.role,
            index=i.index,
            attempt=i.attempt,
            task_attempt=i.task_attempt,
            state=i.state,
            state_reason=i.state_reason or None,
            exit_code=i.exit_code,
            exit_reason=i.exit_reason,
            node=i.node,
            host_ip=i.host_ip,
            ports=PortAllocation.from_mapping(i.ports),
            started_at=i.started_at,
            finished_at=i.finished_at,
        )


@shared_value
@strawberry.type(
    description="What a task role waits for before its commands start: `instances` of `role` "
    "reaching `when` (the job's extras.paigraph start order)."
)
class StartDependency:
    role: str
    when: str = strawberry.field(description="running, ready or succeeded.")
    instances: int = strawberry.field(description="How many of that role's instances must.")
    of: int = strawberry.field(description="How many instances that role has.")


@strawberry.type(description="A task role of a submitted job, with its instances.")
class TaskRole:
    """Built for every role of every job on a page: what takes work to build (resources,
    rendered commands, prerequisites, the instances' objects) is built only when it is asked
    for. The stored instances come with it (read ahead with the page, or loaded with the
    spec), which lets the executor complete a role and its instances without a resolver call
    per role, and a plain selection of the instances straight from the stored values."""

    name: str
    instance_count: int
    min_failed_instances: int
    min_succeeded_instances: int
    task_retry_count: int
    stored_instances: strawberry.Private[Sequence[Instance]]
    spec: strawberry.Private[JobSpec]
    role: strawberry.Private[SpecTaskRole]

    @resolver_field(description="The instances of the job's current attempt, by index.")
    @stored_items("stored_instances")
    def instances(self) -> list[TaskInstance]:
        return [TaskInstance.from_value(i) for i in self.stored_instances]

    @strawberry.field
    def resource_per_instance(self) -> Resource:
        return Resource.from_spec(self.role.resources)

    @resolver_field(
        description="The commands after parameter rendering (secrets are filled in only "
        "inside the container)."
    )
    def commands(self) -> list[str]:
        return self.spec.commands_for(self.role)

    @strawberry.field
    def docker_image(self) -> Prerequisite:
        return docker_image(self.spec, self.role)

    @strawberry.field
    def prerequisites(self) -> list[Prerequisite]:
        return role_prerequisites(self.spec, self.role)

    @resolver_field(description="The roles this role's instances wait for (start order).")
    def starts_after(self) -> list[StartDependency]:
        out = []
        for dep in self.role.depends_on:
            target = self.spec.role(dep.role)
            of = target.instances if target is not None else dep.instances or 0
            wanted = dep.instances if dep.instances is not None else of
            out.append(StartDependency(role=dep.role, when=dep.when.value, instances=wanted, of=of))
        return out

    @classmethod
    def from_spec(
        cls, spec: JobSpec, role: SpecTaskRole, instances: Sequence[Instance] = ()
    ) -> TaskRole:
        """The role with those of `instances` that belong to it (a job's, or none)."""
        return cls(
            name=role.name,
            instance_count=role.instances,
            min_failed_instances=role.completion.min_failed,
            min_succeeded_instances=role.completion.min_succeeded,
            task_retry_count=role.task_retry_count,
            stored_instances=[i for i in instances if i.role == role.name],
            spec=spec,
            role=role,
        )


@shared_value
@strawberry.type(description="One entry of a job's append-only event log.")
class JobEvent:
    cursor: str = strawberry.field(description="Give it as `after` to continue from here.")
    sequence: int
    at: datetime
    type: str = strawberry.field(description="JOB_STATE, INSTANCE_STATE, or another kind.")
    message: str | None
    state: JobState | None
    attempt: int | None
    task_role: str | None
    index: int | None

    @classmethod
    def from_value(cls, e: Event) -> JobEvent:
        return cls(
            cursor=event_cursor(e.sequence),
            sequence=e.sequence,
            at=e.at,
            type=e.type,
            message=e.message,
            state=e.state,
            attempt=e.attempt,
            task_role=e.role,
            index=e.index,
        )


def event_cursor(sequence: int) -> str:
    return cursor(sequence)


def parse_event_cursor(value: str | None, *, argument: str = "after") -> int:
    """The sequence an event cursor points at (0 for none: from the start)."""
    if value is None:
        return 0
    parts = parse_cursor(value, argument=argument)
    if len(parts) != 1 or not isinstance(parts[0], int) or parts[0] < 0:
        raise BadId(f"{argument}: {value!r} is not an event cursor this service gave out")
    return parts[0]


@strawberry.type
class JobEventEdge:
    cursor: str
    node: JobEvent


@strawberry.type
class JobEventConnection:
    edges: list[JobEventEdge]
    page_info: PageInfo


@strawberry.type
class Job(Node):
    id: strawberry.ID
    name: str
    virtual_cluster: str
    state: JobState
    state_reason: str | None
    submitted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    attempt: int
    retries: int
    job_id: strawberry.Private[str]  # the job's id in the store; `id` is the global ID
    owner_id: strawberry.Private[int]
    last_sequence: strawberry.Private[int] = 0
    warnings: list[UserError] = strawberry.field(
        default_factory=list,
        description="Fields the job was submitted with that have no effect on this backend "
        "(path, code, what will not happen), as `submitJob` reported them.",
    )
    # Built with the page the job was listed on, when that page read the specs ahead.
    prebuilt_task_roles: strawberry.Private[list[TaskRole] | None] = None

    @classmethod
    def from_value(cls, job: StoredJob) -> Job:
        return cls(
            id=strawberry.ID(global_id("Job", job.id)),
            name=job.name,
            virtual_cluster=job.virtual_cluster,
            state=job.state,
            state_reason=job.state_reason or None,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            completed_at=job.completed_at,
            attempt=job.attempt,
            retries=job.retries,
            job_id=job.id,
            owner_id=job.owner_id,
            last_sequence=job.last_sequence,
            warnings=[
                UserError.from_issue(Issue.at(w.path, w.code, w.message, Severity.WARNING))
                for w in job.warnings
            ],
        )

    @resolver_field(
        description="The cursor of the job's newest event: `jobEvents(after:)` with it "
        "delivers only what happens from now on (a list that shows the job as read here)."
    )
    def event_cursor(self) -> str:
        return event_cursor(self.last_sequence)

    @resolver_field(
        description="How many instances the current attempt has, and how many of them run."
    )
    async def instance_counts(self, info: Info) -> InstanceCounts:
        loaders = info.context.loaders
        spec_read = loaders.spec.load(self.job_id)  # both asked for before either is awaited
        instances_read = loaders.instances.load(self.job_id)
        spec, instances = await spec_read, await instances_read
        total = sum(role.instances for role in spec.task_roles) if spec is not None else 0
        running = sum(1 for i in instances or () if i.state == JobState.RUNNING)
        return InstanceCounts(total=total, running=running)

    @resolver_field(description="Who submitted the job.")
    async def user(self, info: Info) -> User:
        return await owner_of(info, self.owner_id, f"job {self.job_id}")

    @resolver_field(
        description="The config as submitted, with its secrets masked. Every user can read "
        "every job's config, as in OpenPAI; secrets are never stored in it."
    )
    async def config(self, info: Info) -> str:
        return await info.context.loaders.config.load(self.job_id) or ""

    @resolver_field(
        description="The job's task roles, in the order of its config.",
        graphql_type=list[TaskRole],
    )
    @prebuilt("prebuilt_task_roles")
    def task_roles(self, info: Info) -> list[TaskRole] | Awaitable[list[TaskRole]]:
        """As built with the page when it was (`with_task_roles`); at once when the spec (and
        the instances, if the query wants them) were read ahead, else through the loaders."""
        if self.prebuilt_task_roles is not None:
            return self.prebuilt_task_roles
        loaders = info.context.loaders
        wanted = selected_below(info, "instances")
        has_spec, spec = ready(loaders.spec, self.job_id)
        has_instances, instances = ready(loaders.instances, self.job_id) if wanted else (True, None)
        if has_spec and has_instances:
            return self._task_roles(spec, instances)

        async def later() -> list[TaskRole]:
            spec_read = loaders.spec.load(self.job_id)  # both asked for before either is awaited:
            instances_read = loaders.instances.load(self.job_id) if wanted else None  # one batch
            found = await spec_read
            return self._task_roles(found, await instances_read if instances_read else None)

        return later()

    def _task_roles(self, spec: JobSpec | None, instances: list[Instance] | None) -> list[TaskRole]:
        if spec is None:
            return []
        return [TaskRole.from_spec(spec, role, instances or ()) for role in spec.task_roles]

    def with_task_roles(self, spec: JobSpec | None, instances: list[Instance] | None) -> Job:
        """The job with its task roles built from what its page read ahead (its instances
        None when the query does not ask for them): what `taskRoles` would answer."""
        self.prebuilt_task_roles = self._task_roles(spec, instances)
        return self

    @resolver_field(
        description="What the current attempt's instances used over time, per task role: "
        "sums and the spread between instances (`since` and `step` as on TaskInstance.metrics)."
    )
    async def metrics(
        self, info: Info, since: datetime | None = None, step: int | None = None
    ) -> JobMetrics:
        every = checked_step(step)
        by_instance = await stored_points(info, self.job_id, since, self.attempt)
        points = [p for found in by_instance.values() for p in found]
        spec = await info.context.loaders.spec.load(self.job_id)
        roles = spec.task_roles if spec is not None else []
        return job_metrics(info.context.runtime, points, every, roles)

    @resolver_field(description="The job's event log, oldest first.")
    async def events(
        self, info: Info, first: int | None = None, after: str | None = None
    ) -> JobEventConnection:
        size = page_size(first)
        since = parse_event_cursor(after)
        found = await asyncio.to_thread(
            info.context.store.events_after, self.job_id, since, max(size, 0) + 1
        )
        page = found[:size]
        edges = [
            JobEventEdge(cursor=event_cursor(e.sequence), node=JobEvent.from_value(e)) for e in page
        ]
        return JobEventConnection(
            edges=edges,
            page_info=PageInfo(
                has_next_page=len(found) > size,
                end_cursor=edges[-1].cursor if edges else after,
            ),
        )


@strawberry.type(description="Instances of a job's current attempt.")
class InstanceCounts:
    total: int = strawberry.field(description="Every instance the job's task roles ask for.")
    running: int = strawberry.field(description="Those in state RUNNING now.")


@strawberry.type
class JobEdge:
    cursor: str
    node: Job


@strawberry.type
class JobConnection:
    edges: list[JobEdge]
    page_info: PageInfo
    changes_cursor: str = strawberry.field(
        description="Where `jobsChanged` picks up for this list: what changed from just "
        "before it was read."
    )


@strawberry.type(description="A job that entered a list's filter or changed within it.")
class JobChange:
    job: Job
    cursor: str = strawberry.field(
        description="Give it as `after` when subscribing again (e.g. after a reconnect)."
    )


def changes_cursor(event_id: int) -> str:
    return cursor("changes", event_id)


def parse_changes_cursor(value: str, *, argument: str = "after") -> int:
    """The event id a `jobsChanged` cursor points at."""
    parts = parse_cursor(value, argument=argument)
    if len(parts) != 2 or parts[0] != "changes" or not isinstance(parts[1], int) or parts[1] < 0:
        raise BadId(f"{argument}: {value!r} is not a jobsChanged cursor this service gave out")
    return parts[1]


@strawberry.input(description="Which jobs to list; every field given must match.")
class JobFilter:
    state: list[JobState] | None = strawberry.field(
        default=None, description="Any of these states."
    )
    user: str | None = strawberry.field(default=None, description="The owner's user name.")
    virtual_cluster: str | None = None
    name: str | None = None
    name_contains: str | None = strawberry.field(
        default=None, description="Part of the name, in any case (a search box)."
    )


@strawberry.type(description="A piece of a task instance's output.")
class LogChunk:
    offset: int = strawberry.field(description="Byte offset of `data` in the instance's log.")
    data: str
