"""Fault suite: `paigraph serve` killed with SIGKILL at moments across a multi-role job's life,
started again on the same database and state directory each time.

One reference run without a kill says what the job ends with. Then each case submits the job
again, kills the server at its moment (right after a given event is on record, or after a
seeded random delay), starts it again, and checks that:

- the job ends as the reference did: state, attempt, retries, and per instance its state,
  exit code and task attempt;
- nothing was started twice: every container name, which carries the run number, is started
  once (Docker's own event stream is the witness), and each instance's commands ran as many
  times as in the reference (its log marks each run); and nothing is left behind;
- the event log is 1..N without a gap, and each instance went through the same states in the
  same order as in the reference (a repeated or missing transition shows here);
- a subscriber that reconnects with its last cursor after each kill gets every event exactly
  once.

The random moments come from a seeded generator: PAIGRAPH_FAULT_SEED chooses another seed
(the seed is printed, so a failure can be replayed) and PAIGRAPH_FAULT_RANDOM_CASES how many
(4, so the suite keeps to CI's time); the targeted moments are fixed cases. Half of the random
moments (PAIGRAPH_FAULT_WINDOW_SHARE) are drawn around the flaky instance's first end, so that
many fall between that end and the start of its retry: the window where one end may be told
twice after a restart, and must still count as one death and one retry. `bench/faults.py` runs
many seeded moments this way and says how many fell in that window.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import docker
import pytest

from server.api.ids import parse_global_id
from server.client.remote import Client, RemoteError
from simulator.containers import OWNER
from tests.servers import (
    FINAL,
    FOLLOW,
    Server,
    event_log,
    final_job,
    instances,
    nothing_left,
    served,
)
from tests.simulated import job_config, leftovers, remove_leftovers
from tests.waiting import NotInTime, until

pytestmark = [pytest.mark.docker, pytest.mark.faults]

SEED = int(os.environ.get("PAIGRAPH_FAULT_SEED", "1802"))
RANDOM_CASES = int(os.environ.get("PAIGRAPH_FAULT_RANDOM_CASES", "4"))
WINDOW_SHARE = float(os.environ.get("PAIGRAPH_FAULT_WINDOW_SHARE", "0.5"))

# Every instance ends on its own and no completion rule fires early, so the job's result does not
# depend on which instance ends first, nor on how long the server stays down: the ps succeeds,
# the checker fails (it may: minFailedInstances -1), the flaky instance fails its first run
# (exit 3), is retried on its own (taskRetryCount 1, gang allocation off) and succeeds, and the
# job SUCCEEDS when the last instance ends.
FLAKY = (
    "if [ -e /usr/local/pai/run/failed-once ]; then echo second run; "
    "else touch /usr/local/pai/run/failed-once; sleep 1; exit 3; fi"
)
UNDECIDED = {"minSucceededInstances": -1}
LIFE = job_config(
    name="life",
    roles={
        "ps": {"commands": ["sleep 1"], "completion": UNDECIDED},
        "checker": {
            "commands": ["sleep 1", "exit 3"],
            "completion": {**UNDECIDED, "minFailedInstances": -1},
        },
        "flaky": {"commands": [FLAKY], "taskRetryCount": 1, "completion": UNDECIDED},
        "worker": {
            "instances": 2,
            "commands": ["sleep 4", "echo worker $PAI_TASK_INDEX done"],
            "completion": UNDECIDED,
        },
    },
    extras={"gangAllocation": False},
)

SUBMIT = (
    "mutation($config: String!) { submitJob(input: {config: $config}) {"
    " job { id } errors { message } } }"
)
JOB_IDS = "query { jobs(first: 100) { edges { node { id name } } } }"
EVENT_TIMES = """query($id: ID!, $after: String) { job(id: $id) {
  events(first: 100, after: $after) {
    edges { node { at type state taskRole index } }
    pageInfo { hasNextPage endCursor }
  }
} }"""


# --- what a run of the job shows ---------------------------------------------------------------


def outcome(found: dict[str, Any]) -> dict[str, Any]:
    """What must not change with a kill: the job's end and each instance's."""
    return {
        "job": (found["state"], found["attempt"], found["retries"]),
        "instances": {
            name: (i["state"], i["exitCode"], i["taskAttempt"])
            for name, i in sorted(instances(found).items())
        },
    }


def paths(log: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The states the job and each instance went through, in order."""
    found: dict[str, list[str]] = {}
    for event in log:
        who = "job" if event["type"] == "JOB_STATE" else f"{event['taskRole']}-{event['index']}"
        found.setdefault(who, []).append(f"{event['attempt']}:{event['state']}")
    return found


class Starts:
    """Docker's `start` events of the server's containers, by container name, read from the
    engine's own stream for the whole test: a name seen twice is an instance started twice."""

    def __init__(self, owner: str) -> None:
        self.client = docker.from_env()
        self.names: list[str] = []
        self._stream = self.client.api.events(
            decode=True,
            filters={"type": "container", "event": "start", "label": f"{OWNER}={owner}"},
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.names.append(event["Actor"]["Attributes"]["name"])
        except Exception:  # closed at the end of the test
            return

    def of(self, job_id: str) -> list[str]:
        """The names started for the job (its API id), with the job's own id left out."""
        raw = parse_global_id(job_id)[1]
        return [name.replace(raw, "JOB") for name in self.names if f"-{raw}-" in name]

    def close(self) -> None:
        self._stream.close()


class Follower:
    """A subscriber to the job's events that, whenever the connection breaks (the server was
    killed), connects again with the cursor of the last event it received."""

    def __init__(self, url: str, job_id: str) -> None:
        self.client = Client(url, "")
        self.job_id = job_id
        self.received: list[dict[str, Any]] = []
        self.reconnects = 0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self.done.is_set():
            after = self.received[-1]["cursor"] if self.received else None
            try:
                for data in self.client.subscribe(FOLLOW, {"id": self.job_id, "after": after}):
                    self.received.append(data["jobEvents"])
                    event = self.received[-1]
                    if event["type"] == "JOB_STATE" and event["state"] in FINAL:
                        self.done.set()
                        return
            except RemoteError:
                self.reconnects += 1
                time.sleep(0.1)

    def wait(self, timeout: float = 60) -> list[dict[str, Any]]:
        assert self.done.wait(timeout), f"the subscriber saw no end: {self.received[-3:]}"
        return self.received


# --- the moments -------------------------------------------------------------------------------


Check = Callable[[list[dict[str, Any]]], bool]


def on(kind: str, state: str, who: str | None = None, nth: int = 1) -> Check:
    """The event log holds its `nth` event of the job (who=None) or instance going to `state`."""

    def seen(log: list[dict[str, Any]]) -> bool:
        matching = [
            e
            for e in log
            if e["state"] == state
            and e["type"] == kind
            and (who is None or f"{e['taskRole']}-{e['index']}" == who)
        ]
        return len(matching) >= nth

    return seen


def instance(who: str, state: str, nth: int = 1) -> Check:
    return on("INSTANCE_STATE", state, who, nth)


def job_state(state: str) -> Check:
    return on("JOB_STATE", state)


@dataclass
class Moment:
    name: str
    after: Check | None = None  # kill once the event log shows this (None: after submitting)
    delay: float = 0.0  # and this many seconds later
    during_submit: bool = False  # kill while the submission is under way


TARGETED = [
    Moment("submission being stored", during_submit=True, delay=0.0),
    Moment("submission answered", during_submit=True, delay=0.15),
    Moment("job waiting, first attempt queued", after=job_state("WAITING")),
    Moment("first instance placed", after=instance("ps-0", "STARTING")),
    Moment("job starting", after=job_state("STARTING")),
    Moment("job running", after=job_state("RUNNING")),
    Moment("instance exited and failed", after=instance("checker-0", "FAILED")),
    Moment("retry decided", after=instance("flaky-0", "WAITING")),
    Moment("retry placed", after=instance("flaky-0", "STARTING", nth=2)),
    Moment("retry running", after=instance("flaky-0", "RUNNING", nth=2)),
    Moment("first worker succeeded", after=instance("worker-0", "SUCCEEDED")),
    Moment(
        "second worker succeeded, completion being decided", after=instance("worker-1", "SUCCEEDED")
    ),
]


# The flaky instance's first run sleeps 1 s and exits 3; its retry starts a fraction of a second
# later. Counted from when the event log shows that run RUNNING (it is recorded a little after
# the container started), this span holds its end, the retry being decided and the retry's
# start, with a margin either side.
AROUND_THE_RETRY = (0.6, 2.2)


def random_moments(
    rng: random.Random, count: int, span: float, window_share: float = WINDOW_SHARE
) -> list[Moment]:
    """`count` seeded moments: `window_share` of them drawn around the flaky instance's first
    end and its retry's start (`AROUND_THE_RETRY`), the others anywhere in the job's first
    `span` seconds."""
    around = round(count * window_share)
    delays = sorted(rng.uniform(0, span) for _ in range(count - around))
    near = sorted(rng.uniform(*AROUND_THE_RETRY) for _ in range(around))
    moments = [
        Moment(f"random {n + 1}: {delay:.2f} s after submitting", delay=delay)
        for n, delay in enumerate(delays)
    ]
    moments += [
        Moment(
            f"random {len(delays) + n + 1}: {delay:.2f} s after flaky-0 first ran",
            after=instance("flaky-0", "RUNNING"),
            delay=delay,
        )
        for n, delay in enumerate(near)
    ]
    return moments


# --- running one case ----------------------------------------------------------------------------


@dataclass
class Run:
    job_id: str
    outcome: dict[str, Any]
    log: list[dict[str, Any]]
    followed: list[dict[str, Any]]
    starts: list[str]
    commands_ran: dict[str, int] = field(default_factory=dict)  # by instance, from its log
    reconnects: int = 0
    killed_at: datetime | None = None
    retry_window: tuple[datetime, datetime] | None = None  # flaky-0's first end, retry's start
    left: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))


def submit(client: Client) -> str:
    answer = client.execute(SUBMIT, {"config": LIFE})["submitJob"]
    assert answer["errors"] == [], answer["errors"]
    return answer["job"]["id"]


def submitted_life_jobs(client: Client) -> set[str]:
    edges = client.execute(JOB_IDS)["jobs"]["edges"]
    return {e["node"]["id"] for e in edges if e["node"]["name"] == "life"}


def run_case(server: Server, starts: Starts, moment: Moment | None) -> Run:
    """Run the job once, killing the server at `moment` (None: no kill)."""
    client = server.client()
    before = submitted_life_jobs(client)
    killed_at = None
    if moment is not None and moment.during_submit:
        job_id = _killed_while_submitting(server, client, before, moment.delay)
    else:
        job_id = submit(client)
        if moment is not None:
            killed_at = _kill_at(server, client, job_id, moment)
    follower = Follower(server.url, job_id)
    found = final_job(client, job_id, timeout=90)
    followed = follower.wait()
    run = Run(
        job_id=job_id,
        outcome=outcome(found),
        log=event_log(client, job_id),
        followed=followed,
        starts=[],
        reconnects=follower.reconnects,
        killed_at=killed_at,
        retry_window=retry_window(client, job_id),
    )
    for name in run.outcome["instances"]:
        role, _, index = name.rpartition("-")
        text = "".join(client.task_logs(job_id, role, int(index), follow=False))
        run.commands_ran[name] = text.count(f"task role {role}: starting")
    try:
        nothing_left(server.owner)
    except NotInTime:
        run.left = leftovers(server.owner)
        remove_leftovers(server.owner)  # the next case starts clean
    run.starts = sorted(starts.of(job_id))
    return run


def _killed_while_submitting(server: Server, client: Client, before: set[str], delay: float) -> str:
    """Send the submission and kill the server `delay` seconds later; the job it stored, if
    it stored one (then it must run), or else the job submitted again."""
    answered: list[str] = []

    def send() -> None:
        with contextlib.suppress(RemoteError):  # killed before it answered
            answered.append(submit(client))

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(delay)
    server.kill()
    sender.join(timeout=30)
    server.start()
    stored = submitted_life_jobs(client) - before
    assert len(stored) <= 1, stored
    if answered:
        assert stored == {answered[0]}, (answered, stored)
    return stored.pop() if stored else submit(client)


def _kill_at(server: Server, client: Client, job_id: str, moment: Moment) -> datetime:
    """Kill the server at the moment and start it again; when it was killed."""
    if moment.after is not None:
        check = moment.after
        until(
            lambda: check(event_log(client, job_id)),
            f"{moment.name} before the kill",
            timeout=60,
            every=0.03,
        )
    time.sleep(moment.delay)
    killed_at = datetime.now(UTC)
    server.kill()
    server.start()
    return killed_at


def retry_window(client: Client, job_id: str) -> tuple[datetime, datetime] | None:
    """When flaky-0's first run ended (its retry was decided at that time) and when its retry
    started running, from the job's event log; None when either is missing."""
    ended = started = None
    runs = 0
    after = None
    while True:
        page = client.execute(EVENT_TIMES, {"id": job_id, "after": after})["job"]["events"]
        for edge in page["edges"]:
            event = edge["node"]
            if event["type"] != "INSTANCE_STATE" or (event["taskRole"], event["index"]) != (
                "flaky",
                0,
            ):
                continue
            at = datetime.fromisoformat(event["at"])
            if event["state"] == "WAITING" and runs == 1 and ended is None:
                ended = at
            elif event["state"] == "RUNNING":
                runs += 1
                if runs == 2:
                    started = at
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    return (ended, started) if ended is not None and started is not None else None


def in_retry_window(run: Run) -> bool:
    """Whether the server was killed between flaky-0's first end and its retry's start."""
    if run.killed_at is None or run.retry_window is None:
        return False
    ended, started = run.retry_window
    return ended <= run.killed_at <= started


def differences(expected: Run, run: Run) -> list[str]:
    """What this run did differently from the reference, in words; empty when nothing."""
    problems = []
    if run.outcome != expected.outcome:
        problems.append(f"ended {run.outcome}, not {expected.outcome}")
    sequences = [e["sequence"] for e in run.log]
    if sequences != list(range(1, len(run.log) + 1)):
        problems.append(f"event sequences {sequences}")
    if paths(run.log) != paths(expected.log):
        problems.append(f"went through {paths(run.log)}, not {paths(expected.log)}")
    if run.followed != run.log:
        seen = [e["sequence"] for e in run.followed]
        problems.append(f"the subscriber received sequences {seen} of {len(run.log)}")
    if run.left != ([], []):
        problems.append(f"left behind (containers, networks): {run.left}")
    twice = sorted({n for n in run.starts if run.starts.count(n) > 1})
    if twice:
        problems.append(f"started twice: {twice}")
    if run.commands_ran != expected.commands_ran:
        problems.append(f"commands ran {run.commands_ran} times, not {expected.commands_ran}")
    return problems


@dataclass
class Life:
    """One server for the module, and the job's run without a kill."""

    server: Server
    starts: Starts
    expected: Run


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Life]:
    print(f"PAIGRAPH_FAULT_SEED={SEED}")
    with served("sqlite", tmp_path_factory.mktemp("life")) as server:
        starts = Starts(server.owner)
        try:
            server.start()
            yield Life(server, starts, reference(server, starts))
        finally:
            starts.close()


def reference(server: Server, starts: Starts) -> Run:
    expected = run_case(server, starts, None)
    assert expected.outcome["job"] == ("SUCCEEDED", 1, 0), expected.outcome
    assert expected.outcome["instances"]["flaky-0"] == ("SUCCEEDED", 0, 2)
    assert expected.outcome["instances"]["checker-0"] == ("FAILED", 3, 1)
    assert expected.followed == expected.log
    assert expected.commands_ran == {n: 2 if n == "flaky-0" else 1 for n in expected.commands_ran}
    assert expected.starts == [
        "pai-JOB-1-checker-0",
        "pai-JOB-1-flaky-0",
        "pai-JOB-1-flaky-0-run2",
        "pai-JOB-1-ps-0",
        "pai-JOB-1-worker-0",
        "pai-JOB-1-worker-1",
    ], expected.starts
    return expected


MOMENTS = TARGETED + random_moments(random.Random(SEED), RANDOM_CASES, span=10.0)


@pytest.mark.parametrize("moment", MOMENTS, ids=[m.name for m in MOMENTS])
def test_the_server_killed_at_a_moment_of_the_job_changes_nothing(
    life: Life, moment: Moment
) -> None:
    if life.server.process is None:  # a failed case left it down
        life.server.start()
    run = run_case(life.server, life.starts, moment)
    problems = differences(life.expected, run)
    window = " (killed between flaky-0's end and its retry's start)" if in_retry_window(run) else ""
    assert not problems, f"job {run.job_id}{window}: " + "; ".join(problems)
