"""How fast the web UI shows jobs and the marketplace, in headless chromium against a real
server.

    python bench/web.py [--jobs 10000] [--instances 64] [--items 5000] [--changes 15] [--runs 5]
                        [--roles 16] [--keystrokes 10]

A fresh SQLite database gets `--jobs` stored jobs of 2 roles x 5 running instances (copied in
bulk as bench/api.py does) and, newest, one running job of 1 role x `--instances` instances,
all of user `bench`, and `--items` public marketplace templates (bench/items.py). The
product's app (built UI included: run ./scripts/build-web first) serves it on loopback in this
process, backend-less; chromium (Playwright, /usr/bin/chromium, signed in as `bench`) opens
the pages.

  1. first render of the jobs list: from navigation start (a fresh browser context: nothing
     cached) until the first page of rows is in the document, as the page's own clock says
  2. first render of the job page of the big job: until all its instance rows are there
  3. first render of the marketplace list (/marketplace, most recent first): until its first
     page of cards is there
  4. a state change on the job page: `--changes` times, 0.3 s apart, one more instance ends
     (exit code 0), as the job service does it (the job machine, the store's commit in a worker
     thread, a notice on the server's bus). For each, the time from just before the commit
     until the page has the instance's new state in the document and the browser's next frame
     starts, against the time until a plain graphql-transport-ws client (the websockets
     library, in this process) following the same job has received the same event.
  5. the JavaScript the first page loads, gzipped, and whether GraphiQL's code is among it.
  6. the charts of what the big job's instances used in the last hour: the job has an hour of
     stored samples (every 5 s, 720 per instance, as the server's sampler keeps them), and the
     page is opened fresh: from navigation start until its task role's CPU, memory and network
     charts are drawn with every point (uPlot's draw done, the next frame started); then from
     choosing one instance until its three charts are drawn.
  7. the Submit page with a job of `--roles` task roles (2 instances each) imported: from a
     keystroke in the YAML editor (the page's own clock, at keydown) until the problem it
     makes is listed under the editor and the next frame starts, and from the keystroke that
     undoes it until "No problems." shows; `--keystrokes` of each. The page waits for typing
     to pause (SubmitPage's CHECK_DELAY_MS), then asks the server for a dry run (resolveJob).

Goals: first render of each of the three pages under 1 s; the job page shows a change at most
1.5x later than the plain client (p50); under 250 KB of JavaScript (gzipped) for the first
page, GraphiQL loaded only on /graphql, the charting library only with the charts; the last
hour of the 64-instance job charted in under 500 ms; a keystroke's problems shown in under
300 ms (p50).
Prints figures only; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import websockets  # noqa: E402
from playwright.async_api import async_playwright  # noqa: E402

from backends.base import EventKind, InstanceKey  # noqa: E402
from backends.usage import UsageSample  # noqa: E402
from bench.api import copy_jobs, store_first_job  # noqa: E402
from bench.items import store_items  # noqa: E402
from bench.subscriptions import instance_event, running_job  # noqa: E402
from server.api.ids import global_id  # noqa: E402
from server.api.jobs.types import event_cursor  # noqa: E402
from server.app.asgi import create_app  # noqa: E402
from server.app.serving import on_loopback  # noqa: E402
from server.events import JobNotice  # noqa: E402
from server.jobs import JobMachine  # noqa: E402
from server.store import Store, open_store  # noqa: E402
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, TOKEN_KEY  # noqa: E402

RENDER_GOAL_S = 1.0
KEYSTROKE_GOAL_S = 0.3
CHANGE_RATIO_GOAL = 1.5
JS_GOAL_KB = 250
CHART_GOAL_S = 0.5
USAGE_INTERVAL_S = 5
USAGE_HOUR = 3600 // USAGE_INTERVAL_S  # samples per instance in the charted hour
# the page's hour ends when it opens: the oldest samples leave it as the bench goes on
SHOWN_POINTS = USAGE_HOUR * 9 // 10
SPACING_S = 0.3
MARKET_PAGE = (
    12  # cards on a page of the marketplace list (web/src/marketplace/MarketplacePage.tsx)
)

JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { cursor sequence type state taskRole index }
}
"""

# Records when each instance row first shows SUCCEEDED, at the start of the next frame.
WATCH_ROWS = """
() => {
  window.__shown = {};
  const look = () => {
    for (const cell of document.querySelectorAll('tr[data-instance] [data-state=SUCCEEDED]')) {
      const name = cell.closest('tr').dataset.instance;
      if (!(name in window.__shown)) {
        window.__shown[name] = null;
        requestAnimationFrame(() => {
          window.__shown[name] = performance.timeOrigin + performance.now();
        });
      }
    }
  };
  const everything = {subtree: true, childList: true, attributes: true};
  new MutationObserver(look).observe(document.body, everything);
  look();
}
"""


# Records the time of each keydown, and when the problems list next shows what is awaited
# (window.__want: "problem" or "ok"), at the start of the frame after it is in the document.
WATCH_PROBLEMS = """
() => {
  window.__keyAt = null;
  window.__shownAt = null;
  document.addEventListener('keydown', () => {
    window.__keyAt = performance.now();
    window.__shownAt = null;
  }, true);
  const problems = document.querySelector('[data-testid=problems]');
  const look = () => {
    if (window.__keyAt === null || window.__shownAt !== null) return;
    const found = window.__want === 'problem'
      ? problems.querySelector('li.problem') : problems.querySelector('.ok');
    if (found) {
      window.__shownAt = -1;
      requestAnimationFrame(() => { window.__shownAt = performance.now(); });
    }
  };
  new MutationObserver(look).observe(problems, {subtree: true, childList: true});
}
"""


def many_roles_job(roles: int) -> str:
    """A valid v2 job of `roles` task roles of 2 instances each, with ports."""
    lines = [
        "protocolVersion: 2",
        "name: many-roles",
        "type: job",
        "prerequisites:",
        "  - {name: box, type: dockerimage, uri: paigraph/busybox:test}",
        "taskRoles:",
    ]
    for n in range(roles):
        lines += [
            f"  role{n}:",
            "    instances: 2",
            "    dockerImage: box",
            "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0, ports: {http: 1}}",
            f"    commands: ['echo role{n} $PAI_TASK_INDEX of $PAI_TASK_ROLE_LIST']",
        ]
    return "\n".join(lines) + "\n"


async def keystrokes(
    browser: Any, base_url: str, token: str, roles: int, count: int
) -> tuple[list[float], list[float]]:
    """Seconds from a keystroke to its problem listed, and from the undoing keystroke to
    "No problems.", `count` times each, on the Submit page with a `roles`-role job."""
    breaks, fixes = [], []
    with tempfile.TemporaryDirectory(prefix="paigraph-bench-submit-") as directory:
        path = Path(directory) / "many-roles.yaml"
        path.write_text(many_roles_job(roles))
        async with browser_context(browser, base_url, token) as context:
            page = await context.new_page()
            await page.goto("/submit")
            await page.set_input_files("input[name=import]", str(path))
            ok = page.get_by_test_id("problems").get_by_text("No problems.")
            await ok.wait_for(timeout=30_000)
            await page.evaluate(WATCH_PROBLEMS)
            line = page.locator(".cm-line", has_text="instances: 2").first
            await line.click()
            await page.keyboard.press("End")
            for _ in range(count):
                for want, key, into in (("problem", "x", breaks), ("ok", "Backspace", fixes)):
                    await page.evaluate(f"window.__want = {want!r}")
                    await page.keyboard.press(key)
                    await page.wait_for_function(
                        "window.__shownAt !== null && window.__shownAt >= 0", timeout=10_000
                    )
                    into.append(await page.evaluate("(window.__shownAt - window.__keyAt) / 1000"))
                    await asyncio.sleep(0.3)
    return breaks, fixes


class PlainClient:
    """A graphql-transport-ws client following the job: when each sequence arrived."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self.ready = asyncio.Event()

    async def run(self, url: str, token: str, job_id: str, after: str) -> None:
        ws_url = url.replace("http://", "ws://") + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": {"token": token}}))
            json.loads(await ws.recv())
            payload = {"query": JOB_EVENTS, "variables": {"jobId": job_id, "after": after}}
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
            self.ready.set()
            async for message in ws:
                received = time.time()
                data = json.loads(message)
                if data.get("type") == "next":
                    self.arrived[data["payload"]["data"]["jobEvents"]["sequence"]] = received


@contextlib.asynccontextmanager
async def browser_context(browser: Any, base_url: str, token: str) -> AsyncIterator[Any]:
    # the server's Content Security Policy forbids eval, which Playwright's waiting for a
    # condition in the page uses; the pages run the same without it
    context = await browser.new_context(
        base_url=base_url, viewport={"width": 1400, "height": 1000}, bypass_csp=True
    )
    await context.add_init_script(f"localStorage.setItem({TOKEN_KEY!r}, {token!r})")
    try:
        yield context
    finally:
        await context.close()


async def first_render(
    browser: Any, base_url: str, token: str, path: str, rows: str, count: int
) -> tuple[float, list[Any]]:
    """Seconds from navigation start until `count` elements match `rows`; the scripts loaded."""
    async with browser_context(browser, base_url, token) as context:
        page = await context.new_page()
        scripts: list[Any] = []
        page.on(
            "response", lambda r: scripts.append(r) if r.request.resource_type == "script" else None
        )
        await page.goto(path, wait_until="commit")
        await page.wait_for_function(
            f"document.querySelectorAll({rows!r}).length >= {count}", polling="raf", timeout=30_000
        )
        took = await page.evaluate("performance.now()") / 1000
        return took, scripts


def shipped_js(scripts: list[Any]) -> tuple[int, int, list[str]]:
    """(bytes, gzipped bytes, names) of the scripts a page loaded, read from the build."""
    raw = packed = 0
    names = []
    for response in scripts:
        path = urlparse(response.url).path
        body = (ROOT / "server" / "webui" / path.lstrip("/")).read_bytes()
        raw += len(body)
        packed += len(gzip.compress(body, 9))
        names.append(path.rsplit("/", 1)[-1])
    return raw, packed, names


def store_usage(store: Store, machine: JobMachine, instances: int) -> None:
    """An hour of samples of every instance of the big job, up to now, every 5 s: each uses
    its own share of a core and a few hundred MB, growing, with some network traffic."""
    now = datetime.now(UTC)
    samples = []
    for index in range(instances):
        key = InstanceKey(
            job_id=machine.job_id, attempt=machine.attempt, role="worker", index=index
        )
        for n in range(USAGE_HOUR):
            samples.append(
                UsageSample(
                    key=key,
                    at=now - timedelta(seconds=USAGE_INTERVAL_S * (USAGE_HOUR - n)),
                    cpu_cores=0.2 + 0.8 * ((index + n) % 10) / 10,
                    memory_bytes=(200 + index + n // 10) * 1024 * 1024,
                    memory_limit_bytes=1024 * 1024 * 1024,
                    network_rx_bytes=n * 50_000 + index,
                    network_tx_bytes=n * 20_000,
                )
            )
    store.add_usage(samples, USAGE_INTERVAL_S)


# every chart under `scope` drawn by uPlot with at least `points` points, in `count` charts
CHARTS_DRAWN = """
([scope, points, count]) => [...document.querySelectorAll(scope + ' figure.chart')].filter(
  (figure) => Number(figure.dataset.points) >= points && figure.querySelector('.uplot[data-drawn]')
).length >= count
"""


ROLE_SERIES = """
query($id: ID!, $since: DateTime) { job(id: $id) { metrics(since: $since) { source step roles {
  taskRole instances request { cpuCores memoryBytes gpus }
  cpuCores { at sum min max instances } memoryBytes { at sum min max instances }
  networkRxBytesPerSecond { at sum min max instances }
  networkTxBytesPerSecond { at sum min max instances } } } } }
"""
INSTANCE_SERIES = """
query($id: ID!, $since: DateTime) { job(id: $id) { taskRoles { instances { taskRole index
  metrics(since: $since) { source gpuNote oomKilledAt request { cpuCores memoryBytes gpus }
    cpuCores { at value } memoryBytes { at value } memoryLimitBytes { at value }
    networkRxBytesPerSecond { at value } networkTxBytesPerSecond { at value } } } } } }
"""


async def series_answers(base_url: str, token: str, job_id: str) -> tuple[float, int, float, int]:
    """Seconds and bytes of the server's answers to what the charts ask (the job page's own
    queries, web/src/metrics/JobMetrics.operations.ts): the roles' series, and every
    instance's series."""
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    found = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for query in (ROLE_SERIES, INSTANCE_SERIES):
            began = time.perf_counter()
            answer = await client.post(
                "/graphql",
                json={"query": query, "variables": {"id": job_id, "since": since}},
                headers={"Authorization": f"Bearer {token}"},
            )
            took = time.perf_counter() - began
            assert answer.status_code == 200 and "errors" not in answer.json(), answer.text[:300]
            found.append((took, len(answer.content)))
    return found[0][0], found[0][1], found[1][0], found[1][1]


async def chart_render(
    browser: Any, base_url: str, token: str, job_id: str
) -> tuple[float, float, float, float, list[Any]]:
    """For the big job's role charts and then instance 0's (chosen on the page): seconds until
    they are drawn with the last hour's points, from navigation start (from choosing the
    instance), and from the arrival of the series they draw (the page's own work: parsing,
    shaping, drawing); the scripts loaded."""
    async with browser_context(browser, base_url, token) as context:
        page = await context.new_page()
        scripts: list[Any] = []
        page.on(
            "response", lambda r: scripts.append(r) if r.request.resource_type == "script" else None
        )
        arrived: dict[str, float] = {}  # operation -> epoch ms its answer was received

        def finished(request: Any) -> None:
            for operation in ("JobMetrics", "InstanceMetrics"):
                if operation in (request.post_data or ""):
                    timing = request.timing
                    arrived[operation] = timing["startTime"] + timing["responseEnd"]

        page.on("requestfinished", finished)
        now = "performance.timeOrigin + performance.now()"
        await page.goto(f"/jobs/{job_id}", wait_until="commit")
        await page.wait_for_function(
            CHARTS_DRAWN,
            arg=["[data-metrics-role]", SHOWN_POINTS, 3],
            polling="raf",
            timeout=60_000,
        )
        roles = await page.evaluate("performance.now()") / 1000
        roles_drawn = (await page.evaluate(now) - arrived["JobMetrics"]) / 1000
        began = await page.evaluate("performance.now()") / 1000
        await page.get_by_test_id("metrics-of").select_option("worker/0")
        await page.wait_for_function(
            CHARTS_DRAWN,
            arg=["[data-metrics-instance]", SHOWN_POINTS, 3],
            polling="raf",
            timeout=60_000,
        )
        one = await page.evaluate("performance.now()") / 1000 - began
        one_drawn = (await page.evaluate(now) - arrived["InstanceMetrics"]) / 1000
        return roles, roles_drawn, one, one_drawn, scripts


def ms(seconds: float) -> str:
    return f"{seconds * 1000:6.1f} ms"


async def run(args: argparse.Namespace) -> None:
    if not (ROOT / "server" / "webui" / "index.html").is_file():
        print("the web UI is not built: run ./scripts/build-web first")
        return
    with tempfile.TemporaryDirectory(prefix="paigraph-bench-web-") as directory:
        url = f"sqlite:///{Path(directory) / 'web.sqlite'}"
        store = open_store(url)
        began = time.perf_counter()
        user, token = store.create_user("bench")
        template = store_first_job(store, user.id)
        copy_jobs(store.engine, template, range(1, args.jobs))
        machine = running_job(store, args.instances, owner_id=user.id, labels=("ssh", "http"))
        store_items(store, user, args.items)
        store_usage(store, machine, args.instances)
        print(
            f"stored {args.jobs:,} jobs of 10 instances, 1 of {args.instances} and "
            f"{args.items:,} marketplace items, with an hour of samples of the {args.instances} "
            f"instances, in {time.perf_counter() - began:.1f} s (SQLite)"
        )
        try:
            app = create_app(db_url=url, backend=None)
            async with on_loopback(app, log_level="warning", access_log=False) as base_url:
                await measure(args, base_url, token, store, app, machine)
        finally:
            store.close()


async def measure(
    args: argparse.Namespace, base_url: str, token: str, store: Store, app: Any, machine: JobMachine
) -> None:
    job_id = global_id("Job", machine.job_id)
    bus = app.state.runtime.get().bus
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # warm the server (and the OS's file cache), not the browser: every run below
            # starts in a fresh context with nothing cached
            await first_render(browser, base_url, token, "/", "tr[data-job]", 25)
            lists, pages, markets = [], [], []
            scripts: list[Any] = []
            for _ in range(args.runs):
                took, scripts = await first_render(
                    browser, base_url, token, "/", "tr[data-job]", 25
                )
                lists.append(took)
                took, _ = await first_render(
                    browser, base_url, token, f"/jobs/{job_id}", "tr[data-instance]", args.instances
                )
                pages.append(took)
                took, _ = await first_render(
                    browser, base_url, token, "/marketplace", "li[data-item]", MARKET_PAGE
                )
                markets.append(took)
            raw, packed, names = shipped_js(scripts)
            role_charts, instance_charts, role_draws, instance_draws = [], [], [], []
            chart_scripts: list[Any] = []
            for _ in range(args.runs):
                (
                    roles_took,
                    roles_drawn,
                    one_took,
                    one_drawn,
                    chart_scripts,
                ) = await chart_render(browser, base_url, token, job_id)
                role_charts.append(roles_took)
                role_draws.append(roles_drawn)
                instance_charts.append(one_took)
                instance_draws.append(one_drawn)
            answers = await series_answers(base_url, token, job_id)
            chart_names = [urlparse(r.url).path.rsplit("/", 1)[-1] for r in chart_scripts]
            chart_only = [n for n in chart_names if n not in names]
            _, chart_packed, _ = shipped_js(
                [r for r in chart_scripts if urlparse(r.url).path.rsplit("/", 1)[-1] in chart_only]
            )

            async with browser_context(browser, base_url, token) as context:
                page = await context.new_page()
                await page.goto(f"/jobs/{job_id}")
                await page.wait_for_function(
                    f"document.querySelectorAll('tr[data-instance]').length >= {args.instances}"
                )
                await page.wait_for_selector("[data-testid=timeline] li")
                await page.evaluate(WATCH_ROWS)
                job = store.get_job(machine.job_id)
                assert job is not None
                plain = PlainClient()
                follower = asyncio.create_task(
                    plain.run(base_url, token, job_id, event_cursor(job.last_sequence))
                )
                await plain.ready.wait()
                await asyncio.sleep(1.0)
                page_lags, plain_lags = [], []
                for index in range(min(args.changes, args.instances - 1)):
                    saved = len(machine.transitions)
                    machine.apply(instance_event(machine, EventKind.EXITED, index, exit_code=0))
                    began = time.time()
                    events = await asyncio.to_thread(
                        store.save_machine,
                        machine.job_id,
                        machine.snapshot(),
                        machine.transitions[saved:],
                    )
                    sequence = events[-1].sequence
                    await bus.publish(
                        JobNotice(
                            job_id=machine.job_id, sequence=sequence, state=machine.state.value
                        )
                    )
                    name = f"worker-{index}"
                    await page.wait_for_function(
                        f"window.__shown[{name!r}] != null", polling=5, timeout=10_000
                    )
                    shown = await page.evaluate(f"window.__shown[{name!r}]") / 1000
                    deadline = time.monotonic() + 10
                    while sequence not in plain.arrived and time.monotonic() < deadline:
                        await asyncio.sleep(0.005)
                    page_lags.append(shown - began)
                    plain_lags.append(plain.arrived[sequence] - began)
                    await asyncio.sleep(SPACING_S)
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await follower
            breaks, fixes = await keystrokes(browser, base_url, token, args.roles, args.keystrokes)
        finally:
            await browser.close()

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(f"first render, median of {args.runs} (fresh browser context each):")
    worst_list, worst_page = statistics.median(lists), statistics.median(pages)
    worst_market = statistics.median(markets)
    print(f"  jobs list (25 rows of {args.jobs:,} jobs): {ms(worst_list)}   max {ms(max(lists))}")
    print(f"  job page ({args.instances} instances):       {ms(worst_page)}   max {ms(max(pages))}")
    print(
        f"  marketplace ({MARKET_PAGE} cards of {args.items:,} items): "
        f"{ms(worst_market)}   max {ms(max(markets))}"
    )
    ok = max(worst_list, worst_page, worst_market) < RENDER_GOAL_S
    print(f"  goal: under {RENDER_GOAL_S:.0f} s: {verdict(ok)}")
    page_p50, plain_p50 = statistics.median(page_lags), statistics.median(plain_lags)
    print(f"a state change, from the store's commit ({len(page_lags)} changes):")
    print(f"  plain graphql-ws client received it: p50 {ms(plain_p50)}   max {ms(max(plain_lags))}")
    print(f"  job page shows it:                   p50 {ms(page_p50)}   max {ms(max(page_lags))}")
    ratio = page_p50 / plain_p50 if plain_p50 > 0 else float("inf")
    print(
        f"  page / plain client: {ratio:.2f}x "
        f"(p50 difference {ms(page_p50 - plain_p50).strip()}); "
        f"goal at most {CHANGE_RATIO_GOAL}x: {verdict(ratio <= CHANGE_RATIO_GOAL)}"
    )
    graphiql = [n for n in names if "graphiql" in n.lower() or "monaco" in n.lower()]
    print(
        f"JavaScript of the first page: {len(names)} files, {raw / 1024:.0f} KB, "
        f"{packed / 1024:.0f} KB gzipped; goal under {JS_GOAL_KB} KB: "
        f"{verdict(packed / 1024 < JS_GOAL_KB)}"
    )
    print(f"  GraphiQL's code among it: {'yes: ' + ', '.join(graphiql) if graphiql else 'no'}")
    charting = [n for n in names if "JobMetrics" in n]
    print(f"  the charts' code among it: {'yes: ' + ', '.join(charting) if charting else 'no'}")
    print(
        f"  loaded with the job page's charts: {', '.join(chart_only) or 'nothing more'}, "
        f"{chart_packed / 1024:.0f} KB gzipped"
    )
    role_p50, one_p50 = statistics.median(role_charts), statistics.median(instance_charts)
    role_draw, one_draw = statistics.median(role_draws), statistics.median(instance_draws)
    print(
        f"charts of the {args.instances}-instance job's last hour ({USAGE_HOUR} points per "
        f"instance), median of {args.runs}:"
    )
    print(
        f"  the task role's CPU, memory and network charts drawn, from the series' arrival: "
        f"{ms(role_draw)}   max {ms(max(role_draws))}"
    )
    print(
        f"  one instance's, from the series' arrival:                                       "
        f"{ms(one_draw)}   max {ms(max(instance_draws))}"
    )
    print(
        f"  goal under {CHART_GOAL_S * 1000:.0f} ms: "
        f"{verdict(max(role_draw, one_draw) < CHART_GOAL_S)}"
    )
    role_answer, role_bytes, instances_answer, instances_bytes = answers
    print(
        f"  with the server's answer: the task role's from navigation start {ms(role_p50)} "
        f"(max {ms(max(role_charts))}; the answer alone {ms(role_answer)}, "
        f"{role_bytes / 1024:.0f} KB), one instance's from choosing it {ms(one_p50)} "
        f"(max {ms(max(instance_charts))}; the answer alone {ms(instances_answer)}, "
        f"{instances_bytes / 1024:.0f} KB: every instance's series, the schema having no "
        f"field for one instance)"
    )
    print(
        f"Submit page, a keystroke in the editor until its problems show "
        f"({args.roles} task roles, {len(breaks)} of each):"
    )
    print(f"  a problem made:    p50 {ms(statistics.median(breaks))}   max {ms(max(breaks))}")
    print(f"  the problem fixed: p50 {ms(statistics.median(fixes))}   max {ms(max(fixes))}")
    worst = max(statistics.median(breaks), statistics.median(fixes))
    print(f"  goal under {KEYSTROKE_GOAL_S * 1000:.0f} ms: {verdict(worst < KEYSTROKE_GOAL_S)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--roles", type=int, default=16)
    parser.add_argument("--keystrokes", type=int, default=10)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
