"""Who may read /metrics: by default this machine's own clients and admins' bearer tokens, since
the series name jobs, users and what each instance uses; PAIGRAPH_METRICS_OPEN opens it.

A local client must connect from loopback, name this server in its Host header, come from one
of its pages in a browser and not through a proxy (docs/metrics.md, Who may read it).
"""

from __future__ import annotations

import ipaddress

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from server.api.auth import Authenticator, bearer_token
from server.api.errors import ApiError, Unauthorized
from server.api.loopback import local_admin_refusal
from server.metrics.settings import OPEN_ENV, MetricsSettings

PROXY_HEADERS = ("forwarded", "x-forwarded-for")
NEED_ADMIN = (
    "reading /metrics takes an admin's token (`Authorization: Bearer <token>`) "
    f"unless the client is on this machine; {OPEN_ENV}=true opens it to every client"
)


async def access_refusal(
    request: Request, auth: Authenticator, settings: MetricsSettings
) -> Response | None:
    """The answer refusing `request` (401 without a usable token, 403 for a token that is not
    an admin's); None when it may read the metrics."""
    if settings.open:
        return None
    try:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            if is_local_client(request):
                return None
            raise Unauthorized(NEED_ADMIN)
        user = await auth.user(token)
    except Unauthorized as exc:
        return PlainTextResponse(f"{exc}\n", 401, headers={"WWW-Authenticate": "Bearer"})
    except ApiError as exc:  # the token cannot be checked now (the database is away)
        return PlainTextResponse(f"{exc}\n", 503)
    if not user.admin:
        return PlainTextResponse(f"{NEED_ADMIN}; user {user.name!r} is no admin\n", 403)
    return None


def is_local_client(request: Request) -> bool:
    """Whether the request comes from a client on this machine (see the module's docstring)."""
    client = request.client
    if client is None or any(name in request.headers for name in PROXY_HEADERS):
        return False
    try:
        loopback = ipaddress.ip_address(client.host.strip("[]")).is_loopback
    except ValueError:
        return False
    return loopback and local_admin_refusal(request.scope) is None
