"""How uvicorn serves the app: the options `paigraph serve`, the tests and the benchmarks
share, so what is measured and tested is what runs."""

from __future__ import annotations

from typing import Any

import uvicorn

# Websocket messages here are small JSON documents (graphql-transport-ws: events, log chunks
# of a few KiB). Per-message deflate saves a few hundred bytes a message at the price of a
# zlib compressor per connection (memory) and a compression per message (CPU): a change
# followed by a thousand subscribers spent about a fifth of its delivery time compressing.
SERVER_OPTIONS: dict[str, Any] = {"ws_per_message_deflate": False}


def server_config(app: Any, **options: Any) -> uvicorn.Config:
    """A uvicorn config for `app` with the server's options (`options` add to them)."""
    return uvicorn.Config(app, **{**SERVER_OPTIONS, **options})
