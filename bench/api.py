"""How fast the GraphQL service lists jobs with their roles, instances and ports.

    python bench/api.py [--db postgresql://USER:PASSWORD@HOST:PORT/DB] [--requests 200]
                        [--ratio-only]

Populates two fresh databases (temporary SQLite files by default; with --db, two new
databases on that PostgreSQL server, dropped at the end) with running jobs of 2 task roles x 5
instances, each instance with host ports under two labels. The first job is stored through the
store (create_job, then save_machine with every instance placed and started); the others are
copies of its rows (job, instances with ports JSON, event log) with their own ids, inserted
with SQLAlchemy core in large batches, older than the first, so every database answers the
newest page with the same 50 jobs.

A real uvicorn server (a subprocess, `backend=None`: stored jobs only) serves each database;
one client sends sequential requests over HTTP with keep-alive, the targets of a comparison
interleaved request by request so drift in machine speed hits all alike, after a warm-up:

  graphql   POST /graphql   jobs(first: 50) { ... taskRoles { name instances { index state
                            ports { label ports } } } }   (with a bearer token)
  plain     GET /plain/jobs a Starlette endpoint in the same server: the bearer token checked
                            against the store as /graphql checks it (401 without a valid one,
                            which the bench checks before measuring), then the same 50 jobs and
                            their instances read with two SQLAlchemy queries on the server's
                            engine, grouped by role and returned as JSON of the same shape

For scale, the same answer is also put through graphql-core's executor alone, from memory in
the bench's own process (no HTTP, no database, default resolvers): the least any server built on
that executor spends on this result.

Comparisons, each a ratio measured within this run:
  1. graphql / plain at 10,000 stored jobs (100,000 instances)   goal: p50 ratio <= 1.25
  2. graphql at 100,000 stored jobs / at 1,000 stored jobs        goal: p50 grows <= 20%
     (left out with --ratio-only: populating 100,000 jobs takes minutes)

Comparison 1 also gives the server process's CPU time per request of each target (from /proc,
summed over the measured requests), whose ratio moves less than latencies with what else the
machine runs. Prints what was populated and how long it took, then p50 / p99 latencies and the
ratios.
Prints figures only; exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import Engine, insert, select  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from backends.base import EventKind, InstanceEvent, Placement  # noqa: E402
from server.api.auth import bearer_token  # noqa: E402
from server.api.errors import Unauthorized  # noqa: E402
from server.api.ids import global_id  # noqa: E402
from server.jobs import JobMachine, job_policy  # noqa: E402
from server.protocol import parse_job  # noqa: E402
from server.store import Store, open_store  # noqa: E402
from server.store.scratch import scratch_database  # noqa: E402
from server.store.tables import EventRow, InstanceRow, JobRow  # noqa: E402

PAGE = 50
MID_JOBS = 10_000  # comparison 1
SMALL_JOBS = 1_000  # comparison 2, the smaller database
LARGE_JOBS = 100_000  # comparison 2, the larger one (the first database, grown)
BATCH = 2_000  # jobs per insert transaction
RATIO_GOAL = 1.25
GROWTH_GOAL = 0.20
T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)

CONFIG = """\
protocolVersion: 2
name: train
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: "openpai/pytorch:1.13"}
taskRoles:
  master:
    instances: 5
    dockerImage: image
    resourcePerInstance: {cpu: 2, memoryMB: 4096, gpu: 1, ports: {ssh: 1, nccl: 2}}
    commands: ["python train.py --role master --rank $PAI_TASK_INDEX"]
  worker:
    instances: 5
    dockerImage: image
    resourcePerInstance: {cpu: 2, memoryMB: 4096, gpu: 1, ports: {ssh: 1, nccl: 2}}
    commands: ["python train.py --role worker --rank $PAI_TASK_INDEX"]
"""
ROLES = 2
PER_ROLE = 5

QUERY = """
query Jobs($first: Int) {
  jobs(first: $first) {
    edges {
      node { id name state taskRoles { name instances { index state ports { label ports } } } }
    }
  }
}
"""

# --- populating --------------------------------------------------------------------------------


def job_key(n: int) -> tuple[str, str]:
    """The name and id of the n-th job (0 is the newest), in the service's id format."""
    name = f"train{n:06d}"
    return name, f"{name}-{n:08x}"


@dataclass
class Template:
    """The rows the store wrote for one job, to be copied under other ids."""

    job: dict[str, Any]
    instances: list[dict[str, Any]]
    events: list[dict[str, Any]]
    job_id: str


def store_first_job(store: Store, owner_id: int) -> Template:
    """Job 0 stored as the service stores a job: created, then every instance placed (with
    ports) and started, saved with its transitions; its rows read back."""
    name, job_id = job_key(0)
    parsed = parse_job(CONFIG.replace("name: train", f"name: {name}", 1))
    assert parsed.spec is not None, parsed.issues
    spec = parsed.spec
    machine = JobMachine(job_policy(spec), job_id, at=T0)
    store.create_job(spec, machine.snapshot(), owner_id=owner_id)
    saved = len(machine.transitions)
    machine.start(at=T0)
    for n, view in enumerate(list(machine.instances)):
        where = Placement(
            node=f"node-{n % 4}",
            host_ip=f"10.0.0.{n % 4 + 1}",
            ports={"ssh": [20000 + n], "nccl": [21000 + 2 * n, 21001 + 2 * n]},
        )
        machine.apply(_event(machine, EventKind.PLACED, view.role, view.index, placement=where))
    for view in list(machine.instances):
        machine.apply(_event(machine, EventKind.STARTED, view.role, view.index))
    store.save_machine(job_id, machine.snapshot(), machine.transitions[saved:])
    with store.engine.connect() as conn:
        job = conn.execute(select(JobRow.__table__)).mappings().one()
        instances = conn.execute(select(InstanceRow.__table__)).mappings().all()
        events = conn.execute(select(EventRow.__table__)).mappings().all()
    return Template(
        job=dict(job),
        instances=[{k: v for k, v in r.items() if k != "id"} for r in instances],
        events=[{k: v for k, v in r.items() if k != "id"} for r in events],
        job_id=job_id,
    )


def _event(machine: JobMachine, kind: EventKind, role: str, index: int, **kw: Any) -> InstanceEvent:
    return InstanceEvent(
        job_id=machine.job_id,
        attempt=machine.attempt,
        kind=kind,
        role=role,
        index=index,
        at=T0,
        **kw,
    )


def copy_jobs(engine: Engine, template: Template, numbers: range) -> tuple[int, int, int]:
    """Insert jobs `numbers` as copies of the template, job n submitted n*10 s before job 0.
    Returns the rows inserted (jobs, instances, events)."""
    jobs_t, instances_t, events_t = JobRow.__table__, InstanceRow.__table__, EventRow.__table__
    first_name, first_id = job_key(0)
    counts = [0, 0, 0]
    for start in range(numbers.start, numbers.stop, BATCH):
        jobs, instances, events = [], [], []
        for n in range(start, min(start + BATCH, numbers.stop)):
            name, job_id = job_key(n)
            at = T0 - timedelta(seconds=10 * n)
            row = template.job
            jobs.append(
                {
                    **row,
                    "id": job_id,
                    "name": name,
                    "submitted_at": at,
                    "started_at": at,
                    "updated_at": at,
                    "config": row["config"].replace(first_name, name),
                    "spec": row["spec"].replace(first_name, name),
                    "machine": row["machine"].replace(first_id, job_id),
                }
            )
            instances += [{**r, "job_id": job_id, "started_at": at} for r in template.instances]
            events += [{**r, "job_id": job_id, "at": at} for r in template.events]
        with engine.begin() as conn:
            conn.execute(insert(jobs_t), jobs)
            conn.execute(insert(instances_t), instances)
            conn.execute(insert(events_t), events)
        counts[0] += len(jobs)
        counts[1] += len(instances)
        counts[2] += len(events)
    return counts[0], counts[1], counts[2]


@dataclass
class Database:
    url: str
    token: str
    template: Template
    engine: Engine
    jobs: int = 1


def prepare(url: str) -> tuple[Database, Store]:
    store = open_store(url)
    user, token = store.create_user("bench")
    return Database(url, token, store_first_job(store, user.id), store.engine), store


def grow(db: Database, total: int) -> str:
    """Copy jobs until `db` holds `total`; a line saying what was added and how long it took."""
    start = time.perf_counter()
    jobs, instances, events = copy_jobs(db.engine, db.template, range(db.jobs, total))
    db.jobs = total
    took = time.perf_counter() - start
    return (
        f"+{jobs:,} jobs, {instances:,} instances, {events:,} events in {took:.1f} s "
        f"(now {total:,} jobs, {total * ROLES * PER_ROLE:,} instances)"
    )


@contextlib.contextmanager
def databases(server_url: str | None, count: int) -> Iterator[list[str]]:
    """`count` empty databases: SQLite files in a temporary directory, or new PostgreSQL
    databases on the server of `server_url`, dropped afterwards."""
    if server_url is None:
        with tempfile.TemporaryDirectory(prefix="paigraph-bench-") as directory:
            yield [f"sqlite:///{Path(directory) / f'db{n}.sqlite'}" for n in range(count)]
        return
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(scratch_database(server_url, "paigraph_bench"))
            for _ in range(count)
        ]


# --- serving -----------------------------------------------------------------------------------


def plain_jobs(request: Request) -> JSONResponse:
    """The baseline: the caller's bearer token checked, then the newest jobs and their current
    attempt's instances in two queries."""
    store = request.app.state.runtime.get().store
    try:
        token = bearer_token(request.headers.get("authorization"))
    except Unauthorized:
        token = None
    if token is None or store.user_for_token(token) is None:
        return JSONResponse({"errors": [{"message": "unauthorized"}]}, status_code=401)
    engine: Engine = store.engine
    first = int(request.query_params.get("first", PAGE))
    jobs_t, instances_t = JobRow.__table__, InstanceRow.__table__
    with engine.connect() as conn:
        jobs = conn.execute(
            select(jobs_t.c.id, jobs_t.c.name, jobs_t.c.state, jobs_t.c.attempt)
            .order_by(jobs_t.c.submitted_at.desc(), jobs_t.c.id.desc())
            .limit(first)
        ).all()
        attempts = {job.id: job.attempt for job in jobs}
        rows = conn.execute(
            select(
                instances_t.c.job_id,
                instances_t.c.attempt,
                instances_t.c.role,
                instances_t.c.task_index,
                instances_t.c.state,
                instances_t.c.ports,
            )
            .where(instances_t.c.job_id.in_(list(attempts)))
            .order_by(instances_t.c.job_id, instances_t.c.role, instances_t.c.task_index)
        ).all()
    roles: dict[str, dict[str, list[dict[str, Any]]]] = {job_id: {} for job_id in attempts}
    for row in rows:
        if row.attempt == attempts[row.job_id]:
            roles[row.job_id].setdefault(row.role, []).append(
                {
                    "index": row.task_index,
                    "state": row.state,
                    "ports": [{"label": k, "ports": v} for k, v in row.ports.items()],
                }
            )
    edges = [
        {
            "node": {
                "id": global_id("Job", job.id),
                "name": job.name,
                "state": job.state,
                "taskRoles": [
                    {"name": role, "instances": instances}
                    for role, instances in roles[job.id].items()
                ],
            }
        }
        for job in jobs
    ]
    return JSONResponse({"data": {"jobs": {"edges": edges}}})


def serve(url: str, fd: int) -> None:
    """The server process: the product's app plus the baseline route, on the socket `fd`."""
    import uvicorn

    from server.app.asgi import create_app
    from server.app.serving import server_config

    app = create_app(db_url=url, backend=None)
    # Ahead of the web UI's catch-all route, which would otherwise answer it with the UI's page.
    app.router.routes.insert(0, Route("/plain/jobs", plain_jobs))
    # A socket object of the right family: uvicorn's own `fd=` takes every fd for AF_UNIX and
    # then leaves TCP_NODELAY off, which stalls responses written in two parts by 40 ms.
    sock = socket.socket(fileno=fd)
    config = server_config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


class Server:
    """`serve` in a subprocess on a free loopback port."""

    def __init__(self, url: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        fd = self.sock.fileno()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", url, "--fd", str(fd)], pass_fds=[fd]
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the server for {url} stopped at start")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"the server for {url} did not start within 60 s")
            time.sleep(0.1)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.sock.close()


FLOOR_SDL = """
type Query { jobs(first: Int): JobConnection! }
type JobConnection { edges: [JobEdge!]! }
type JobEdge { node: Job! }
type Job { id: ID! name: String! state: String! taskRoles: [TaskRole!]! }
type TaskRole { name: String! instances: [TaskInstance!]! }
type TaskInstance { index: Int! state: String! ports: [PortAllocation!]! }
type PortAllocation { label: String! ports: [Int!]! }
"""


def executor_alone(answer: dict[str, Any], warmup: int, requests: int) -> list[float]:
    """Seconds graphql-core takes to turn `answer`, held in memory, into the same result."""
    from graphql import build_schema, execute, parse

    schema = build_schema(FLOOR_SDL)
    document = parse(QUERY)
    times = []
    with frozen_heap():
        for n in range(warmup + requests):
            start = time.perf_counter()
            result = execute(schema, document, root_value=answer, variable_values={"first": PAGE})
            took = time.perf_counter() - start
            if n >= warmup:
                times.append(took)
    assert not isinstance(result, Awaitable) and result.data == answer, "a different result"
    return times


# --- measuring ---------------------------------------------------------------------------------

Sender = Callable[[], dict[str, Any]]


def graphql_request(client: httpx.Client, token: str) -> Sender:
    body = {"query": QUERY, "variables": {"first": PAGE}}
    headers = {"Authorization": f"Bearer {token}"}

    def send() -> dict[str, Any]:
        response = client.post("/graphql", json=body, headers=headers)
        response.raise_for_status()
        return response.json()

    return send


def plain_request(client: httpx.Client, token: str) -> Sender:
    headers = {"Authorization": f"Bearer {token}"}

    def send() -> dict[str, Any]:
        response = client.get("/plain/jobs", params={"first": PAGE}, headers=headers)
        response.raise_for_status()
        return response.json()

    return send


def plain_checks_token(client: httpx.Client) -> bool:
    """Whether the baseline refuses a request without a token and one with a wrong token."""
    missing = client.get("/plain/jobs", params={"first": PAGE})
    wrong = client.get(
        "/plain/jobs", params={"first": PAGE}, headers={"Authorization": "Bearer not-a-token"}
    )
    return missing.status_code == wrong.status_code == 401


def check(name: str, answer: dict[str, Any]) -> dict[str, Any]:
    if answer.get("errors") or not answer.get("data"):
        raise SystemExit(f"{name}: the server answered with errors: {answer.get('errors')}")
    edges = answer["data"]["jobs"]["edges"]
    if len(edges) != PAGE:
        raise SystemExit(f"{name}: expected {PAGE} jobs, got {len(edges)}")
    return answer["data"]


def measure(
    targets: dict[str, Sender], warmup: int, requests: int, server_pid: int | None = None
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per request of each target, sent in turn, `requests` each after `warmup` each;
    and, with `server_pid`, the server's CPU seconds per request of each target."""
    times: dict[str, list[float]] = {name: [] for name in targets}
    cpu = dict.fromkeys(targets, 0.0)
    with frozen_heap():
        for n in range(warmup + requests):
            for name, send in targets.items():
                used = cpu_seconds(server_pid)
                start = time.perf_counter()
                send()
                took = time.perf_counter() - start
                if n >= warmup:
                    times[name].append(took)
                    cpu[name] += cpu_seconds(server_pid) - used
    return times, {name: seconds / requests for name, seconds in cpu.items()}


_TICK = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """The CPU time process `pid` has used (all its threads), from /proc; 0 without a pid.
    The kernel counts it in clock ticks, each given whole to what ran at that tick, so the
    sum over many requests is a fair share even though one request is shorter than a tick."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) * _TICK


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """This process's heap out of the cycle collector's sweeps while it measures. It holds what
    it populated the databases with, and a full collection of that (70-100 ms here) would land
    in whatever it interrupts: a client's pause, not the server's time."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


def row(label: str, samples: list[float]) -> str:
    p50, p99 = percentiles(samples)
    return f"{label:>24}: p50 {p50 * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a PostgreSQL URL whose role may create databases")
    parser.add_argument("--requests", type=int, default=200, help="measured requests per target")
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured requests per target")
    parser.add_argument(
        "--ratio-only", action="store_true", help="comparison 1 only (no 100,000-job database)"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress shows when the output is a file
    if args.serve:
        serve(args.serve, args.fd)
        return

    began = time.perf_counter()
    with databases(args.db, 2) as (large_url, small_url):
        kind = "PostgreSQL" if args.db else "SQLite"
        print(f"database: {kind}; jobs of {ROLES} roles x {PER_ROLE} instances with ports")
        large, large_store = prepare(large_url)
        small, small_store = prepare(small_url)
        stores = [large_store, small_store]
        servers: list[Server] = []
        try:
            print(f"populate A: {grow(large, MID_JOBS)}")
            servers.append(Server(large.url))
            with httpx.Client(base_url=servers[0].base_url, timeout=60) as client:
                graphql = graphql_request(client, large.token)
                plain = plain_request(client, large.token)
                if not plain_checks_token(client):
                    raise SystemExit("the plain endpoint answered a request without a valid token")
                answer = check("graphql", graphql())
                same = answer == check("plain", plain())
                times, cpu = measure(
                    {"graphql": graphql, "plain": plain},
                    args.warmup,
                    args.requests,
                    servers[0].process.pid,
                )
            floor = executor_alone(answer, args.warmup, args.requests)
            print(f"\n1. {MID_JOBS:,} stored jobs: jobs(first: {PAGE}), {args.requests} requests")
            print(
                f"   (after {args.warmup} warm-up requests each; same data: {same}; "
                "both check the bearer token)"
            )
            print(row("graphql", times["graphql"]))
            print(row("plain starlette", times["plain"]))
            print(row("graphql-core alone", floor) + "   (from memory, no HTTP)")
            g50, g99 = percentiles(times["graphql"])
            b50, b99 = percentiles(times["plain"])
            verdict = "met" if g50 / b50 <= RATIO_GOAL else "NOT met"
            print(f"{'ratio p50':>24}: {g50 / b50:.2f}   goal <= {RATIO_GOAL:g}: {verdict}")
            print(f"{'ratio p99':>24}: {g99 / b99:.2f}")
            print(
                f"{'server cpu per request':>24}: graphql {cpu['graphql'] * 1000:.2f} ms, plain "
                f"{cpu['plain'] * 1000:.2f} ms, ratio {cpu['graphql'] / cpu['plain']:.2f}"
            )
            if args.ratio_only:
                return

            print()
            print(f"populate A: {grow(large, LARGE_JOBS)}")
            print(f"populate B: {grow(small, SMALL_JOBS)}")
            servers.append(Server(small.url))
            with (
                httpx.Client(base_url=servers[0].base_url, timeout=60) as on_large,
                httpx.Client(base_url=servers[1].base_url, timeout=60) as on_small,
            ):
                at_large = graphql_request(on_large, large.token)
                at_small = graphql_request(on_small, small.token)
                same = check("large", at_large()) == check("small", at_small())
                times, _ = measure(
                    {"small": at_small, "large": at_large}, args.warmup, args.requests
                )
            print(
                f"\n2. graphql jobs(first: {PAGE}) at {SMALL_JOBS:,} vs {LARGE_JOBS:,} stored jobs"
            )
            print(f"   (the same newest {PAGE} jobs in both; same data: {same})")
            print(row(f"{SMALL_JOBS:,} jobs", times["small"]))
            print(row(f"{LARGE_JOBS:,} jobs", times["large"]))
            s50, _ = percentiles(times["small"])
            l50, _ = percentiles(times["large"])
            growth = l50 / s50 - 1
            verdict = "met" if growth <= GROWTH_GOAL else "NOT met"
            print(
                f"{'p50 growth':>24}: {growth * 100:+.1f}%   "
                f"goal <= +{GROWTH_GOAL * 100:.0f}%: {verdict}"
            )
        finally:
            for server in servers:
                server.close()
            for store in stores:
                store.close()
    print(f"\ntotal time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
    sys.exit(0)
