"""How uvicorn serves the app: the options `paigraph serve`, the tests and the benchmarks
share, so what is measured and tested is what runs."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from server.api.limits import MAX_BODY_BYTES

# Websocket messages here are small JSON documents (graphql-transport-ws: events, log chunks
# of a few KiB). Per-message deflate saves a few hundred bytes a message at the price of a
# zlib compressor per connection (memory) and a compression per message (CPU): a change
# followed by a thousand subscribers spent about a fifth of its delivery time compressing.
# The app closes a websocket whose message is over its body limit with 4413 and a reason;
# a message far beyond (over WS_MAX_MESSAGE_BYTES) is cut off by uvicorn while it arrives
# (close code 1009) instead of being held in memory whole first.
WS_MAX_MESSAGE_BYTES = 2 * MAX_BODY_BYTES
SERVER_OPTIONS: dict[str, Any] = {
    "ws_per_message_deflate": False,
    "ws_max_size": WS_MAX_MESSAGE_BYTES,
}


def server_config(app: Any, **options: Any) -> uvicorn.Config:
    """A uvicorn config for `app` with the server's options (`options` add to them)."""
    return uvicorn.Config(app, **{**SERVER_OPTIONS, **options})


class CannotListen(Exception):
    """The address cannot be listened on; the message is for the user."""


def listening_socket(host: str, port: int, port_settings: str) -> socket.socket:
    """A socket bound to host:port, made before anything is announced or set up: a taken port
    is then said in words (naming `port_settings`, how to choose another) instead of
    uvicorn's raw `[Errno 98]` after the server already said it was serving."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise CannotListen(f"cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CannotListen(f"port {port} is in use; use {port_settings}") from None
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class AnnouncingServer(uvicorn.Server):
    """A uvicorn server that calls `announce` once it listens and the app has started, so
    that nothing claims to serve before it does."""

    def __init__(self, config: uvicorn.Config, announce: Callable[[], None]) -> None:
        super().__init__(config)
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._announce()


@asynccontextmanager
async def on_loopback(app: Any, **options: Any) -> AsyncIterator[str]:
    """`app` served in this event loop on a free loopback port (for the tests and benchmarks
    that talk to it over real sockets); yields its base URL, and stops it at the end."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(server_config(app, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()
