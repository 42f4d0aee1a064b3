"""The database going away under a running `paigraph serve`: PostgreSQL restarted while a job
runs and a subscriber listens, and a SQLite file whose disk is full. The server
reconnects or waits, the job ends as it would have, the event log has no gap and no duplicate,
a subscriber sees every event exactly once, and a client is told plainly what is wrong."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from server.client.remote import Client, RemoteError
from tests.private_postgres import private_postgres
from tests.servers import Server, event_log, final_job, job, job_containers
from tests.simulated import job_config, remove_leftovers
from tests.waiting import until

pytestmark = pytest.mark.docker


def ps_worker(name: str = "through-a-fault") -> str:
    """A parameter server and two workers that end a few seconds after they start."""
    return job_config(
        {
            "ps": {"commands": ["sleep 8"], "completion": {"minSucceededInstances": -1}},
            "worker": {"instances": 2, "commands": ["sleep 6", "echo worker $PAI_TASK_INDEX ok"]},
        },
        name=name,
    )


class Subscriber(threading.Thread):
    """Follows a job's events from its first over the websocket, as a web page does."""

    def __init__(self, server: Server, token: str, job_id: str) -> None:
        super().__init__(daemon=True)
        self.client, self.job_id = server.client(token), job_id
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for event in self.client.job_events(self.job_id):
                self.events.append(event)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_a_postgresql_restart_while_a_job_runs_loses_no_event(tmp_path: Path) -> None:
    with private_postgres() as pg:
        server = Server(pg.url, tmp_path / "state", tmp_path / "serve.log")
        try:
            added = server.paigraph("users", "add", "ann")
            assert added.returncode == 0, added.stderr
            token = added.stdout.strip()
            server.start()
            client = server.client(token)
            submitted = client.submit(ps_worker(), {})
            assert submitted["errors"] == [], submitted
            job_id = submitted["job"]["id"]
            subscriber = Subscriber(server, token, job_id)
            subscriber.start()
            until(lambda: job(client, job_id)["state"] == "RUNNING", "the job running", 60)

            pg.stop()  # every connection of the server is cut; the instances go on meanwhile
            until(  # the workers end, then the parameter server: all while it is down
                lambda: not job_containers(job_id, "running"),
                "the job's instances ending while PostgreSQL is down",
                60,
            )
            pg.start()

            found = final_job(client, job_id, timeout=120)
            assert found["state"] == "SUCCEEDED", (found, server.output())
            subscriber.join(timeout=60)
            assert not subscriber.is_alive(), "the subscription did not end with the job"
            assert subscriber.error is None, (subscriber.error, server.output())

            stored = event_log(client, job_id)
            sequences = [e["sequence"] for e in stored]
            assert sequences == list(range(1, len(sequences) + 1)), sequences  # no gap, no twin
            heard = [e["sequence"] for e in subscriber.events]
            assert heard == sequences, (heard, sequences)  # each exactly once, in order
            assert subscriber.events[-1]["state"] == "SUCCEEDED"
            assert server.process is not None and server.process.poll() is None
        finally:
            server.stop()
            remove_leftovers(server.owner)
            if server.process is None and "Traceback" in server.output():
                print(server.output(), pg.log())


@contextmanager
def small_disk(where: Path, size: str = "8M") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the test (skipped where mounting is not
    allowed)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """A file that takes every byte left on `disk`."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for block in (65536, 512, 1):  # ENOSPC at each size: then the disk is full, as wanted
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * block)
    return filler


def refused_submission(client: Client, accepted: list[str]) -> str:
    """Submit until the server refuses (SQLite may still have room in its journal for a few);
    the refusal's message. Jobs accepted meanwhile are added to `accepted`."""
    for n in range(30):
        try:
            submitted = client.submit(ps_worker(f"while-it-cannot-write-{n}"), {})
        except RemoteError as exc:
            return str(exc)
        assert submitted["job"] is not None, submitted
        accepted.append(submitted["job"]["id"])
    raise AssertionError("30 submissions were accepted on a database that cannot write")


def test_a_sqlite_database_on_a_full_disk_says_so_and_recovers(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        server = Server(f"sqlite:///{disk / 'paigraph.db'}", tmp_path / "state", tmp_path / "log")
        try:
            added = server.paigraph("users", "add", "ann")
            assert added.returncode == 0, added.stderr
            client = server.client(added.stdout.strip())
            server.start()
            running = client.submit(ps_worker(), {})["job"]["id"]
            until(lambda: job(client, running)["state"] == "RUNNING", "the job running", 60)

            filler = fill(disk)
            accepted = [running]
            refusal = refused_submission(client, accepted)
            assert refusal == "the database cannot be used right now; try again shortly"
            assert job(client, running)["state"] == "RUNNING"  # reads still work
            until(  # the job's instances end while nothing can be written
                lambda: not job_containers(running, "running"),
                "the job's instances ending while the disk is full",
                60,
            )

            filler.unlink()
            for job_id in accepted:
                found = final_job(client, job_id, timeout=120)
                assert found["state"] == "SUCCEEDED", (found, server.output())
                sequences = [e["sequence"] for e in event_log(client, job_id)]
                assert sequences == list(range(1, len(sequences) + 1)), sequences
            again = client.submit(ps_worker("after-the-fault"), {})
            assert again["errors"] == [] and again["job"] is not None
            assert "Traceback" not in server.output()
        finally:
            server.stop()
            remove_leftovers(server.owner)
