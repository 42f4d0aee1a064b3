"""The Mutation type with the marketplace: publish, update, delete, star and use items.

It extends the job mutations' Mutation. Everything a user can fix comes back in the payload's
`errors` (path, code, message); marketplace payloads carry the `item`.
"""

from __future__ import annotations

import asyncio
from enum import Enum

import strawberry
from strawberry.scalars import JSON

from server.api.context import Info
from server.api.graph_types import UserError, json_object
from server.api.ids import BadId, expect_global_id
from server.api.jobs.types import Job
from server.api.marketplace.types import MarketplaceItem
from server.api.mutation_field import mutation
from server.marketplace.items import API_TYPE, item_key
from server.marketplace.service import ItemFields, ItemOutcome, MarketplaceService
from server.protocol import Dialect, Issue
from server.protocol.convert import convert_to_v2
from server.protocol.model import DIALECT_TITLES
from server.shapes.marketplace_values import Visibility


@strawberry.enum(description="What publishing did.")
class PublishOutcome(Enum):
    NEW_ITEM = "new_item"
    NEW_VERSION = "new_version"
    UNCHANGED = "unchanged"  # that version was published before with the same content


@strawberry.input(
    description="Give `content` (YAML or JSON: a job template or a component), or `jobId` to "
    "publish a job's config as a template. A name one already owns gets a new version."
)
class PublishMarketplaceItemInput:
    content: str | None = None
    job_id: strawberry.ID | None = None
    name: str | None = strawberry.field(
        default=None,
        description="Default: the content's name. Another name is written into the content "
        "(its `name`; `jobName` in v1 JSON).",
    )
    version: str | None = strawberry.field(
        default=None,
        description="Default: the content's `version`, else the next number (1, 2, ...).",
    )
    summary: str | None = strawberry.field(
        default=None, description="Default: the first line of the content's description."
    )
    description: str | None = strawberry.field(
        default=None, description="Markdown. Default: the content's description."
    )
    tags: list[str] | None = None
    categories: list[str] | None = None
    visibility: Visibility | None = strawberry.field(
        default=None, description="Default: PUBLIC, or GROUPS when `groups` are given."
    )
    groups: list[str] | None = strawberry.field(
        default=None,
        description="The groups (virtual clusters) a GROUPS item is shared with; `default` "
        "is every user's.",
    )


@strawberry.type
class PublishMarketplaceItemPayload:
    item: MarketplaceItem | None
    outcome: PublishOutcome | None
    errors: list[UserError]
    warnings: list[UserError] = strawberry.field(
        default_factory=list,
        description="What the publisher and the item's users should know: a credential or "
        "secret published as a secret its user supplies, without its value; a job template in "
        "the draft or v1 dialect converted to protocol v2 when used, and what the conversion "
        "writes as a value instead of a template (or the protocol ignores).",
    )


@strawberry.input(
    description="Change what is given; `content` publishes a new version (same name) first."
)
class UpdateMarketplaceItemInput:
    id: strawberry.ID
    content: str | None = None
    version: str | None = None
    summary: str | None = None
    description: str | None = None
    tags: list[str] | None = None
    categories: list[str] | None = None
    visibility: Visibility | None = None
    groups: list[str] | None = None


@strawberry.type
class UpdateMarketplaceItemPayload:
    item: MarketplaceItem | None
    errors: list[UserError]


@strawberry.input
class DeleteMarketplaceItemInput:
    id: strawberry.ID


@strawberry.type
class DeleteMarketplaceItemPayload:
    item: MarketplaceItem | None = strawberry.field(
        description="The item as it was; its versions are gone."
    )
    errors: list[UserError]


@strawberry.input
class StarMarketplaceItemInput:
    id: strawberry.ID
    star: bool = strawberry.field(default=True, description="false unstars the item.")


@strawberry.type
class StarMarketplaceItemPayload:
    item: MarketplaceItem | None
    errors: list[UserError]


@strawberry.input
class UseMarketplaceItemInput:
    id: strawberry.ID
    version: str | None = strawberry.field(
        default=None, description="A version to pin; default: the latest."
    )
    parameters: JSON | None = strawberry.field(
        default=None,
        description="A template's parameter values, or a component's template variables.",
    )
    docker_image: str | None = strawberry.field(
        default=None,
        description="The image the empty job of a component runs in (default ubuntu:22.04).",
    )
    submit: bool = strawberry.field(
        default=False, description="Submit the job at once (it counts as a submit of the item)."
    )
    virtual_cluster: str | None = strawberry.field(
        default=None, description="With `submit`: run in this virtual cluster."
    )


@strawberry.type
class UseMarketplaceItemPayload:
    item: MarketplaceItem | None
    config: str | None = strawberry.field(description="The job config, ready to submit.")
    job: Job | None = strawberry.field(description="The submitted job, with `submit`.")
    errors: list[UserError]


def conversion_warnings(content: str) -> list[UserError]:
    """Warnings for a job template not written in protocol v2: using it converts it, and
    what the conversion cannot keep as written (or the protocol ignores) is said."""
    converted = convert_to_v2(content)
    if converted.config is None or converted.dialect in (None, Dialect.V2):
        return []
    warnings = [
        UserError(
            path=["content"],
            code="converted",
            message=f"the template is written in the {DIALECT_TITLES[converted.dialect]}: "
            "using it converts it to protocol v2"
            + (
                ", where some values cannot stay as written (listed below)"
                if converted.notes
                else "; its parameters keep their effect"
            ),
        )
    ]
    warnings += [UserError.from_issue(i.within("content")) for i in converted.issues]
    warnings += [
        UserError(
            path=["content"],
            code=note.code,
            message=f"converted, {'.'.join(note.segments)}: {note.message}",
        )
        for note in converted.notes
    ]
    return warnings


def _errors(issues: list[Issue]) -> list[UserError]:
    return [UserError.from_issue(issue) for issue in issues]


def _key(value: str) -> str | UserError:
    key = item_key(value)
    if key is None:
        try:
            expect_global_id(value, API_TYPE)
        except BadId as exc:
            return UserError(path=["id"], code="not-found", message=str(exc))
        return UserError(path=["id"], code="not-found", message="no marketplace item has that id")
    return key


def _item(outcome: ItemOutcome) -> MarketplaceItem | None:
    return MarketplaceItem.from_value(outcome.item) if outcome.item is not None else None


def _fields(given: PublishMarketplaceItemInput | UpdateMarketplaceItemInput) -> ItemFields:
    return ItemFields(
        name=given.name if isinstance(given, PublishMarketplaceItemInput) else None,
        version=given.version,
        summary=given.summary,
        description=given.description,
        tags=given.tags,
        categories=given.categories,
        visibility=given.visibility,
        groups=given.groups,
    )


@strawberry.type
class Mutation:
    @mutation(description="Publish a job template or a component (or a new version).")
    async def publish_marketplace_item(
        self, info: Info, input: PublishMarketplaceItemInput
    ) -> PublishMarketplaceItemPayload:
        if (input.content is None) == (input.job_id is None):
            error = UserError(
                path=["content"], code="required", message="give exactly one of content and jobId"
            )
            return PublishMarketplaceItemPayload(item=None, outcome=None, errors=[error])
        service = MarketplaceService(info.context.store)
        viewer = info.context.viewer
        if input.content is not None:
            outcome = await asyncio.to_thread(
                service.publish, viewer, input.content, _fields(input)
            )
        else:
            try:
                job_id = expect_global_id(str(input.job_id), "Job", argument="jobId")
            except BadId as exc:
                error = UserError(path=["jobId"], code="not-found", message=str(exc))
                return PublishMarketplaceItemPayload(item=None, outcome=None, errors=[error])
            outcome = await asyncio.to_thread(service.publish_job, viewer, job_id, _fields(input))
        result = None
        if outcome.item is not None:
            result = (
                PublishOutcome.NEW_ITEM
                if outcome.created
                else PublishOutcome.UNCHANGED
                if outcome.unchanged
                else PublishOutcome.NEW_VERSION
            )
        item = None
        warnings: list[UserError] = []
        if outcome.item is not None:
            item = MarketplaceItem.from_value(outcome.item, outcome.version)
            if input.content is not None:
                warnings = await asyncio.to_thread(conversion_warnings, input.content)
        return PublishMarketplaceItemPayload(
            item=item,
            outcome=result,
            errors=_errors(outcome.errors),
            warnings=[*_errors(outcome.warnings), *warnings],
        )

    @mutation(description="Change an item or publish a new version; owner or admin.")
    async def update_marketplace_item(
        self, info: Info, input: UpdateMarketplaceItemInput
    ) -> UpdateMarketplaceItemPayload:
        key = _key(input.id)
        if isinstance(key, UserError):
            return UpdateMarketplaceItemPayload(item=None, errors=[key])
        service = MarketplaceService(info.context.store)
        outcome = await asyncio.to_thread(
            service.update, info.context.viewer, key, _fields(input), input.content
        )
        return UpdateMarketplaceItemPayload(item=_item(outcome), errors=_errors(outcome.errors))

    @mutation(description="Delete an item with all its versions; owner or admin.")
    async def delete_marketplace_item(
        self, info: Info, input: DeleteMarketplaceItemInput
    ) -> DeleteMarketplaceItemPayload:
        key = _key(input.id)
        if isinstance(key, UserError):
            return DeleteMarketplaceItemPayload(item=None, errors=[key])
        service = MarketplaceService(info.context.store)
        outcome = await asyncio.to_thread(service.delete, info.context.viewer, key)
        item = _item(outcome) if not outcome.errors else None
        return DeleteMarketplaceItemPayload(item=item, errors=_errors(outcome.errors))

    @mutation(description="Star (or with star: false, unstar) an item.")
    async def star_marketplace_item(
        self, info: Info, input: StarMarketplaceItemInput
    ) -> StarMarketplaceItemPayload:
        key = _key(input.id)
        if isinstance(key, UserError):
            return StarMarketplaceItemPayload(item=None, errors=[key])
        service = MarketplaceService(info.context.store)
        outcome = await asyncio.to_thread(service.star, info.context.viewer, key, input.star)
        return StarMarketplaceItemPayload(item=_item(outcome), errors=_errors(outcome.errors))

    @mutation(
        description="A job config ready to submit: a template with its parameters, or an empty "
        "job that uses a component; with `submit`, the job is submitted too."
    )
    async def use_marketplace_item(
        self, info: Info, input: UseMarketplaceItemInput
    ) -> UseMarketplaceItemPayload:
        key = _key(input.id)
        if isinstance(key, UserError):
            return UseMarketplaceItemPayload(item=None, config=None, job=None, errors=[key])
        parameters = json_object(input.parameters, "parameters")
        if isinstance(parameters, UserError):
            return UseMarketplaceItemPayload(item=None, config=None, job=None, errors=[parameters])
        service = MarketplaceService(info.context.store)
        viewer = info.context.viewer
        outcome = await asyncio.to_thread(
            service.use,
            viewer,
            key,
            version=input.version,
            parameters=parameters,
            image=input.docker_image,
        )
        item = MarketplaceItem.from_value(outcome.item) if outcome.item is not None else None
        if outcome.config is None or not input.submit:
            return UseMarketplaceItemPayload(
                item=item, config=outcome.config, job=None, errors=_errors(outcome.errors)
            )
        submitted = await info.context.service.submit(  # the item used counts a submit
            viewer, outcome.config, None, input.virtual_cluster, used=[key]
        )
        errors = [UserError.from_issue(issue.within("config")) for issue in submitted.errors]
        job = None
        if submitted.job is not None:
            job = Job.from_value(submitted.job)
            found = await asyncio.to_thread(service.visible, viewer, key)
            item = MarketplaceItem.from_value(found) if found is not None else item
        return UseMarketplaceItemPayload(item=item, config=outcome.config, job=job, errors=errors)
