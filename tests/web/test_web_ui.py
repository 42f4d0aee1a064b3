"""The web UI in headless chromium against a real `paigraph serve` on the Docker simulator:
sign-in, the live jobs list (anyone's, with jobs submitted after it opened, and jobs that
leave its filter leaving it), a multi-role job page with ports and logs, following a log,
stopping a job, another user's job, GraphiQL with the network cut off, and a job page that
loses its websocket without missing or repeating an event."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.browser_support import (
    Site,
    browser_page,
    keep_for_docs,
    screenshot,
)
from tests.servers import ROOT
from tests.simulated import job_config

pytestmark = [pytest.mark.browser, pytest.mark.docker]


def ported_job(name: str, roles: dict[str, dict[str, Any]]) -> str:
    """A v2 job whose roles each ask for an `http` port and run `commands`."""
    return job_config(
        {role: {"ports": {"http": 1}, **spec} for role, spec in roles.items()}, name=name
    )


def test_sign_in_with_a_token_shows_the_viewer_and_sign_out_forgets_it(
    site: Site, web_browser: Any
) -> None:
    with browser_page(web_browser, site.url) as (page, watched):
        watched.expect(r"HTTP 401: POST .*/graphql|status of 401")  # asking who, unsigned
        page.goto("/")
        page.get_by_role("heading", name="Sign in").wait_for()
        screenshot(page, "sign-in")
        page.fill("input[name=token]", site.alice)
        page.get_by_role("button", name="Sign in").click()
        viewer = page.get_by_test_id("viewer")
        viewer.wait_for()
        assert re.search(r"alice\s*user", viewer.inner_text())
        assert page.evaluate("localStorage.getItem('paigraph.token')") == site.alice
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("heading", name="Sign in").wait_for()
        assert page.evaluate("localStorage.getItem('paigraph.token')") is None


def test_the_jobs_list_shows_a_new_job_turn_succeeded_without_a_reload(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    job_id = api.submit(job_config(name="listed", roles={"main": {"commands": ["sleep 4"]}}))
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        page.evaluate("window.__notReloaded = true")
        row = page.locator("tr[data-job=listed]")
        state = row.locator("[data-state]")
        state.wait_for()
        first = state.get_attribute("data-state")
        assert first in {"WAITING", "STARTING", "RUNNING"}, first
        cells = row.locator("td").all_inner_texts()
        assert cells[1:3] == ["alice", "default"]
        screenshot(page, "jobs")
        page.wait_for_selector("tr[data-job=listed] [data-state=SUCCEEDED]", timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        # the state comes with the event; the counts are read again right after it
        from playwright.sync_api import expect

        expect(row.locator("td").nth(5)).to_have_text("0/1")
        api.wait(job_id, lambda job: job["state"] == "SUCCEEDED")
        # filters: state and part of the name
        page.select_option("select[name=state]", "FAILED")
        page.get_by_text("No jobs match.").wait_for()
        page.select_option("select[name=state]", "")
        page.fill("input[name=name]", "ISTE")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(r"name=ISTE"))
        page.locator("tr[data-job=listed]").wait_for()


def test_a_multi_role_job_page_shows_every_instance_with_ports_and_a_worker_log(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    config = ported_job(
        "multirole",
        {
            "ps": {"commands": ["sleep 2"], "completion": {"minSucceededInstances": -1}},
            "worker": {
                "instances": 2,
                "commands": [
                    "echo worker $PAI_TASK_INDEX hello on port $PAI_PORT_LIST_worker_0_http"
                ],
            },
        },
    )
    job_id = api.submit(config)
    api.wait(job_id, lambda job: job["state"] == "SUCCEEDED")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.wait_for_selector("h1 [data-state=SUCCEEDED]")
        for name in ("ps-0", "worker-0", "worker-1"):
            row = page.locator(f"tr[data-instance={name}]")
            # the workers decide the job; the ps may be stopped before its sleep ends
            ended = (
                "[data-state=SUCCEEDED]"
                if name != "ps-0"
                else ":is([data-state=SUCCEEDED], [data-state=STOPPED])"
            )
            row.locator(ended).wait_for()
            ports = row.locator("td.ports").inner_text()
            assert re.search(r"^http: \d+$", ports, re.M), (name, ports)
            assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", row.locator("td").nth(3).inner_text())
        page.locator("tr[data-instance=worker-1]").get_by_role("button", name="Log").click()
        log = page.get_by_test_id("log-text")
        # the log panel is drawn after the click: until then there is no log text to read
        page.wait_for_function(
            "() => (document.querySelector('[data-testid=log-text]')?.innerText ?? '')"
            ".includes('worker 1 hello')"
        )
        assert "worker 1 hello on port" in log.inner_text()
        assert page.url.endswith("?log=worker%2F1") or "log=worker" in page.url
        page.get_by_text("Config (as submitted").click()
        page.get_by_test_id("config").wait_for()
        assert "multirole" in page.get_by_test_id("config").inner_text()
        shot = screenshot(page, "job")
        keep_for_docs(shot, "job-page.png")
        # the page is linkable by name too
        page.goto("/jobs/multirole")
        page.wait_for_selector("tr[data-instance=worker-1]")


def test_the_log_follows_the_live_output_of_a_running_instance(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    ticker = "for i in $(seq 1 40); do echo tick $i; sleep 0.3; done"
    job_id = api.submit(job_config(name="ticker", roles={"main": {"commands": [ticker]}}))
    api.wait(job_id, lambda job: job["state"] == "RUNNING")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}?log=main/0")
        page.get_by_text("following live output").wait_for()
        text = "(document.querySelector('[data-testid=log-text]')?.innerText ?? '')"
        page.wait_for_function(f"() => {text}.includes('tick 2\\n')")
        seen = page.evaluate(text)
        assert "tick 30" not in seen  # what comes next arrives while the page watches
        page.wait_for_function(f"() => {text}.includes('tick 30\\n')", timeout=30_000)
        screenshot(page, "log")
        page.wait_for_selector("h1 [data-state=SUCCEEDED]", timeout=30_000)
        page.get_by_text("the instance has ended").wait_for()
        lines = [line for line in page.evaluate(text).splitlines() if line.startswith("tick")]
        assert lines == [f"tick {n}" for n in range(1, 41)]  # each line once, in order


def test_stop_a_running_job_from_its_page(site: Site, web_browser: Any) -> None:
    api = site.api(site.alice)
    job_id = api.submit(job_config(name="stoppable", roles={"main": {"commands": ["sleep 300"]}}))
    api.wait(job_id, lambda job: job["state"] == "RUNNING")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.wait_for_selector("h1 [data-state=RUNNING]")
        asked: list[str] = []

        def confirm(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept()

        page.once("dialog", confirm)
        page.get_by_role("button", name="Stop").click()
        page.wait_for_selector("h1 [data-state=STOPPED]", timeout=60_000)
        assert asked and "Stop job stoppable" in asked[0]
        assert page.get_by_role("button", name="Stop").count() == 0
    api.wait(job_id, lambda job: job["state"] == "STOPPED")


def test_another_user_gets_a_clear_message_for_the_first_users_job(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    job_id = api.submit(job_config(name="alices", roles={"main": {"commands": ["sleep 300"]}}))
    try:
        with browser_page(web_browser, site.url, site.bob) as (page, _):
            page.goto("/jobs/alices")
            message = page.get_by_test_id("not-found")
            message.wait_for()
            assert "There is no job of yours named “alices”" in message.inner_text()
            assert "alice~alices" in message.inner_text()
            screenshot(page, "not-found")
            page.goto(f"/jobs/{job_id}")  # readable by ID, as in OpenPAI, but not stoppable
            page.get_by_text("Only alice or an admin may stop this job.").wait_for()
            assert page.get_by_role("button", name="Stop").count() == 0
            page.goto("/jobs/bm90LWEtam9i")
            page.get_by_role("alert").wait_for()
    finally:
        site.api(site.alice)(
            "mutation($id: ID!) { stopJob(input: {id: $id}) { errors { message } } }", id=job_id
        )


def test_graphiql_renders_and_runs_a_query_with_only_the_server_reachable(
    site: Site, web_browser: Any
) -> None:
    own = urlparse(site.url).netloc
    elsewhere: list[str] = []

    def only_the_server(route: Any) -> None:
        if urlparse(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.context.route("**/*", only_the_server)
        page.goto("/graphql")
        page.locator(".graphiql-container").wait_for()
        page.wait_for_function(  # the editor holds its default query once it has loaded
            "() => document.querySelector('.graphiql-query-editor')?.innerText.includes('viewer')"
        )
        page.locator(".graphiql-execute-button").click()
        page.wait_for_function(
            "() => document.querySelector('.graphiql-response')?.innerText.includes('alice')"
        )
        answer = json.loads(page.locator(".graphiql-response").inner_text().replace("\xa0", " "))
        assert answer["data"]["viewer"] == {"name": "alice", "admin": False}
        screenshot(page, "graphiql")
    assert elsewhere == []


def test_a_job_page_that_loses_its_websocket_misses_no_event_and_repeats_none(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    roles = {
        f"r{n}": {"commands": [f"sleep {2 + n}"], "completion": {"minSucceededInstances": -1}}
        for n in range(3)
    }
    sockets: list[Any] = []

    def through(ws: Any) -> None:
        ws.connect_to_server()
        sockets.append(ws)

    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.route_web_socket(re.compile(r".*/graphql$"), through)
        job_id = api.submit(job_config(name="dropped", roles=roles))
        page.goto(f"/jobs/{job_id}")
        page.wait_for_selector("[data-testid=timeline] li")
        assert len(sockets) == 1
        sockets[0].close()  # the page sees its websocket close; it reconnects and resumes
        page.wait_for_selector("h1 [data-state=SUCCEEDED]", timeout=60_000)
        assert len(sockets) >= 2
        events = api.job(job_id)["events"]["edges"]
        expected = [edge["node"]["sequence"] for edge in events]
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=timeline] li').length"
            f" >= {len(expected)}"
        )
        shown = page.eval_on_selector_all(
            "[data-testid=timeline] li", "items => items.map(i => Number(i.dataset.sequence))"
        )
        assert shown == expected


def test_a_long_log_shows_its_tail_with_a_note_and_downloads_whole(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    job_id = api.submit(job_config(name="chatty", roles={"main": {"commands": ["seq 1 3000"]}}))
    api.wait(job_id, lambda job: job["state"] == "SUCCEEDED")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}?log=main/0")
        note = page.get_by_test_id("log-tail-note")
        note.wait_for()
        assert "only its last part is shown" in note.inner_text()
        text = page.get_by_test_id("log-text").inner_text()
        numbers = [line for line in text.splitlines() if line.isdigit()]
        assert numbers[-1] == "3000" and "1" not in numbers
        with page.expect_download() as download:
            page.get_by_role("button", name="Download").click()
        whole = download.value.path().read_text()
        assert [n for n in whole.splitlines() if n.isdigit()] == [str(n) for n in range(1, 3001)]


def test_the_cluster_page_shows_nodes_and_virtual_clusters(site: Site, web_browser: Any) -> None:
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        page.get_by_role("link", name="Cluster").click()
        nodes = page.get_by_test_id("nodes")
        nodes.locator("tbody tr").first.wait_for()
        assert nodes.locator("tbody tr").count() == 4  # the simulator's default nodes
        assert re.search(r"32 cpu, 262144 MB, 8 gpu", nodes.inner_text())
        vcs = page.get_by_test_id("virtual-clusters").inner_text()
        assert "default" in vcs
        screenshot(page, "cluster")


def test_a_prerequisite_from_the_marketplace_links_to_its_item(
    site: Site, web_browser: Any
) -> None:
    api = site.api(site.alice)
    item = (ROOT / "examples" / "marketplace" / "busybox.yaml").read_text()
    published = api(
        "mutation($c: String!) { publishMarketplaceItem(input: {content: $c}) "
        "{ item { id } errors { message } } }",
        c=item,
    )["publishMarketplaceItem"]
    assert not published["errors"], published
    config = job_config(name="fromitem", roles={"main": {"commands": ["true"]}})
    config = config.replace('"dockerImage": "bb"', '"dockerImage": "marketplace://name/busybox"')
    job_id = api.submit(config)
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto(f"/jobs/{job_id}")
        page.get_by_role("link", name="busybox 1.0.0").click()
        page.get_by_role("heading", name="busybox").wait_for()
        assert page.locator("h1 .kind").inner_text() == "docker image"
        assert page.get_by_test_id("owner").inner_text() == "alice"
        assert "uri: paigraph/busybox:test" in page.get_by_test_id("content").inner_text()
        screenshot(page, "marketplace-item-of-a-job")


def test_every_user_switches_the_list_to_everyones_jobs_and_new_ones_arrive_live(
    site: Site, web_browser: Any
) -> None:
    from playwright.sync_api import expect

    site.api(site.bob).submit(job_config(name="bobs", roles={"main": {"commands": ["true"]}}))
    with browser_page(web_browser, site.url, site.root) as (page, _):
        page.goto("/")
        assert re.search(r"root\s*admin", page.get_by_test_id("viewer").inner_text())
        page.get_by_text("No jobs match.").wait_for()  # root has none of its own
        page.select_option("select[name=owner]", "all")
        page.locator("tr[data-job=bobs]").wait_for()
        assert "all=1" in page.url
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/")
        expect(page.locator("tr[data-job=bobs]")).to_have_count(0)  # her own, first
        page.select_option("select[name=owner]", "all")  # a plain user may switch too
        page.locator("tr[data-job=bobs]").wait_for()
        assert "all=1" in page.url
        page.evaluate("window.__notReloaded = true")
        # a job submitted while the list is open appears in it, and follows its states
        site.api(site.bob).submit(
            job_config(name="arrives", roles={"main": {"commands": ["sleep 2"]}})
        )
        arrived = page.locator("tr[data-job=arrives]")
        arrived.wait_for(timeout=60_000)
        assert arrived.locator("td").all_inner_texts()[1] == "bob"
        page.wait_for_selector("tr[data-job=arrives] [data-state=SUCCEEDED]", timeout=90_000)
        assert page.evaluate("window.__notReloaded") is True
        screenshot(page, "jobs-everyone-live")
        page.select_option("select[name=owner]", "mine")
        expect(page.locator("tr[data-job=arrives]")).to_have_count(0)


def test_a_job_that_leaves_the_lists_filter_leaves_the_list_without_a_reload(
    site: Site, web_browser: Any
) -> None:
    from playwright.sync_api import expect

    api = site.api(site.alice)
    running = {"main": {"commands": ["sleep 300"]}}
    listed = api.submit(job_config(name="leaves-listed", roles=running))
    api.wait(listed, lambda job: job["state"] == "RUNNING")
    with browser_page(web_browser, site.url, site.alice) as (page, _):
        page.goto("/?state=RUNNING")
        page.locator("tr[data-job=leaves-listed]").wait_for()
        page.evaluate("window.__notReloaded = true")
        # one job read with the list, one that enters it later (through jobsChanged)
        arrived = api.submit(job_config(name="leaves-arrived", roles=running))
        page.locator("tr[data-job=leaves-arrived] [data-state=RUNNING]").wait_for(timeout=60_000)
        for job_id, name in ((listed, "leaves-listed"), (arrived, "leaves-arrived")):
            stopped = site.server.paigraph("stop", job_id, token=site.alice)
            assert stopped.returncode == 0, stopped.stderr
            expect(page.locator(f"tr[data-job={name}]")).to_have_count(0, timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        page.select_option("select[name=state]", "STOPPED")
        page.locator("tr[data-job=leaves-listed]").wait_for()
        page.locator("tr[data-job=leaves-arrived]").wait_for()


def test_under_the_content_security_policy_no_inline_script_runs_and_no_other_site_frames_a_page(
    site: Site, web_browser: Any
) -> None:
    """The app itself runs under the policy without a console error (as every test here
    checks); a script put inline into it does not run, and a page of another site that frames
    the app shows nothing of it, so its Stop and Delete buttons cannot be clicked through."""
    with browser_page(web_browser, site.url, site.alice) as (page, watched):
        inline = "Executing inline script violates the following Content Security Policy"
        watched.expect(inline)
        page.goto("/")
        page.get_by_test_id("viewer").wait_for()
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.__inlineRan = true'; document.head.appendChild(s); }"
        )
        page.wait_for_timeout(200)
        assert page.evaluate("window.__inlineRan") is None
        assert any(inline in problem for problem in watched.problems)

    framing = f'<iframe src="{site.url}/" width="800" height="600"></iframe>'.encode()
    with (
        another_site(framing) as elsewhere,
        browser_page(web_browser, elsewhere) as (page, watched),
    ):
        watched.expect(r"frame-ancestors|Refused to (display|frame)|ERR_BLOCKED_BY_RESPONSE")
        page.goto("/")
        page.wait_for_timeout(1500)  # time for the frame to load, had it been allowed
        (framed,) = [f for f in page.frames if f is not page.main_frame]
        assert not framed.url.startswith(site.url)  # an error page in its place
        assert any("frame-ancestors" in problem for problem in watched.problems)


@contextmanager
def another_site(page: bytes) -> Iterator[str]:
    """A web server of another origin (this machine, another port) answering `page`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
