"""Every HTTP response carries the security headers (server.app.security_headers): the app's pages,
its assets, GraphiQL, the API and the health checks. Whether the pages still work under the
policy, and that another site cannot frame them: tests/web/test_web_ui.py, in the browser."""

from __future__ import annotations

import pytest

from server.app.asgi import create_app
from server.app.security_headers import CONTENT_SECURITY_POLICY
from server.app.webapp import build_dir
from tests.api_support import serving

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}


async def test_every_page_asset_and_answer_carries_the_security_headers(db_url: str) -> None:
    assets = sorted(p.name for p in (build_dir() / "assets").glob("*.js"))
    asset = f"/assets/{assets[0]}" if assets else "/assets/none.js"
    async with serving(create_app(db_url=db_url, backend=None)) as client:
        responses = {
            "app": await client.get("/", headers=HTML),
            "app route": await client.get("/jobs/x", headers=HTML),
            "graphiql": await client.get("/graphql", headers=HTML),
            "asset": await client.get(asset),
            "query": await client.post("/graphql", json={"query": "{ viewer { name } }"}),
            "refusal": await client.post(
                "/graphql", content=b"{", headers={"content-type": "application/json"}
            ),
            "health": await client.get("/healthz"),
        }
    for what, response in responses.items():
        headers = response.headers
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, what
        assert headers["x-frame-options"] == "DENY", what
        assert headers["x-content-type-options"] == "nosniff", what
        assert headers["referrer-policy"] == "no-referrer", what
    policy = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert policy["script-src"] == "'self'"  # no inline script, no eval
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
