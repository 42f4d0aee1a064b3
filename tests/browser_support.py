"""Driving the web UI in a real browser: Debian's chromium under Playwright, against a real
`paigraph serve` process (tests/e2e/test_e2e_server.py's Server) on the Docker simulator.

Every page is watched: a console error, an uncaught exception, a failed request or an HTTP
error answer fails the test at its end, unless the test said it expects exactly that. Pages
are photographed into build/screenshots/ for CI to keep.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import Server, served
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("PAIGRAPH_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN_KEY = "paigraph.token"  # where web/src/lib/auth.ts keeps the token


def need_browser_and_build() -> None:
    """Skip (saying what is missing) without Playwright, chromium or a built UI."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    if not (ROOT / "server" / "webui" / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium browser (Playwright cannot download its own builds here)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watch:
    """What went wrong on a page; `expect` lists patterns of problems a test provokes."""

    problems: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def expect(self, pattern: str) -> None:
        self.expected.append(re.compile(pattern))

    def add(self, problem: str) -> None:
        self.problems.append(problem)

    def unexpected(self) -> list[str]:
        return [p for p in self.problems if not any(e.search(p) for e in self.expected)]


# Chromium cancels the requests under way when the host's interfaces change, as they do each
# time Docker makes or removes a job's network or a container's veth (other tests' jobs, on the
# other worker, do so all the time): that says nothing of the page. A request the page needed
# and lost that way shows in what the test then asserts.
HOST_NETWORK_CHANGED = "ERR_NETWORK_CHANGED"


def watch(page: Any, watched: Watch) -> None:
    """Record the page's console errors, exceptions, failed requests and error answers."""

    def console(message: Any) -> None:
        if message.type == "error" and HOST_NETWORK_CHANGED not in message.text:
            watched.add(f"console error: {message.text} at {message.location.get('url', '')}")

    def failed(request: Any) -> None:
        reason = request.failure or ""
        # a download or a page left while a request runs cancels it: that is no failure
        if "ERR_ABORTED" not in reason and HOST_NETWORK_CHANGED not in reason:
            watched.add(f"request failed: {request.method} {request.url}: {reason}")

    def answered(response: Any) -> None:
        if response.status >= 400:
            watched.add(f"HTTP {response.status}: {response.request.method} {response.url}")

    page.on("console", console)
    page.on("pageerror", lambda error: watched.add(f"page error: {error}"))
    page.on("requestfailed", failed)
    page.on("response", answered)


@contextmanager
def browser_page(
    browser: Any, base_url: str, token: str | None = None
) -> Iterator[tuple[Any, Watch]]:
    """A fresh browser context (signed in with `token`, if given) and its watched page; at the
    end, the test fails on anything unexpected that went wrong on it."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1400, "height": 1000})
    if token is not None:
        context.add_init_script(f"localStorage.setItem({TOKEN_KEY!r}, {token!r})")
    page = context.new_page()
    page.set_default_timeout(20_000)
    watched = Watch()
    watch(page, watched)
    try:
        yield page, watched
        time.sleep(0.2)  # let late answers of the page arrive before it is judged
        assert watched.unexpected() == [], "\n".join(watched.unexpected())
    finally:
        context.close()


def screenshot(page: Any, name: str) -> Path:
    """A full-page PNG of `page` in build/screenshots/ (CI keeps the folder)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def keep_for_docs(shot: Path, name: str) -> None:
    """Copy a screenshot to docs/ when PAIGRAPH_UPDATE_DOCS_SCREENSHOTS=1 (the README or
    docs/web-ui.md shows it)."""
    if os.environ.get("PAIGRAPH_UPDATE_DOCS_SCREENSHOTS") == "1":
        shutil.copyfile(shot, ROOT / "docs" / name)


class Api:
    """GraphQL over HTTP against a test server, as one user."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url
        self.token = token

    def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        response = httpx.post(
            f"{self.url}/graphql",
            json={"query": query, "variables": variables},
            headers=headers,
            timeout=60,
        )
        body = response.json()
        assert not body.get("errors"), body
        return body["data"]

    def submit(self, config: str) -> str:
        """Submit a job config; its global ID."""
        found = self(
            "mutation($c: String!) { submitJob(input: {config: $c}) { job { id } errors "
            "{ path message } } }",
            c=config,
        )["submitJob"]
        assert not found["errors"] and found["job"], found
        return found["job"]["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self(
            "query($id: ID!) { job(id: $id) { id name state events(first: 100) "
            "{ edges { node { sequence type state } } } } }",
            id=job_id,
        )["job"]

    def wait(
        self, job_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> None:
        until(lambda: check(self.job(job_id)), f"job {job_id} as awaited", timeout)


PUBLISH = """
mutation($input: PublishMarketplaceItemInput!) {
  publishMarketplaceItem(input: $input) { item { id name version } errors { path message } }
}"""


class Site:
    """One `paigraph serve` on the Docker simulator for a module of browser tests, with two
    plain users, alice and bob, and an admin, root."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.url = server.url
        self.alice = self._user("alice")
        self.bob = self._user("bob")
        self.root = self._user("root", "--admin")

    def _user(self, name: str, *options: str) -> str:
        added = self.server.paigraph("users", "add", name, *options)
        assert added.returncode == 0, added.stderr
        return added.stdout.strip()

    def api(self, token: str) -> Api:
        return Api(self.url, token)

    def publish(self, token: str, content: str, **values: Any) -> dict[str, Any]:
        """Publish through the API (what the test is not about); the item's id, name, version."""
        found = self.api(token)(PUBLISH, input={"content": content, **values})
        payload = found["publishMarketplaceItem"]
        assert payload["errors"] == [], payload["errors"]
        return dict(payload["item"])


@contextmanager
def site_on(folder: Path) -> Iterator[Site]:
    """A started server on a fresh SQLite database under `folder` (skipped, saying why, without
    chromium or the web UI's build)."""
    need_browser_and_build()
    with served("sqlite", folder) as server:
        server.start()
        yield Site(server)


# --- steps a person takes, shared by the walkthroughs -----------------------------------------


class Steps:
    """A full-page screenshot per step of one walkthrough, numbered, in
    build/screenshots/<walkthrough>/ (CI keeps the folder; the path is printed)."""

    def __init__(self, page: Any, walkthrough: str) -> None:
        self.page = page
        self.folder = SCREENSHOTS / walkthrough
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.count = 0
        print(f"screenshots of {walkthrough}: {self.folder}")

    def shot(self, name: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        return path


def expect(locator: Any) -> Any:
    """Playwright's `expect` (imported late: Playwright may be missing, and then tests skip)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def editor_text(page: Any) -> str:
    """The YAML in the editor, each logical line once, however it is wrapped."""
    return str(
        page.locator(".cm-content").evaluate(
            "node => Array.from(node.querySelectorAll('.cm-line'))"
            ".map(l => l.textContent).join('\\n')"
        )
    )


def checked(page: Any) -> None:
    """Wait until the problems listed are the server's for the text in the editor now."""
    expect(page.get_by_test_id("problems").get_by_text("Checking…")).to_have_count(0)


def no_problems(page: Any) -> None:
    page.get_by_test_id("problems").get_by_text("No problems.").wait_for()


def open_submit_page(page: Any) -> None:
    """From the home page, through the navigation, as the seeds' step "click Submit Job"."""
    page.goto("/")
    page.get_by_role("link", name="Submit job").click()
    page.get_by_role("heading", name="Submit a job").wait_for()


def start_empty_job(page: Any, image: str, image_name: str = "box") -> Any:
    """On the Submit page: start an empty job with one docker image and one task role; the
    role's form."""
    page.get_by_role("button", name="Start empty").click()
    images = page.locator("[data-prereq-type=dockerimage]")
    images.get_by_role("button", name="Add docker image").click()
    images.locator("input[name=prereq-name]").fill(image_name)
    images.locator("input[name=prereq-uri]").fill(image)
    page.get_by_test_id("roles-form").get_by_role("button", name="Add task role").click()
    return page.locator("[data-role-form=taskrole]")


def import_file(page: Any, path: Path) -> None:
    """Import a job file on the Submit page; its forms shown."""
    page.set_input_files("input[name=import]", str(path))
    expect(page.get_by_test_id("source-note")).to_contain_text(f"Imported {path.name}")


def edit_line_in_editor(page: Any, line_has: str, old: str, new: str) -> None:
    """Replace `old` (at the end of the editor line that contains `line_has`) with `new`,
    typed as a person types."""
    page.locator(".cm-line", has_text=line_has).first.click()
    page.keyboard.press("End")
    for _ in old:
        page.keyboard.press("Backspace")
    page.keyboard.type(new)


def open_preview(page: Any) -> Any:
    """Open the preview; the resolved config's locator."""
    preview = page.get_by_test_id("preview")
    if preview.get_attribute("open") is None:
        preview.locator("summary").first.click()
    return page.get_by_test_id("resolved-config")


def submit_and_reach(page: Any, state: str, timeout: float = 120_000) -> str:
    """Submit (no problems left), land on the live job page and see it reach `state`; the
    job's ID."""
    expect(page.get_by_test_id("submit")).to_have_text("Submit")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/jobs/[^/?]+$"))
    ends = {state, "SUCCEEDED", "FAILED", "STOPPED"}
    page.wait_for_selector(", ".join(f"h1 [data-state={s}]" for s in ends), timeout=timeout)
    reached = page.locator("h1 [data-state]").get_attribute("data-state")
    assert reached == state, f"{reached}: {page.get_by_test_id('job').inner_text()}"
    return str(page.url.rsplit("/", 1)[-1])


def instance_log(page: Any, role: str, index: int, contains: str, timeout: float = 60_000) -> str:
    """Open an instance's log from the job page's instance table; its text once it shows
    `contains`."""
    page.locator(f"tr[data-instance={role}-{index}]").get_by_role("button", name="Log").click()
    log = page.get_by_test_id("log-text")
    expect(log).to_contain_text(contains, timeout=timeout)
    return str(log.inner_text())
