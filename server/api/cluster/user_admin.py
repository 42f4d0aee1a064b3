"""Users for admins: list them, add one, remove one, give one a new token.

The same as `paigraph users add|list|remove|token` on the database. Removing a user or giving
them a new token revokes their old tokens at once: the next HTTP request with one is refused,
and the websockets opened with one are closed now (OpenSockets.sweep). A removed user's jobs
keep running and stay on record under their name, and so do their marketplace items.
"""

from __future__ import annotations

import asyncio

import strawberry

from server.api.context import Info
from server.api.errors import ApiError
from server.api.graph_types import User, UserError
from server.api.mutation_field import mutation
from server.shapes.accounts import check_name
from server.shapes.store_errors import StoreError, UnknownUser
from server.shapes.values import User as StoredUser

_ADMINS_ONLY = "only an admin may manage users"


@strawberry.type
class Query:
    @strawberry.field(
        description="Every user, by name (admins only); `removed: true` lists the removed ones too."
    )
    async def users(self, info: Info, removed: bool = False) -> list[User]:
        if not info.context.viewer.admin:
            raise ApiError(_ADMINS_ONLY, "FORBIDDEN")
        found = await asyncio.to_thread(info.context.store.list_users, removed=removed)
        return [User.from_value(user) for user in found]


@strawberry.input
class AddUserInput:
    name: str
    admin: bool = False
    virtual_clusters: list[str] = strawberry.field(
        default_factory=list,
        description="Virtual clusters the user may submit to besides `default`.",
    )


@strawberry.input
class UserNameInput:
    name: str


@strawberry.type(description="A user, and their token when one was just made (shown once).")
class UserTokenPayload:
    user: User | None
    token: str | None
    errors: list[UserError]


@strawberry.type
class RemoveUserPayload:
    user: User | None
    errors: list[UserError]


@strawberry.type
class Mutation:
    @mutation(description="Add a user and make their first token (admins only).")
    async def add_user(self, info: Info, input: AddUserInput) -> UserTokenPayload:
        refused = _refusal(info)
        if refused:
            return UserTokenPayload(user=None, token=None, errors=refused)
        store = info.context.store

        clusters = [cluster.strip() for cluster in input.virtual_clusters]
        for index, cluster in enumerate(clusters):  # all checked before the user is made
            try:
                check_name(cluster, "virtual cluster name")
            except StoreError as exc:
                error = UserError(
                    path=["virtualClusters", str(index)], code="invalid", message=str(exc)
                )
                return UserTokenPayload(user=None, token=None, errors=[error])

        def add() -> tuple[StoredUser, str]:
            user, token = store.create_user(input.name.strip(), admin=input.admin)
            for cluster in clusters:
                store.add_membership(user.id, cluster)
            return user, token

        try:
            user, token = await asyncio.to_thread(add)
        except StoreError as exc:
            return UserTokenPayload(user=None, token=None, errors=[_error("name", exc)])
        return UserTokenPayload(user=User.from_value(user), token=token, errors=[])

    @mutation(
        description="Remove a user (admins only): their tokens stop working at once, open "
        "websockets included; their jobs keep running under their name, their items stay."
    )
    async def remove_user(self, info: Info, input: UserNameInput) -> RemoveUserPayload:
        refused = _refusal(info)
        if not refused and input.name == info.context.viewer.name:
            refused = [
                UserError(
                    path=["name"],
                    code="forbidden",
                    message="you cannot remove yourself; another admin can",
                )
            ]
        if refused:
            return RemoveUserPayload(user=None, errors=refused)
        try:
            user = await asyncio.to_thread(info.context.store.remove_user, input.name)
        except StoreError as exc:
            return RemoveUserPayload(user=None, errors=[_error("name", exc)])
        await info.context.runtime.sockets.sweep()
        return RemoveUserPayload(user=User.from_value(user), errors=[])

    @mutation(
        description="Give a user a new token in place of all their old ones (admins only); "
        "the old ones stop working at once, open websockets included."
    )
    async def reset_user_token(self, info: Info, input: UserNameInput) -> UserTokenPayload:
        refused = _refusal(info)
        if refused:
            return UserTokenPayload(user=None, token=None, errors=refused)
        store = info.context.store
        try:
            token = await asyncio.to_thread(store.reset_token, input.name)
        except StoreError as exc:
            return UserTokenPayload(user=None, token=None, errors=[_error("name", exc)])
        user = await asyncio.to_thread(store.user_named, input.name)
        await info.context.runtime.sockets.sweep()
        return UserTokenPayload(
            user=User.from_value(user) if user is not None else None, token=token, errors=[]
        )


def _refusal(info: Info) -> list[UserError]:
    if info.context.viewer.admin:
        return []
    return [UserError(path=[], code="forbidden", message=_ADMINS_ONLY)]


def _error(field: str, exc: StoreError) -> UserError:
    code = "not-found" if isinstance(exc, UnknownUser) else "invalid"
    return UserError(path=[field], code=code, message=str(exc))
