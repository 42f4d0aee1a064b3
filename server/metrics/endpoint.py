"""GET /metrics: this app's registry in the Prometheus text format, to readers the access rule
lets in (server.metrics.access)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from server.metrics.access import access_refusal

if TYPE_CHECKING:
    from server.api.context import RuntimeSlot
    from server.metrics.registry import AppMetrics

# The classic text format every Prometheus version reads (the series' names are plain ASCII).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_endpoint(
    slot: RuntimeSlot, metrics: AppMetrics
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        runtime = slot.current
        if runtime is None:
            return PlainTextResponse("the server is starting or stopping\n", 503)
        refusal = await access_refusal(request, runtime.auth, metrics.settings)
        if refusal is not None:
            return refusal
        return Response(await metrics.exposition(runtime), media_type=CONTENT_TYPE)

    return endpoint
