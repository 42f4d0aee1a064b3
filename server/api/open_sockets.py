"""The websockets open with each token, so a revoked token closes them at once.

A websocket checks its token only when it opens, so each registers here and a sweep (right
after a change through this API, else every SWEEP_SECONDS) closes with 4401 those whose token
is gone, in one query for all. See docs/security.md ("Revoking a token").
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from server.shapes.accounts import token_hash
from server.store import Store

log = logging.getLogger(__name__)

SWEEP_SECONDS = 1.0
REVOKED_CLOSE = 4401  # as an unknown token at the start
REVOKED_REASON = "the token was revoked (its user was removed or given a new token)"

Close = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class _Socket:
    token_hash: str
    close: Close


class OpenSockets:
    """Open websockets by token; `sweep` closes those whose token was revoked."""

    def __init__(self, sweep_seconds: float = SWEEP_SECONDS) -> None:
        self.sweep_seconds = sweep_seconds
        self._sockets: dict[int, _Socket] = {}
        self._numbers = itertools.count(1)
        self._store: Store | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def register(self, store: Store, token: str, close: Close) -> int:
        """Track a socket opened with `token`; `close` ends it. Returns its handle."""
        handle = next(self._numbers)
        self._sockets[handle] = _Socket(token_hash(token), close)
        self._store = store
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_while_open())
        return handle

    def unregister(self, handle: int | None) -> None:
        if handle is not None:
            self._sockets.pop(handle, None)

    def __len__(self) -> int:
        return len(self._sockets)

    async def sweep(self) -> int:
        """Close every socket whose token no longer exists; how many were closed."""
        store = self._store
        if store is None or not self._sockets:
            return 0
        hashes = {socket.token_hash for socket in self._sockets.values()}
        valid = await asyncio.to_thread(store.valid_token_hashes, hashes)
        revoked = [
            (handle, socket)
            for handle, socket in list(self._sockets.items())
            if socket.token_hash not in valid
        ]
        for handle, socket in revoked:
            self._sockets.pop(handle, None)
            try:
                await socket.close()
            except Exception as exc:  # already closing: the client went at the same moment
                log.debug("closing a websocket of a revoked token: %r", exc)
        return len(revoked)

    async def _sweep_while_open(self) -> None:
        while self._sockets:
            await asyncio.sleep(self.sweep_seconds)
            try:
                await self.sweep()
            except Exception as exc:  # the database is away: try again on the next round
                log.warning("checking the tokens of open websockets failed: %r", exc)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
