"""Headers every HTTP response carries: the web UI's pages, its assets, GraphiQL and the API.

- `Content-Security-Policy`: scripts, connections (the API and its websockets), workers
  (GraphiQL's editor runs its language services in module workers) and fonts come from this
  server only; no inline script, no `eval`. Inline styles are allowed: the editors (CodeMirror
  in the app, monaco in GraphiQL) set styles on their elements. Images may also be `data:`
  URLs (the pages' empty icon, the editors' glyphs). No plugin, no `<base>`, forms post to this
  server only.
- `frame-ancestors 'none'` and `X-Frame-Options: DENY`: no other site can show a page of this
  server in a frame, so buttons such as Stop and Delete cannot be clicked through a page
  disguised over them.
- `X-Content-Type-Options: nosniff`: a file is only ever what its content type says.
- `Referrer-Policy: no-referrer`: the addresses of this server's pages (job names in them)
  go nowhere else.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_NAMES = {name for name, _ in HEADERS}


class SecurityHeaders:
    """ASGI middleware: `HEADERS` on every HTTP response (websockets pass untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() not in _NAMES]
                message = {**message, "headers": [*headers, *HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
