"""How uvicorn serves the app: the options `paigraph serve`, the tests and the benchmarks
share, so what is measured and tested is what runs."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
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
