"""The local admin serves this machine's own clients only: Host and Origin checks.

Listening on 127.0.0.1 does not keep other sites out (DNS rebinding, and any page may open a
websocket), so while requests without a token act as the local admin, Host must name this
server and a browser's Origin must be a page of it. See docs/security.md ("Who is who").
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import Scope

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_LOCAL_ONLY = "the local admin serves loopback clients only"


def served_address(scope: Scope) -> tuple[str | None, int | None]:
    """The address and port the connection came in on (the ASGI server puts them in `server`),
    or Nones when the server does not say (a Unix socket)."""
    server = scope.get("server")
    if not server:
        return None, None
    host, port = server[0], server[1] if len(server) > 1 else None
    return (str(host).strip("[]").lower() if host else None), port


def _is_this_server(name: str | None, port: int | None, scope: Scope) -> bool:
    """Whether `name`:`port` (port None: left out) is one of this server's loopback names."""
    served_host, served_port = served_address(scope)
    if name is None or (name not in LOOPBACK_NAMES and name != served_host):
        return False
    return served_port is None or port == served_port


def host_refusal(scope: Scope) -> str | None:
    """Why the request's Host header does not name this server; None when it does (or when
    there is none: only browsers are led elsewhere by DNS, and they always send one)."""
    host = Headers(scope=scope).get("host")
    if host is None:
        return None
    try:
        parts = urlsplit(f"//{host.strip()}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return f"Host {host!r} is not a host name; {_LOCAL_ONLY}"
    if port is None:  # "Host: localhost" names the server whatever its port
        port = served_address(scope)[1]
    if _is_this_server(name, port, scope):
        return None
    return f"Host {host!r} is not this server's loopback address; {_LOCAL_ONLY}"


def origin_refusal(scope: Scope) -> str | None:
    """Why the page a browser's request comes from may not use the local admin; None when it
    may, or when there is no Origin header (not a browser, or a same-origin GET)."""
    origin = Headers(scope=scope).get("origin")
    if origin is None or _is_local_page(origin, scope):
        return None
    _, served_port = served_address(scope)
    where = f"http://127.0.0.1:{served_port}" if served_port else "http://127.0.0.1"
    return (
        f"Origin {origin!r} is not this server's loopback address; {_LOCAL_ONLY} "
        f"(pages on {where} or localhost)"
    )


def _is_local_page(origin: str, scope: Scope) -> bool:
    """Whether `origin` is an http page on this server's loopback address and port."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or 80  # browsers leave out the scheme's default port
    except ValueError:
        return False
    return parts.scheme == "http" and _is_this_server(parts.hostname, port, scope)


def local_admin_refusal(scope: Scope) -> str | None:
    """Why a request may not act as the local admin (Host first, then Origin); None if it may."""
    return host_refusal(scope) or origin_refusal(scope)
