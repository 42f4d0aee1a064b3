"""Who is asking: bearer tokens, and the local admin of a fresh loopback-only server.

A server that listens on loopback only and has no user yet treats every request without a
token as the reserved user `local` (an admin, created on demand), so the first `paigraph serve`
needs no setup. The first real user (`paigraph users add`) switches token checks on for good;
`local` itself is never counted. A server reachable from other hosts always needs a token.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping

from server.api.errors import Unauthorized
from server.shapes.values import User
from server.store import Store

_NEED_TOKEN = (
    "this server needs a token: send the header `Authorization: Bearer <token>` "
    "(a token comes from `paigraph users add NAME`)"
)


def is_loopback(host: str) -> bool:
    """Whether `host` (what the server binds to) accepts connections from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_token(value: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None when there is no value."""
    if value is None or not value.strip():
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be `Bearer <token>`")
    return token.strip()


def token_from_params(params: Mapping[str, object]) -> str | None:
    """The token of a websocket `connection_init` payload: {"Authorization": "Bearer ..."}
    (any capitalisation) or {"token": "..."}."""
    for key, value in params.items():
        if key.lower() == "authorization" and value is not None:
            if not isinstance(value, str):
                raise Unauthorized("connection_init: Authorization must be a string")
            return bearer_token(value)
    token = params.get("token")
    if token is None:
        return None
    if not isinstance(token, str) or not token.strip():
        raise Unauthorized("connection_init: token must be a non-empty string")
    return token.strip()


class Authenticator:
    """Turns a token (or its absence) into a user; raises Unauthorized otherwise."""

    def __init__(self, store: Store, *, loopback_only: bool) -> None:
        self.store = store
        self.loopback_only = loopback_only
        # Once a real user exists tokens are required for good: no need to count again.
        self._users_exist = not loopback_only
        self._local: User | None = None
        self._lock = asyncio.Lock()

    async def user(self, token: str | None) -> User:
        if token is not None:
            user = await asyncio.to_thread(self.store.user_for_token, token)
            if user is None:
                raise Unauthorized("the token is not valid on this server")
            return user
        if await self.serves_local_admin():
            return await self._local_admin()
        raise Unauthorized(_NEED_TOKEN)

    async def serves_local_admin(self) -> bool:
        """Whether a request without a token acts as the local admin (loopback only, no user
        yet); such requests must come from this machine, see `server.api.loopback`."""
        if self._users_exist:
            return False
        if await asyncio.to_thread(self.store.count_users) == 0:
            return True
        self._users_exist = True
        return False

    async def _local_admin(self) -> User:
        async with self._lock:
            if self._local is None:
                self._local = await asyncio.to_thread(self.store.local_admin)
            return self._local
