"""How fast a change of a job reaches everyone who follows it live, beside a raw broadcast.

    python bench/subscriptions.py [--subscribers 1000 10000] [--changes 20] [--repeat 3]
                                  [--db postgresql://...]

A real uvicorn server runs in this process, in this event loop, on a fresh database (a
temporary SQLite file; with --db, a new database on that PostgreSQL server, dropped at the
end). For each run a running job of one role x `changes + 1` instances is stored. A client
process (asyncio, the websockets library, graphql-transport-ws with a bearer token) opens the
subscribers, each on its own connection, and subscribes to `jobEvents(jobId, after)` from the
job's newest event on.

Then, `--changes` times, 0.2 s apart, one more instance of the job ends (exit code 0), as the
job service does it: the job machine takes the exit, the store saves the machine with the new
event rows (in a worker thread), and a JobNotice is published on the server's event bus (with
PostgreSQL, through NOTIFY and the server's own LISTEN connection). Per change it measures the
time from just before the save until the change's last event has arrived on every subscriber's
connection (both processes read CLOCK_MONOTONIC). The client process's own work (reading one
websocket frame per subscriber and change) is part of the figure, as a real client's would be.

The baseline, in the same run: a minimal Starlette websocket endpoint on a second uvicorn
server in this loop (same options) answers the same client's opening and, per change, sends
one pre-encoded frame to every connection in a loop; the same client process measures it the
same way. That is the physical limit of this machine for the figure. For each size, paigraph
and the raw broadcast run `--repeat` times, alternating; the median run of each is shown, with
the median of the runs' p99 ratios. Each line also gives the CPU time this process (the
server) spent per change and per subscriber, and the full garbage collections during the
changes; the memory per subscriber is how much this process grew while paigraph's
subscribers opened (its first run: later runs reuse what earlier ones freed). The open files
limit is raised so that 10,000 connections fit (the client process raises its own).

Goals (issue 30): p99 at most 1.5 times the raw broadcast's, under 50 KB a subscriber, and
under 250 ms at 10,000 subscribers if this machine allows. Prints figures only; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import websockets  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import WebSocketRoute  # noqa: E402
from starlette.websockets import WebSocket  # noqa: E402

from backends.base import EventKind, InstanceEvent, Placement, utcnow  # noqa: E402
from server.api.ids import global_id  # noqa: E402
from server.api.jobs.types import event_cursor  # noqa: E402
from server.app.asgi import create_app  # noqa: E402
from server.app.serving import on_loopback  # noqa: E402
from server.events import JobNotice  # noqa: E402
from server.jobs import JobMachine, job_policy  # noqa: E402
from server.protocol import parse_job  # noqa: E402
from server.store import Store, open_store  # noqa: E402
from server.store.scratch import scratch_database  # noqa: E402

GOAL_MS = 250.0  # at 10,000 subscribers, if this machine allows
GOAL_RATIO = 1.5  # p99 at most this times the raw broadcast's to the same connections
GOAL_KB = 50  # server memory per subscriber
SPACING_S = 0.2
DEADLINE_S = 60.0  # a subscriber that has not seen a change by then is reported stuck
OPENING = 100  # connections being opened at once

JOB_EVENTS = """
subscription($jobId: ID!, $after: String) {
  jobEvents(jobId: $jobId, after: $after) { cursor sequence type state taskRole index }
}
"""


def clock() -> float:
    """System-wide monotonic seconds: comparable between the two processes."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft limit of open files towards `wanted` (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# --- the subscribers (a process of their own) --------------------------------------------------


class Subscriber:
    """One websocket connection following jobEvents; notes when each sequence arrived."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, float]] = []  # (sequence, clock) in order of arrival
        self.changed = asyncio.Event()

    async def run(self, url: str, token: str, variables: dict[str, Any], ready: Any) -> None:
        async with websockets.connect(
            url, subprotocols=["graphql-transport-ws"], open_timeout=60, ping_interval=None
        ) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": {"token": token}}))
            ack = json.loads(await ws.recv())
            if ack.get("type") != "connection_ack":
                raise RuntimeError(f"not acknowledged: {ack}")
            subscribe = {"query": JOB_EVENTS, "variables": variables}
            await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
            ready()
            async for raw in ws:
                now = clock()
                message = json.loads(raw)
                if message.get("type") == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
                    continue
                if message.get("type") != "next":
                    raise RuntimeError(f"unexpected message: {message}")
                payload = message["payload"]
                if payload.get("errors"):
                    raise RuntimeError(f"the subscription failed: {payload['errors']}")
                self.arrivals.append((payload["data"]["jobEvents"]["sequence"], now))
                self.changed.set()

    def reached(self, sequence: int) -> float | None:
        """When the first event at or beyond `sequence` arrived, if it has."""
        for seen, at in self.arrivals:
            if seen >= sequence:
                return at
        return None


async def subscribers_main(url: str, token: str, job_id: str, after: str, count: int) -> None:
    """Open `count` subscribers, say `ready`, then answer each sequence read on stdin with
    the clock at which the last subscriber had it; stop at end of input."""
    raise_fd_limit(count + 256)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    subscribers = [Subscriber() for _ in range(count)]
    variables = {"jobId": job_id, "after": after}
    ws_url = url.replace("http://", "ws://") + "/graphql"
    opening = asyncio.Semaphore(OPENING)
    opened = 0
    all_open = asyncio.Event()

    def one_ready() -> None:
        nonlocal opened
        opening.release()
        opened += 1
        if opened == count:
            all_open.set()

    async def start(subscriber: Subscriber) -> None:
        await opening.acquire()
        await subscriber.run(ws_url, token, variables, one_ready)

    tasks = [asyncio.create_task(start(s)) for s in subscribers]
    waiting = asyncio.create_task(all_open.wait())
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        for task in done:
            task.result()  # raises why a subscriber ended early
    print("ready", flush=True)
    while line := await reader.readline():
        sequence = int(line)
        deadline = clock() + DEADLINE_S
        times: list[float] = []
        for subscriber in subscribers:
            while (at := subscriber.reached(sequence)) is None and clock() < deadline:
                subscriber.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(subscriber.changed.wait(), deadline - clock())
            if at is None:
                break
            times.append(at)
        if len(times) < count:
            print(f"stuck {count - len(times)}", flush=True)
        else:
            print(f"{sequence} {max(times)!r}", flush=True)
        for subscriber in subscribers:  # keep memory flat over many changes
            subscriber.arrivals = [a for a in subscriber.arrivals if a[0] >= sequence]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- the job and its changes -------------------------------------------------------------------


def config(instances: int, labels: Sequence[str] = ("ssh",), name: str = "follow") -> str:
    ports = ", ".join(f"{label}: 1" for label in labels)
    return f"""\
protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: "openpai/pytorch:1.13"}}
taskRoles:
  worker:
    instances: {instances}
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 1024, gpu: 0, ports: {{{ports}}}}}
    commands: ["python work.py"]
"""


def running_job(
    store: Store,
    instances: int,
    *,
    owner_id: int | None = None,
    labels: Sequence[str] = ("ssh",),
    name: str = "follow",
) -> JobMachine:
    """A stored job (of a new user `owner` unless `owner_id` is given) whose instances have
    all been placed, with a port of each label, and started. bench/web.py uses it too."""
    if owner_id is None:
        owner_id = store.create_user("owner")[0].id
    parsed = parse_job(config(instances, labels, name))
    assert parsed.spec is not None, parsed.issues
    at = utcnow() - timedelta(minutes=1)
    machine = JobMachine(job_policy(parsed.spec), f"follow-{secrets.token_hex(4)}", at=at)
    store.create_job(parsed.spec, machine.snapshot(), owner_id=owner_id)
    saved = len(machine.transitions)
    machine.start(at=at)
    for n, view in enumerate(list(machine.instances)):
        ports = {label: [20000 + 10000 * k + n] for k, label in enumerate(labels)}
        where = Placement(node=f"node-{n % 4}", host_ip=f"10.0.0.{n % 250 + 1}", ports=ports)
        machine.apply(instance_event(machine, EventKind.PLACED, view.index, placement=where))
    for view in list(machine.instances):
        machine.apply(instance_event(machine, EventKind.STARTED, view.index))
    store.save_machine(machine.job_id, machine.snapshot(), machine.transitions[saved:])
    return machine


def instance_event(machine: JobMachine, kind: EventKind, index: int, **kw: Any) -> InstanceEvent:
    return InstanceEvent(
        job_id=machine.job_id,
        attempt=machine.attempt,
        kind=kind,
        role="worker",
        index=index,
        at=utcnow(),
        **kw,
    )


class Changes:
    """Ends one instance after another, the way the job service records and announces it."""

    def __init__(self, store: Store, bus: Any, machine: JobMachine) -> None:
        self.store, self.bus, self.machine = store, bus, machine
        self.next_index = 0

    def last_sequence(self) -> int:
        job = self.store.get_job(self.machine.job_id)
        assert job is not None
        return job.last_sequence

    async def one(self) -> tuple[float, int]:
        """Make a change; (clock when it began, the sequence of its last event)."""
        machine = self.machine
        saved = len(machine.transitions)
        machine.apply(instance_event(machine, EventKind.EXITED, self.next_index, exit_code=0))
        self.next_index += 1
        if machine.is_final:
            raise SystemExit("the job ended before the changes did; use more instances")
        began = clock()
        events = await asyncio.to_thread(
            self.store.save_machine, machine.job_id, machine.snapshot(), machine.transitions[saved:]
        )
        sequence = events[-1].sequence
        notice = JobNotice(job_id=machine.job_id, sequence=sequence, state=machine.state.value)
        await self.bus.publish(notice)
        return began, sequence


# --- the baseline: a raw broadcast of one frame ---------------------------------------------


class RawBroadcast:
    """The physical limit: a minimal websocket server on the same stack (Starlette on the same
    uvicorn, with the same options) that answers the subscribers' graphql-transport-ws opening
    and, for a change, sends one pre-encoded frame to every connection in a loop."""

    def __init__(self) -> None:
        self.sockets: dict[WebSocket, None] = {}
        self.sequence = 10**6
        self.app = Starlette(routes=[WebSocketRoute("/graphql", self.endpoint)])

    async def endpoint(self, ws: WebSocket) -> None:
        await ws.accept(subprotocol="graphql-transport-ws")
        await ws.receive_text()  # connection_init
        await ws.send_text('{"type":"connection_ack"}')
        await ws.receive_text()  # subscribe, with the id "1"
        self.sockets[ws] = None
        try:
            while (await ws.receive())["type"] != "websocket.disconnect":
                pass
        finally:
            self.sockets.pop(ws, None)

    async def one(self) -> tuple[float, int]:
        self.sequence += 1
        event = {
            "cursor": event_cursor(self.sequence),
            "sequence": self.sequence,
            "type": "INSTANCE_STATE",
            "state": "SUCCEEDED",
            "taskRole": "worker",
            "index": 0,
        }
        began = clock()
        frame = orjson.dumps(
            {"id": "1", "type": "next", "payload": {"data": {"jobEvents": event}}}
        ).decode()
        for ws in list(self.sockets):
            await ws.send_text(frame)
        return began, self.sequence


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    latencies: list[float]  # seconds from a change to its delivery to every subscriber
    opening: float  # seconds to open the subscriptions
    cpu: float  # CPU seconds this process (the server) spent per change
    collections: list[float]  # seconds of each full garbage collection during the changes
    memory: float  # bytes this process grew by per subscriber while they opened


class FullCollections:
    """Times the collector's full (oldest generation) collections while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: list[float] = []
        self._began = 0.0
        gc.callbacks.append(self._seen)

    def close(self) -> None:
        gc.callbacks.remove(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if not self.on or info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds.append(time.perf_counter() - self._began)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@dataclass
class Target:
    """What the subscribers connect to, and how a change is made there."""

    url: str
    job_id: str  # global ID
    after: str
    change: Callable[[], Awaitable[tuple[float, int]]]
    listening: Callable[[], int]  # subscriptions the server serves now


async def follow(target: Target, token: str, count: int, rounds: int) -> Run:
    """`rounds` changes followed by `count` subscribers."""
    while target.listening() > 0:  # the subscribers of an earlier run have gone
        await asyncio.sleep(0.05)
    gc.collect()
    resident = resident_bytes()
    opened_at = clock()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--subscribe",
        target.url,
        token,
        target.job_id,
        target.after,
        str(count),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 900)
        if line.strip() != b"ready":
            raise SystemExit(f"the subscribers did not start: {line.decode().strip()!r}")
        while target.listening() < count:  # every subscription is served
            await asyncio.sleep(0.05)
        opening = clock() - opened_at
        await asyncio.sleep(1.0)  # let the first reads of the log settle
        memory = (resident_bytes() - resident) / count
        latencies = []
        collections = FullCollections()
        collections.on = True
        cpu = cpu_seconds()
        for _ in range(rounds):
            began, sequence = await target.change()
            process.stdin.write(f"{sequence}\n".encode())
            await process.stdin.drain()
            answer = (await process.stdout.readline()).decode().split()
            if not answer or answer[0] == "stuck":
                raise SystemExit(f"subscribers did not get change {sequence}: {answer}")
            latencies.append(float(answer[1]) - began)
            await asyncio.sleep(SPACING_S)
        cpu = (cpu_seconds() - cpu) / rounds
        collections.close()
        return Run(latencies, opening, cpu, collections.seconds, memory)
    finally:
        process.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 120)
        if process.returncode is None:
            process.kill()
            await process.wait()


@contextlib.contextmanager
def database(server_url: str | None) -> Iterator[str]:
    """A temporary SQLite file, or a new PostgreSQL database dropped afterwards."""
    if server_url is None:
        with tempfile.TemporaryDirectory(prefix="paigraph-bench-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.sqlite'}"
        return
    with scratch_database(server_url, "paigraph_bench") as url:
        yield url


def p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[98]


def row(label: str, run: Run, count: int) -> str:
    p50 = statistics.median(run.latencies)
    longest = max(run.collections, default=0.0)
    return (
        f"{label:>20}: p50 {p50 * 1000:7.1f} ms   p99 {p99(run.latencies) * 1000:7.1f} ms   "
        f"server cpu {run.cpu * 1000:6.1f} ms/change ({run.cpu * 1e6 / count:5.1f} us a "
        f"subscriber)   full gc {len(run.collections)}x (longest {longest * 1000:.0f} ms)"
    )


def median_run(runs: list[Run]) -> Run:
    """The run with the median p99 (its other figures with it)."""
    return sorted(runs, key=lambda r: p99(r.latencies))[len(runs) // 2]


@dataclass
class Sized:
    count: int
    paigraph: list[Run]
    raw: list[Run]


async def run(args: argparse.Namespace) -> None:
    counts = sorted(set(args.subscribers))
    limit = raise_fd_limit(2 * max(counts) + 256)
    rounds = args.changes
    results: list[Sized] = []
    with database(args.db) as url:
        store = open_store(url)
        try:
            owner_id = store.create_user("owner")[0].id
            _, token = store.create_user("watcher")
            # one user follows with every subscriber here, where a real crowd is many users
            app = create_app(db_url=url, backend=None, max_subscriptions_per_user=max(counts))
            raw = RawBroadcast()
            async with (
                on_loopback(app, log_level="warning", access_log=False, backlog=4096) as base,
                on_loopback(raw.app, log_level="warning", access_log=False, backlog=4096) as bare,
            ):
                runtime = app.state.runtime.get()
                jobs = 0

                def served() -> int:
                    bus = getattr(runtime.bus, "local", runtime.bus)  # PostgresBus: its local part
                    return max(runtime.broadcasts.members, bus.subscriber_count)

                async def paigraph(count: int) -> Run:
                    nonlocal jobs
                    jobs += 1
                    machine = await asyncio.to_thread(
                        functools.partial(
                            running_job, store, rounds + 1, owner_id=owner_id, name=f"follow{jobs}"
                        )
                    )
                    changes = Changes(store, runtime.bus, machine)
                    after = event_cursor(await asyncio.to_thread(changes.last_sequence))
                    target = Target(
                        base, global_id("Job", machine.job_id), after, changes.one, served
                    )
                    return await follow(target, token, count, rounds)

                async def broadcast(count: int) -> Run:
                    target = Target(bare, "-", event_cursor(0), raw.one, lambda: len(raw.sockets))
                    return await follow(target, token, count, rounds)

                single = await paigraph(1)
                for count in counts:
                    sized = Sized(count, [], [])
                    for _ in range(args.repeat):  # alternating, each beside its baseline
                        sized.paigraph.append(await paigraph(count))
                        sized.raw.append(await broadcast(count))
                    results.append(sized)
        finally:
            store.close()
    report(args, limit, rounds, single, results)


def report(
    args: argparse.Namespace, limit: int, rounds: int, single: Run, results: list[Sized]
) -> None:
    kind = "PostgreSQL (NOTIFY)" if args.db else "SQLite (in-process bus)"
    print(f"database: {kind}; open files limit {limit}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"job: 1 role x {rounds + 1} instances; each change ends one more; {rounds} changes "
        f"a run, {SPACING_S} s apart; {args.repeat} alternating runs per size, median of each"
    )
    print("from a change to its delivery to every subscriber:")
    print(row("paigraph, 1", single, 1))
    goals = []
    for sized in results:
        count = sized.count
        ours, raw = median_run(sized.paigraph), median_run(sized.raw)
        pairs = zip(sized.paigraph, sized.raw, strict=True)
        ratios = [p99(o.latencies) / p99(r.latencies) for o, r in pairs]
        ratio = statistics.median(ratios)
        per_subscriber = (ours.cpu - single.cpu) / max(count - 1, 1)
        memory = sized.paigraph[0].memory  # the first: later runs reuse what earlier ones freed
        print(f"opened {count:,} subscriptions in {ours.opening:.1f} s (raw: {raw.opening:.1f} s)")
        print(row(f"paigraph, {count:,}", ours, count))
        print(row(f"raw broadcast, {count:,}", raw, count))
        print(
            f"{'':>20}  p99 ratio {ratio:.2f} (runs: {', '.join(f'{r:.2f}' for r in ratios)}); "
            f"server cpu per added subscriber {per_subscriber * 1e6:.1f} us a change; "
            f"memory {memory / 1024:.1f} KB a subscriber"
        )
        goals.append((count, ratio, p99(ours.latencies) * 1000, memory))
    for count, ratio, worst, memory in goals:
        met = ratio <= GOAL_RATIO
        print(
            f"{'goal':>20}: {count:,}: p99 at most {GOAL_RATIO}x the raw broadcast: "
            f"{'met' if met else 'NOT met'} ({ratio:.2f}); memory under {GOAL_KB} KB a "
            f"subscriber: {'met' if memory < GOAL_KB * 1024 else 'NOT met'}"
            + (
                f"; p99 under {GOAL_MS:.0f} ms: {'met' if worst < GOAL_MS else 'NOT met'}"
                if count >= 10_000
                else ""
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per size")
    parser.add_argument("--db", help="a PostgreSQL URL whose role may create databases")
    parser.add_argument("--subscribe", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscribe:
        url, token, job_id, after, count = args.subscribe
        asyncio.run(subscribers_main(url, token, job_id, after, int(count)))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
    sys.exit(0)
