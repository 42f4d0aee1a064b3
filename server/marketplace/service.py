"""The marketplace's rules: who may publish, change, delete, star and use which item.

An item the user may not see is reported exactly like one that does not exist (the rules:
docs/security.md). Methods are synchronous (the store is) and return outcomes with every
problem the user can fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from server.marketplace.items import (
    IssuesFound,
    ItemDocument,
    api_id,
    check_groups,
    check_labels,
    check_version,
    check_visibility,
    details_for,
    item_key,
    read_item,
)
from server.marketplace.rename import renamed
from server.marketplace.use import component_job, template_config
from server.protocol import Issue, parse_job
from server.protocol.model import JobSpec
from server.protocol.secrets import MASKED_SECRETS, declare_secrets, referenced_secrets
from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import (
    KindMismatch,
    MarketplaceItem,
    NameTaken,
    NotItemOwner,
    Reader,
    UnknownItem,
    VersionExists,
    Visibility,
)
from server.shapes.values import User
from server.store import Store


@dataclass(frozen=True)
class ItemOutcome:
    item: MarketplaceItem | None
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)  # publish: e.g. a secret left out
    created: bool = False  # publish: a new item
    unchanged: bool = False  # publish: that version existed with the same content
    version: str | None = None  # publish: the version published (or found)


@dataclass(frozen=True)
class UseOutcome:
    item: MarketplaceItem | None
    config: str | None
    errors: list[Issue] = field(default_factory=list)


@dataclass(frozen=True)
class ItemFields:
    """What publishing or updating may set; None leaves a field as it is (or as the content
    says, for a new item)."""

    version: str | None = None
    summary: str | None = None
    description: str | None = None
    tags: list[str] | None = None
    categories: list[str] | None = None
    visibility: Visibility | None = None
    groups: list[str] | None = None
    name: str | None = None  # publishing only: another name than the content's

    @property
    def describes(self) -> bool:
        """Whether any descriptive field (beyond the version) is given."""
        values = (self.summary, self.description, self.tags, self.categories, self.visibility)
        return any(v is not None for v in (*values, self.groups))


def published_config(config: str) -> str:
    """A stored job config as it may be published: its masked secrets (which a job config
    always has masked) declared by the names it refers to, so it reads as a template whose
    user supplies them rather than as a config whose secrets were lost."""
    if not MASKED_SECRETS.search(config):
        return config
    return declare_secrets(config, referenced_secrets(config))


def _not_found(key: str) -> Issue:
    return Issue.at(["id"], "not-found", f"no marketplace item has id {api_id(key)!r}")


class MarketplaceService:
    def __init__(self, store: Store) -> None:
        self.store = store

    def reader(self, user: User) -> Reader:
        return self.store.reader_for(user.id, admin=user.admin)

    def visible(self, user: User, key: str) -> MarketplaceItem | None:
        """The item, when the user may see it."""
        item = self.store.get_item(key)
        if item is None or not self.reader(user).may_see(item):
            return None
        return item

    # --- publishing ---

    def publish(self, user: User, content: str, fields: ItemFields) -> ItemOutcome:
        """Publish `content` as a new item or a new version of the user's item of that name."""
        try:
            return self._publish(user, read_item(content), fields)
        except IssuesFound as exc:
            return ItemOutcome(item=None, errors=exc.issues)

    def publish_job(self, user: User, job_id: str, fields: ItemFields) -> ItemOutcome:
        """Publish a job's config (secrets masked) as a template, with the parameter values it
        was submitted with; only the job's owner or an admin may."""
        job = self.store.get_job(job_id)
        if job is None:
            missing = Issue.at(["jobId"], "not-found", f"no job has id {job_id!r}")
            return ItemOutcome(None, [missing])
        if not user.admin and job.owner_id != user.id:
            return ItemOutcome(
                None,
                [
                    Issue.at(
                        ["jobId"],
                        "forbidden",
                        f"job {job.name!r} belongs to {job.owner}; only its owner or an admin "
                        "may publish it",
                    )
                ],
            )
        config = published_config(self.store.job_config(job_id) or "")
        submitted = self.store.job_specs([job_id]).get(job_id)
        try:
            document = read_item(config, path="jobId")
            if submitted is not None and document.spec is not None:
                declared = document.spec.parameters
                used = {
                    name: value
                    for name, value in submitted.parameters.items()
                    if name in declared and declared[name] != value
                }
                if used:
                    document = read_item(template_config(document, used), path="jobId")
            return self._publish(user, document, fields)
        except IssuesFound as exc:
            return ItemOutcome(item=None, errors=exc.issues)

    def _publish(self, user: User, document: ItemDocument, fields: ItemFields) -> ItemOutcome:
        name = fields.name.strip() if fields.name is not None else None
        if name is not None and name != document.name:
            if not name:
                raise IssuesFound([Issue.at(["name"], "required", "give a name, or none at all")])
            document = renamed(document, name)
        version = fields.version.strip() if fields.version is not None else document.version
        if fields.version is not None and version is not None:
            problem = check_version(version, ["version"])
            if problem is not None:
                raise IssuesFound([problem])
        details = details_for(
            document,
            summary=fields.summary,
            description=fields.description,
            tags=fields.tags,
            categories=fields.categories,
            visibility=fields.visibility,
            groups=fields.groups,
        )
        try:
            result = self.store.publish_item(
                actor=self.reader(user),
                name=document.name,
                kind=document.kind,
                version=version,
                content=document.content,
                details=details,
            )
        except NameTaken as exc:
            raise IssuesFound([Issue.at(["content", "name"], "name-taken", str(exc))]) from None
        except KindMismatch as exc:
            raise IssuesFound([Issue.at(["content", "type"], "kind-mismatch", str(exc))]) from None
        except VersionExists as exc:
            raise IssuesFound([Issue.at(["version"], "version-exists", str(exc))]) from None
        item = result.item
        if not result.created and fields.describes:
            item = self._change(user, item, fields)
        return ItemOutcome(
            item=item,
            warnings=list(document.warnings),
            created=result.created,
            unchanged=result.unchanged,
            version=result.version,
        )

    # --- changing ---

    def update(
        self, user: User, key: str, fields: ItemFields, content: str | None = None
    ) -> ItemOutcome:
        """Change an item's details; with `content`, publish it as a new version first."""
        item = self.visible(user, key)
        if item is None:
            return ItemOutcome(None, [_not_found(key)])
        if not self.reader(user).may_change(item):
            return ItemOutcome(item, [_forbidden(item, "change")])
        try:
            if content is not None:
                document = read_item(content)
                if document.name != item.name:
                    raise IssuesFound(
                        [
                            Issue.at(
                                ["content", "name"],
                                "name-mismatch",
                                f"the content is named {document.name!r}, but this item is "
                                f"{item.name!r}: a new version keeps the item's name",
                            )
                        ]
                    )
                item = self._publish(user, document, ItemFields(version=fields.version)).item
                assert item is not None
            elif fields.version is not None:
                raise IssuesFound(
                    [Issue.at(["version"], "content-required", "a new version needs `content`")]
                )
            if fields.describes:
                item = self._change(user, item, fields)
        except IssuesFound as exc:
            return ItemOutcome(item=None, errors=exc.issues)
        return ItemOutcome(item=item)

    def _change(self, user: User, item: MarketplaceItem, fields: ItemFields) -> MarketplaceItem:
        tags, problems = check_labels(fields.tags, "tags")
        categories, more = check_labels(fields.categories, "categories")
        problems += more
        groups, more = check_groups(fields.groups)
        problems += more
        visibility, more = check_visibility(
            fields.visibility, groups, current=item.visibility, current_groups=item.groups
        )
        problems += more
        if problems:
            raise IssuesFound(problems)
        try:
            return self.store.update_item(
                item.key,
                actor=self.reader(user),
                summary=fields.summary.strip() if fields.summary is not None else None,
                description=fields.description.strip() if fields.description is not None else None,
                tags=tags,
                categories=categories,
                visibility=visibility,
                groups=groups,
            )
        except NotItemOwner as exc:
            raise IssuesFound([Issue.at(["id"], "forbidden", str(exc))]) from None
        except UnknownItem:
            raise IssuesFound([_not_found(item.key)]) from None

    def delete(self, user: User, key: str) -> ItemOutcome:
        """Delete the item with all its versions; its owner or an admin only."""
        item = self.visible(user, key)
        if item is None:
            return ItemOutcome(None, [_not_found(key)])
        try:
            return ItemOutcome(self.store.delete_item(key, actor=self.reader(user)))
        except NotItemOwner:
            return ItemOutcome(item, [_forbidden(item, "delete")])
        except UnknownItem:
            return ItemOutcome(None, [_not_found(key)])

    def star(self, user: User, key: str, starred: bool) -> ItemOutcome:
        if self.visible(user, key) is None:
            return ItemOutcome(None, [_not_found(key)])
        try:
            return ItemOutcome(self.store.set_star(key, user.id, starred))
        except UnknownItem:
            return ItemOutcome(None, [_not_found(key)])

    # --- using ---

    def use(
        self,
        user: User,
        key: str,
        *,
        version: str | None = None,
        parameters: dict[str, Any] | None = None,
        image: str | None = None,
    ) -> UseOutcome:
        """A job config ready to submit: the template with its parameters, or an empty job
        that uses the component (see `server.marketplace.use`)."""
        item = self.visible(user, key)
        if item is None:
            return UseOutcome(None, None, [_not_found(key)])
        found = self.store.item_version(key, version)
        if found is None:
            known = ", ".join(v.version for v in self.store.item_versions([key])[key])
            message = f"item {item.name!r} has no version {version!r} (its versions: {known})"
            return UseOutcome(item, None, [Issue.at(["version"], "not-found", message)])
        try:
            document = read_item(found.content)
            if item.kind is ItemKind.JOB_TEMPLATE:
                if image is not None:
                    raise IssuesFound(
                        [
                            Issue.at(
                                ["dockerImage"],
                                "not-applicable",
                                "a job template names its own docker images",
                            )
                        ]
                    )
                config = template_config(document, parameters or {})
            else:
                config = component_job(
                    document,
                    item_id=api_id(key),
                    version=version,
                    variables=parameters or {},
                    image=image,
                )
        except IssuesFound as exc:
            return UseOutcome(item, None, exc.issues)
        return UseOutcome(item, config)

    def count_submit(self, key: str) -> None:
        """A job was submitted from the item."""
        self.store.count_submit(key)

    def count_submits(self, item_ids: Iterable[str]) -> None:
        """A job was submitted that uses these items (API IDs, as reference resolution
        reports them, or keys); each counts once."""
        keys = {key for item_id in item_ids if (key := item_key(item_id)) is not None}
        for key in sorted(keys):
            self.store.count_submit(key)

    def count_job_submit(
        self,
        viewer: User,
        used: Iterable[str],
        made_from: Iterable[str] = (),
        config: str | None = None,
    ) -> None:
        """A job was submitted: count a submit of every item its references took in (`used`),
        and of every item it was made from (`made_from`, API IDs) that `viewer` may see and
        whose content the submitted `config` (as written, parameters not rendered) really holds
        (`holds_item`). Naming an item the job does not use counts nothing; an ID of something
        else, or of an item hidden from the viewer, counts nothing and reveals nothing; each
        item counts once."""
        keys = set(used)
        named = {key for i in made_from if (key := item_key(i)) is not None and key not in keys}
        visible = [k for k in named if self.visible(viewer, k) is not None]
        submitted = parse_job(config).spec if visible and config else None
        if visible and submitted is not None:
            versions = self.store.item_versions(visible)
            keys |= {
                key
                for key in visible
                if any(holds_item(submitted, v.content) for v in versions.get(key, []))
            }
        if keys:
            self.count_submits(keys)


def holds_item(job: JobSpec, content: str) -> bool:
    """Whether `job` holds the item published as `content`: a template's every task role with
    the same commands (its name and parameters may have been changed); a component as one of
    the job's prerequisites of the same type and URIs (a docker image: the image it runs in)."""
    try:
        document = read_item(content)
    except IssuesFound:
        return False
    if document.spec is not None:
        roles = {role.name: role.commands for role in job.task_roles}
        template = document.spec.task_roles
        return bool(template) and all(roles.get(r.name) == r.commands for r in template)
    component = document.component
    if component is None or not component.uri:
        return False
    return any(p.type is component.type and p.uri == component.uri for p in job.prerequisites)


def _forbidden(item: MarketplaceItem, action: str) -> Issue:
    return Issue.at(
        ["id"],
        "forbidden",
        f"item {item.name!r} belongs to {item.owner}; only its owner or an admin may {action} it",
    )
