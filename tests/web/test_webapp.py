"""The web UI's files as the server hands them out: the app for every client-side route, its
hashed assets cached for good and its pages never, GraphiQL for browsers at /graphql, and a
page saying how to build the UI when there is no build (never a crash)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from server.app.asgi import create_app
from server.app.webapp import BUILD_DIR, UI_SECTIONS
from tests.api_support import gql, serving

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small stand-in for the Vite build, where PAIGRAPH_WEBUI_DIR points."""
    where = tmp_path / "webui"
    (where / "assets").mkdir(parents=True)
    (where / "index.html").write_text("<!doctype html><title>app</title><div id=root></div>")
    (where / "graphiql.html").write_text("<!doctype html><title>paigraph GraphiQL</title>")
    (where / "assets" / "main-abc123.js").write_text("console.log('app')")
    monkeypatch.setenv("PAIGRAPH_WEBUI_DIR", str(where))
    return where


async def test_every_client_route_answers_the_app_page_uncached(build: Path) -> None:
    async with serving(create_app(db_url="sqlite://", backend=None)) as client:
        for path in ("/", "/jobs", "/jobs/alice~train", "/cluster", "/marketplace/x"):
            response = await client.get(path, headers=HTML)
            assert response.status_code == 200, path
            assert "<title>app</title>" in response.text
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["content-type"].startswith("text/html")


async def test_paths_that_are_no_page_of_the_app_are_404(build: Path) -> None:
    async with serving(create_app(db_url="sqlite://", backend=None)) as client:
        for path in ("/api/nope", "/favicon.ico", "/robots.txt", "/graphql/x", "/healthz/x"):
            response = await client.get(path, headers=HTML)
            assert response.status_code == 404, path
            assert "<title>app</title>" not in response.text, path
        for path in ("/jobs/alice~train.v2-0a1b2c3d", "/marketplace/x/edit", "/users"):
            assert (await client.get(path, headers=HTML)).status_code == 200, path


def test_the_sections_the_server_serves_the_app_under_are_the_apps_routes() -> None:
    """UI_SECTIONS must follow web/src/App.tsx, or a new page of the app would be 404."""
    app = (ROOT / "web" / "src" / "App.tsx").read_text()
    routes = re.findall(r'<Route path="/([^"/]*)', app)
    assert len(routes) > 5, "the routes of App.tsx are not found"
    assert {first for first in routes if first not in ("", "*")} == UI_SECTIONS


async def test_hashed_assets_are_cached_for_good_and_unknown_ones_are_404(build: Path) -> None:
    async with serving(create_app(db_url="sqlite://", backend=None)) as client:
        asset = await client.get("/assets/main-abc123.js")
        assert asset.status_code == 200 and asset.text == "console.log('app')"
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert (await client.get("/assets/gone-000.js")).status_code == 404


async def test_a_browser_at_graphql_gets_paigraphs_own_graphiql_and_clients_the_api(
    build: Path,
) -> None:
    async with serving(create_app(db_url="sqlite://", backend=None)) as client:
        page = await client.get("/graphql", headers=HTML)
        assert page.status_code == 200 and "paigraph GraphiQL" in page.text
        assert page.headers["cache-control"] == "no-cache"
        assert "cdn" not in page.text.lower() and "unpkg" not in page.text.lower()
        body = await gql(client, "{ viewer { name admin } }")
        assert body["data"]["viewer"] == {"name": "local", "admin": True}
        assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_without_a_build_the_pages_say_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAIGRAPH_WEBUI_DIR", str(tmp_path / "nothing"))
    async with serving(create_app(db_url="sqlite://", backend=None)) as client:
        for path in ("/", "/jobs/x", "/graphql"):
            response = await client.get(path, headers=HTML)
            assert response.status_code == 503, path
            assert "The web UI is not built" in response.text
            assert "npm run build" in response.text and "./scripts/serve" in response.text
        assert (await client.get("/assets/main.js")).status_code == 404
        assert (await gql(client, "{ version }"))["data"]["version"]


def test_the_build_lands_inside_the_package_and_is_declared_package_data() -> None:
    assert BUILD_DIR == ROOT / "server" / "webui"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]["server"]
    assert "webui/*.html" in data and "webui/assets/*" in data
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/server/webui/" in ignored
    vite = (ROOT / "web" / "vite.config.ts").read_text()
    assert '"../server/webui"' in vite
