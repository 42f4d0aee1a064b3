"""The pieces every part of the graph shares: errors, nodes, pages and users.

Jobs (`jobs/types.py`), the marketplace's types and the queries and mutations of every area answer
with these, so they live in a module of their own that imports none of them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry

from server.api.context import Info
from server.api.errors import ApiError
from server.api.ids import global_id
from server.api.resolver_field import resolver_field
from server.protocol import Issue
from server.shapes.values import User as StoredUser


@strawberry.type(
    description="A problem the user can fix: where it is, a stable code, and what to do."
)
class UserError:
    """How the API shows an `Issue` (errors and warnings alike): its path as segments."""

    path: list[str]
    code: str
    message: str

    @classmethod
    def from_issue(cls, issue: Issue) -> UserError:
        return cls(path=issue.path_parts(), code=issue.code, message=issue.message)


@strawberry.interface(description="An object with a global ID; `node(id:)` finds it again.")
class Node:
    id: strawberry.ID


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.type
class User(Node):
    id: strawberry.ID
    name: str
    admin: bool
    created_at: datetime
    removed_at: datetime | None = strawberry.field(
        description="When the user was removed: their tokens no longer work; their jobs and "
        "items keep their name."
    )
    user_id: strawberry.Private[int]  # the user's id in the store; `id` is the global ID

    @classmethod
    def from_value(cls, user: StoredUser) -> User:
        return cls(
            id=strawberry.ID(global_id("User", user.id)),
            name=user.name,
            admin=user.admin,
            created_at=user.created_at,
            removed_at=user.removed_at,
            user_id=user.id,
        )

    @resolver_field(description="The virtual clusters this user is a member of.")
    async def virtual_clusters(self, info: Info) -> list[str]:
        return await info.context.loaders.memberships.load(self.user_id) or []


async def owner_of(info: Info, user_id: int, what: str) -> User:
    """The user who owns `what` (a job, an item), through the request's loader."""
    user = await info.context.loaders.user.load(user_id)
    if user is None:  # a foreign key guarantees the row; a vanished one is our fault
        raise RuntimeError(f"{what} has no owner row")
    return User.from_value(user)


def not_found(what: str, argument: str = "id") -> ApiError:
    return ApiError(f"{argument}: no {what} has that ID", "NOT_FOUND")


def json_object(value: Any, argument: str) -> dict[str, Any] | UserError:
    """`value` when it is a JSON object (or null), else a UserError naming the argument."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        return UserError(path=[argument], code="type", message=f"{argument} must be a JSON object")
    return value
