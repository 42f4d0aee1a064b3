"""The job domain's Query fields: the viewer, and jobs one at a time or paged; and
`job_or_user`, what `node` answers for a Job or User ID (server.api.root_query)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import strawberry

from server.api.context import Info
from server.api.errors import ApiError
from server.api.ids import expect_global_id, parse_global_id
from server.api.jobs.types import (
    Job,
    JobConnection,
    JobEdge,
    JobFilter,
    Node,
    PageInfo,
    User,
    changes_cursor,
)
from server.api.limits import page_size
from server.api.lookahead import fields_selected_at, selected_below
from server.protocol.model import JobSpec
from server.shapes.values import Instance, JobCursor
from server.shapes.values import JobFilter as StoreJobFilter
from server.shapes.values import JobPage as StoredJobPage

# The TaskInstance fields a brief instance (`JobStore.current_instances`) answers as a full one.
BRIEF_FIELDS = frozenset({"__typename", "taskRole", "index", "attempt", "state", "ports"})
# The Job fields a brief job (`JobStore.list_jobs`) answers as a full one: those of the columns
# it reads, and those that go by the job's id, owner or attempt only.
BRIEF_JOB_FIELDS = frozenset(
    {
        "__typename",
        "id",
        "name",
        "state",
        "attempt",
        "taskRoles",
        "instanceCounts",
        "user",
        "config",
        "metrics",
        "events",
    }
)


@dataclass(frozen=True)
class JobPage:
    since: int  # the newest event id before the page was read
    page: StoredJobPage
    specs: dict[str, JobSpec]
    instances: dict[str, list[Instance]]


def store_filter(info: Info, filter: JobFilter | None) -> StoreJobFilter:
    """The store's filter for a `JobFilter`, narrowed to the jobs the viewer may read."""
    return StoreJobFilter(
        states=tuple(filter.state or ()) if filter else (),
        owner=filter.user if filter else None,
        virtual_cluster=filter.virtual_cluster if filter else None,
        name=filter.name if filter else None,
        name_contains=filter.name_contains if filter else None,
        owner_id=info.context.job_owner_limit,
    )


def _job_cursor(after: str | None) -> JobCursor | None:
    if after is None:
        return None
    try:
        return JobCursor.decode(after)
    except ValueError as exc:
        raise ApiError(f"after: {exc}", "BAD_ARGUMENT") from None


async def _job_by_name(info: Info, name: str) -> Job | None:
    """`name` is the viewer's job; `user~name` is that user's (OpenPAI's framework name)."""
    store = info.context.store
    owner_name, sep, job_name = name.rpartition("~")
    if sep:
        owner = await asyncio.to_thread(store.user_named, owner_name)
        if owner is None:
            return None
        owner_id = owner.id
    else:
        owner_id = info.context.viewer.id
    found = info.context.readable(await asyncio.to_thread(store.job_named, owner_id, job_name))
    return Job.from_value(found) if found is not None else None


async def job_or_user(info: Info, id: strawberry.ID) -> Node | None:
    """The Job or User with this global ID, if the viewer may see it: what `node` answers."""
    type_name, key = parse_global_id(id)
    loaders = info.context.loaders
    if type_name == "Job":
        job = info.context.readable(await loaders.job.load(key))
        return Job.from_value(job) if job is not None else None
    if type_name == "User" and key.isdigit():
        user = await loaders.user.load(int(key))
        return User.from_value(user) if user is not None else None
    return None


@strawberry.type
class Query:
    @strawberry.field(description="Who is asking.")
    def viewer(self, info: Info) -> User:
        return User.from_value(info.context.viewer)

    @strawberry.field(
        description="One job, by its ID or by name: `name` is the viewer's newest job of "
        "that name, `user~name` another user's."
    )
    async def job(
        self, info: Info, id: strawberry.ID | None = None, name: str | None = None
    ) -> Job | None:
        if (id is None) == (name is None):
            raise ApiError("job: give exactly one of `id` and `name`", "BAD_ARGUMENT")
        if id is not None:
            found = await info.context.loaders.job.load(expect_global_id(id, "Job"))
            found = info.context.readable(found)
            return Job.from_value(found) if found is not None else None
        assert name is not None
        return await _job_by_name(info, name)

    @strawberry.field(
        description="Jobs of every user (only the viewer's own when the server's "
        "job_visibility is `own`, for all but admins), newest first, `first` (at most 100) a "
        "page."
    )
    async def jobs(
        self,
        info: Info,
        first: int | None = None,
        after: str | None = None,
        filter: JobFilter | None = None,
    ) -> JobConnection:
        size = page_size(first)
        where = store_filter(info, filter)
        store, loaders = info.context.store, info.context.loaders
        after_cursor = _job_cursor(after)
        roles = selected_below(info, "edges", "node", "taskRoles")
        instances = roles and selected_below(info, "edges", "node", "taskRoles", "instances")
        # Instances shown by their state and ports only (a list's usual question) are read
        # without the columns nothing asks for.
        brief = instances and (
            fields_selected_at(info, "edges", "node", "taskRoles", "instances") <= BRIEF_FIELDS
        )
        # Likewise jobs shown by their name, state and task roles (the columns of the others,
        # three of them timestamps, and the owner's name were most of reading the page).
        brief_jobs = fields_selected_at(info, "edges", "node") <= BRIEF_JOB_FIELDS

        def read() -> JobPage:
            """The page, and what the query wants of its jobs, in one worker-thread hop."""
            since = store.newest_event_id()  # before the page: a change meanwhile is told again
            page = store.list_jobs(where, first=size, after=after_cursor, brief=brief_jobs)
            ids = [stored.id for stored in page.jobs]
            return JobPage(
                since,
                page,
                store.job_specs(ids) if roles and ids else {},
                store.current_instances({j.id: j.attempt for j in page.jobs}, brief=brief)
                if instances
                else {},
            )

        found = await asyncio.to_thread(read)
        page = found.page
        # Primed, the loaders answer a job's taskRoles and instances without another read.
        if not brief_jobs:  # brief jobs lack fields other parts of the query might ask for
            loaders.job.prime_many({stored.id: stored for stored in page.jobs})
        loaders.spec.prime_many(found.specs)
        if not brief:  # brief instances lack fields other parts of the query might ask for
            loaders.instances.prime_many(found.instances)
        nodes = [Job.from_value(stored) for stored in page.jobs]
        if roles:  # what each job's taskRoles answers, built here rather than by 50 resolver calls
            nodes = [
                node.with_task_roles(
                    found.specs.get(node.job_id),
                    found.instances.get(node.job_id) if instances else None,
                )
                for node in nodes
            ]
        edges = [
            JobEdge(cursor=stored.cursor.encode(), node=node)
            for stored, node in zip(page.jobs, nodes, strict=True)
        ]
        end = page.end_cursor
        return JobConnection(
            changes_cursor=changes_cursor(found.since),
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next, end_cursor=end.encode() if end else after
            ),
        )
