"""The web UI's files: the app at `/` (any client-side route answers its index.html) and
GraphiQL for browsers at /graphql, both from the Vite build in `server/webui/`.

Any path outside UI_SECTIONS is 404, so a mistyped API address says so instead of answering the
app with 200; serving and caching: docs/web-ui.md.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

BUILD_DIR = Path(__file__).resolve().parents[1] / "webui"  # server/webui/, beside server/app/
UI_SECTIONS = frozenset({"jobs", "cluster", "submit", "marketplace", "users", "signin"})
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"

MISSING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>paigraph: the web UI is not built</title>
<style>body{{font-family:system-ui,sans-serif;max-width:42rem;margin:3rem auto;line-height:1.5}}
code,pre{{background:#f1f2f4;padding:0.1rem 0.3rem}}</style></head>
<body><h1>The web UI is not built</h1>
<p>This paigraph server has no build of its web UI and GraphiQL (looked in
<code>{where}</code>).
The GraphQL API works: POST queries to <code>/graphql</code>.</p>
<p>To build the UI from a clone of paigraph, run <code>./scripts/serve</code> (it builds the UI
when it is missing or older than its sources), or build it yourself with node 18.18 or later:</p>
<pre>cd web
npm ci
npm run build</pre>
<p>then reload this page.</p></body></html>
"""


def build_dir() -> Path:
    """Where the built UI is: $PAIGRAPH_WEBUI_DIR, else the package's own `webui/`."""
    configured = os.environ.get("PAIGRAPH_WEBUI_DIR")
    return Path(configured) if configured else BUILD_DIR


def missing_page(where: Path) -> HTMLResponse:
    return HTMLResponse(
        MISSING.format(where=html.escape(str(where))),
        status_code=503,
        headers={"Cache-Control": NO_CACHE},
    )


def page(name: str, where: Path | None = None) -> Response:
    """One of the build's HTML pages (index.html, graphiql.html), never cached."""
    where = where or build_dir()
    path = where / name
    if not path.is_file():
        return missing_page(where)
    return FileResponse(path, media_type="text/html", headers={"Cache-Control": NO_CACHE})


class Assets(StaticFiles):
    """The build's hashed assets, cached for good: a new build names new files."""

    def __init__(self, where: Path) -> None:
        super().__init__(directory=where / "assets", check_dir=False)

    async def check_config(self) -> None:
        """No build yet is no error: its assets are simply not found (404)."""
        if self.directory is not None and Path(self.directory).is_dir():
            await super().check_config()

    def file_response(
        self,
        full_path: os.PathLike[str] | str,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = IMMUTABLE
        return response


async def app_page(request: Request) -> Response:
    """The app for any path it routes itself (/, /jobs/x, ...): its index.html; 404 for any
    other path."""
    if not is_ui_path(request.url.path):
        return PlainTextResponse(f"nothing is served at {request.url.path}\n", 404)
    return page("index.html")


def is_ui_path(path: str) -> bool:
    """Whether `path` is `/` or lies under one of the app's sections."""
    first = path.lstrip("/").split("/", 1)[0]
    return first == "" or first in UI_SECTIONS


def wants_html(request: Request) -> bool:
    """A browser navigating to the page, not a GraphQL client asking with GET."""
    return "text/html" in request.headers.get("accept", "")
