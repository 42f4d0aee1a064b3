"""The Mutation type: resolve (dry run), submit and stop jobs.

Everything a user can fix comes back in the payload's `errors` with a path and a code; only
faults of the server become top-level GraphQL errors.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

import strawberry
from strawberry.scalars import JSON

from server.api.context import Info
from server.api.ids import BadId, expect_global_id
from server.api.jobs.dry_run import ResolvedJob, resolved_job
from server.api.jobs.types import Job, UserError, json_object
from server.api.mutation_field import mutation
from server.jobs.launch import default_fs_of
from server.protocol import ParseResult, resolve_job
from server.protocol.convert import convert_to_v2

if TYPE_CHECKING:
    from server.jobs.submission import ResolveOutcome


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


@strawberry.input
class ConvertJobInput:
    config: str = strawberry.field(description="The job config: YAML or JSON, any dialect.")


@strawberry.type(
    description="A job as protocol v2 YAML to edit further. Only the protocol is judged: a "
    "job this cluster cannot run is converted all the same (resolveJob says why it cannot)."
)
class ConvertJobPayload:
    config: str | None = strawberry.field(
        description="The job as protocol v2 YAML, its parameters kept as `<% $parameters.x %>` "
        "where v2 has a template; a v2 job as given. Null when the protocol cannot read it."
    )
    dialect: str | None = strawberry.field(description="The dialect it was written in.")
    errors: list[UserError] = strawberry.field(
        description="Why the protocol cannot read it, at paths of the config as given."
    )
    warnings: list[UserError] = strawberry.field(
        description="The protocol's warnings, at paths of the config as given."
    )
    notes: list[UserError] = strawberry.field(
        description="What the conversion wrote as a value instead of a template (an instance "
        "count from a parameter...), at paths of the converted config."
    )


@strawberry.input
class SubmitJobInput:
    config: str = strawberry.field(description="The job config: YAML or JSON, any dialect.")
    parameters: JSON | None = strawberry.field(
        default=None, description="Parameter values that override the config's."
    )
    virtual_cluster: str | None = strawberry.field(
        default=None, description="Run in this virtual cluster instead of the config's."
    )
    from_items: list[strawberry.ID] | None = strawberry.field(
        default=None,
        description="Marketplace items the config was made from (a template or data item "
        "used on a page, then edited): each the viewer may see counts a submit, as items "
        "referenced in the config do, when the config really holds it (a template's task "
        "roles with their commands, a component's type and URIs). Others are passed over.",
    )


@strawberry.type
class SubmitJobPayload:
    job: Job | None
    errors: list[UserError]
    warnings: list[UserError] = strawberry.field(
        description="Fields that have no effect on this backend; kept with the job as well."
    )


@strawberry.input
class StopJobInput:
    id: strawberry.ID


@strawberry.type
class StopJobPayload:
    job: Job | None
    errors: list[UserError]


@strawberry.type
class Mutation:
    @mutation(description="Dry run: validate and resolve a job without running it.")
    async def resolve_job(self, info: Info, input: ResolveJobInput) -> ResolveJobPayload:
        parameters = json_object(input.parameters, "parameters")
        if isinstance(parameters, UserError):
            return ResolveJobPayload(job=None, errors=[parameters], warnings=[])
        viewer = info.context.viewer
        service = info.context.runtime.service
        outcome: ResolveOutcome | ParseResult
        if service is not None:  # references resolved too, and judged by the backend
            submissions = service.submissions
            as_seen_by = await asyncio.to_thread(submissions.viewer_of, viewer)
            outcome = await asyncio.to_thread(
                submissions.resolve, input.config, parameters, as_seen_by
            )
        else:  # no backend: the protocol engine alone, which is what a dry run needs
            outcome = await asyncio.to_thread(resolve_job, input.config, parameters)
        spec = outcome.spec
        errors = [UserError.from_issue(i) for i in outcome.errors]
        warnings = [UserError.from_issue(i) for i in outcome.warnings]
        job = None
        if spec is not None and not errors:
            # every instance's environment names every peer: off the event loop, like parsing
            default_fs = default_fs_of(service.backend) if service is not None else ""
            job, more = await asyncio.to_thread(
                partial(resolved_job, spec, user=viewer.name, default_fs=default_fs)
            )
            warnings += more
        return ResolveJobPayload(job=job, errors=errors, warnings=warnings)

    @mutation(description="Convert a job of any dialect to protocol v2 YAML for editing.")
    async def convert_job(self, info: Info, input: ConvertJobInput) -> ConvertJobPayload:
        converted = await asyncio.to_thread(convert_to_v2, input.config)
        errors = converted.errors
        return ConvertJobPayload(
            config=converted.config,
            dialect=converted.dialect.value if converted.dialect is not None else None,
            errors=[UserError.from_issue(i) for i in errors],
            warnings=[UserError.from_issue(i) for i in converted.issues if i not in errors],
            notes=[UserError.from_issue(i) for i in converted.notes],
        )

    @mutation(description="Submit a job to run; errors say what to fix.")
    async def submit_job(self, info: Info, input: SubmitJobInput) -> SubmitJobPayload:
        parameters = json_object(input.parameters, "parameters")
        if isinstance(parameters, UserError):
            return SubmitJobPayload(job=None, errors=[parameters], warnings=[])
        outcome = await info.context.service.submit(  # the items it uses count a submit too
            info.context.viewer,
            input.config,
            parameters,
            input.virtual_cluster,
            made_from=[str(i) for i in input.from_items or []],
        )
        return SubmitJobPayload(
            job=Job.from_value(outcome.job) if outcome.job is not None else None,
            errors=[UserError.from_issue(i) for i in outcome.errors],
            warnings=[UserError.from_issue(i) for i in outcome.warnings],
        )

    @mutation(description="Stop a job; only its owner or an admin may.")
    async def stop_job(self, info: Info, input: StopJobInput) -> StopJobPayload:
        try:
            job_id = expect_global_id(input.id, "Job")
        except BadId as exc:
            error = UserError(path=["id"], code="not-found", message=str(exc))
            return StopJobPayload(job=None, errors=[error])
        service = info.context.service
        outcome = await service.stop(info.context.viewer, job_id)
        return StopJobPayload(
            job=Job.from_value(outcome.job) if outcome.job is not None else None,
            errors=[UserError.from_issue(i) for i in outcome.errors],
        )
