"""End to end: real `paigraph serve` processes on the Docker backend, driven by the `paigraph`
command and by GraphQL over HTTP and websockets, killed with SIGKILL and started again.

Each server gets its own database (a SQLite file, or a fresh PostgreSQL database when
PAIGRAPH_TEST_PG is set) and its own simulator state directory, so its containers carry an
owner label no other server shares, and what it leaves behind can be counted.
"""

from __future__ import annotations

import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import docker
import pytest

from backends.docker_specs import JOB as JOB_LABEL
from server.api.ids import parse_global_id
from server.client.remote import Client
from tests.servers import (
    FINAL,
    FOLLOW,
    Server,
    containers,
    event_log,
    final_job,
    instances,
    job,
    nothing_left,
    served,
)
from tests.simulated import job_config
from tests.store_support import KINDS
from tests.waiting import until

pytestmark = pytest.mark.docker


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


# --- jobs and what the API says about them ----------------------------------------------------


PS_WORKER = job_config(
    name="psw",
    roles={
        "ps": {"commands": ["sleep 2"], "completion": {"minSucceededInstances": -1}},
        "worker": {
            "instances": 2,
            "commands": ["echo worker $PAI_TASK_INDEX sees $PAI_TASK_ROLE_ps_HOST_LIST"],
        },
    },
)

# Every instance ends on its own before the job is decided, whether the server watches or not:
# the checker fails first (it cannot fail the job), the ps succeeds (it cannot decide either),
# and the second worker's success ends the job SUCCEEDED.
RESTARTED = job_config(
    name="restarted",
    roles={
        "ps": {"commands": ["sleep 3"], "completion": {"minSucceededInstances": -1}},
        "checker": {"commands": ["sleep 2", "exit 3"], "completion": {"minFailedInstances": -1}},
        "worker": {"instances": 2, "commands": ["sleep 6", "echo worker $PAI_TASK_INDEX done"]},
    },
)
RESTARTED_ENDS = {
    "ps-0": ("SUCCEEDED", 0),
    "checker-0": ("FAILED", 3),
    "worker-0": ("SUCCEEDED", 0),
    "worker-1": ("SUCCEEDED", 0),
}

# --- the command line against a server --------------------------------------------------------


def test_the_command_line_drives_jobs_on_a_server(kind: str, tmp_path: Path) -> None:
    long_job = tmp_path / "long.yaml"
    long_job.write_text(job_config(name="long", roles={"main": {"commands": ["sleep 120"]}}))
    failing = tmp_path / "failing.yaml"
    failing.write_text(
        job_config(
            name="failing",
            roles={
                "ps": {"commands": ["sleep 60"], "completion": {"minSucceededInstances": -1}},
                "worker": {"commands": ["echo about to fail", "exit 3"]},
            },
        )
    )
    with served(kind, tmp_path) as server:
        tokens = {}
        for name in ("ann", "bob"):
            added = server.paigraph("users", "add", name)
            assert added.returncode == 0, added.stderr
            tokens[name] = added.stdout.strip()
            assert tokens[name] and "\n" not in tokens[name]  # the token alone
        ann = tokens["ann"]
        server.start()

        submitted = server.paigraph("submit", str(long_job), token=ann)
        assert submitted.returncode == 0, submitted.stderr
        long_id = submitted.stdout.strip()
        failing_watch = server.start_paigraph("submit", str(failing), "--watch", token=ann)
        try:
            _use_the_command_line(server, tokens, long_id, failing_watch)
        finally:
            if failing_watch.poll() is None:
                failing_watch.kill()
                failing_watch.wait(timeout=10)
        nothing_left(server.owner)


def _use_the_command_line(
    server: Server, tokens: dict[str, str], long_id: str, failing_watch: subprocess.Popen[str]
) -> None:
    ann = tokens["ann"]
    ps_worker = server.state_dir.parent / "ps_worker.yaml"
    ps_worker.write_text(PS_WORKER)

    watched = server.paigraph("submit", str(ps_worker), "--watch", token=ann)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "SUCCEEDED" in watched.stdout
    psw_id = watched.stdout.split()[0]

    by_id = server.paigraph("status", psw_id, token=ann)
    by_name = server.paigraph("status", "psw", token=ann)
    for shown in (by_id, by_name):
        assert shown.returncode == 0, shown.stderr
        title = shown.stdout.splitlines()[0]
        assert title.startswith(f"job psw ({psw_id})") and "SUCCEEDED" in title
        for row in ("ps-0", "worker-0", "worker-1"):
            assert row in shown.stdout

    ps = instances(job(server.client(ann), psw_id))["ps-0"]
    ps_http = next(p["ports"][0] for p in ps["ports"] if p["label"] == "http")
    logs = server.paigraph("logs", "psw", "worker", "1", token=ann)
    assert logs.returncode == 0, logs.stderr
    assert f"worker 1 sees {ps['hostIp']}:{ps_http}\n" in logs.stdout

    until(lambda: job(server.client(ann), long_id)["state"] == "RUNNING", "long running")
    refused = server.paigraph("stop", long_id, token=tokens["bob"])
    assert refused.returncode == 1
    assert "belongs to ann; only its owner or an admin may stop it" in refused.stderr
    anonymous = server.paigraph("status", long_id)
    assert anonymous.returncode == 1
    assert "wants a token: give it with --token or PAIGRAPH_TOKEN" in anonymous.stderr
    assert "Traceback" not in anonymous.stderr
    assert job(server.client(ann), long_id)["state"] == "RUNNING"

    stopped = server.paigraph("stop", "long", token=ann)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopping long ({long_id})" in stopped.stdout
    assert final_job(server.client(ann), long_id)["state"] == "STOPPED"
    assert "STOPPED" in server.paigraph("status", "long", token=ann).stdout

    failed_output, _ = failing_watch.communicate(timeout=90)
    assert failing_watch.returncode == 1, failed_output
    assert "FAILED" in failed_output
    failed_id = failed_output.split()[0]
    found = job(server.client(ann), failed_id)
    assert found["state"] == "FAILED"
    assert instances(found)["worker-0"]["exitCode"] == 3


# --- killed with SIGKILL and started again ----------------------------------------------------


def _submit_and_wait_running(
    client: Client, config: str = RESTARTED
) -> tuple[str, list[dict[str, Any]]]:
    """Submit the job; once every instance has started, its id and its event log so far."""
    answer = client.execute(
        "mutation($config: String!) { submitJob(input: {config: $config}) {"
        " job { id } errors { message } } }",
        {"config": config},
    )["submitJob"]
    assert answer["errors"] == [], answer["errors"]
    job_id = answer["job"]["id"]

    def all_started() -> bool:
        found = job(client, job_id)
        assert found["state"] not in FINAL, found
        return all(i["startedAt"] for i in instances(found).values())

    until(all_started, "every instance of the job running", timeout=30, every=0.1)
    return job_id, event_log(client, job_id)


def _check_the_restarted_job(
    client: Client, job_id: str, before: list[dict[str, Any]], started: dict[str, str]
) -> None:
    """The job ended as it would have without the restart, with one gapless event log that a
    subscriber resuming from its last cursor receives in full."""
    followed = [
        data["jobEvents"]
        for data in client.subscribe(FOLLOW, {"id": job_id, "after": before[-1]["cursor"]})
    ]
    found = final_job(client, job_id, timeout=30)
    assert (found["state"], found["attempt"], found["retries"]) == ("SUCCEEDED", 1, 0), found
    ended = instances(found)
    assert {n: (i["state"], i["exitCode"]) for n, i in ended.items()} == RESTARTED_ENDS
    assert all(i["attempt"] == 1 and i["taskAttempt"] == 1 for i in ended.values())
    # the same containers throughout: nothing was started again
    assert {n: i["startedAt"] for n, i in ended.items()} == started

    log = event_log(client, job_id)
    assert [e["sequence"] for e in log] == list(range(1, len(log) + 1))
    assert log == before + followed  # the subscriber missed nothing and got nothing twice
    job_states = [e["state"] for e in log if e["type"] == "JOB_STATE"]
    assert job_states[-1] == "SUCCEEDED" and job_states.count("SUCCEEDED") == 1
    instance_ends = sorted(
        f"{e['taskRole']}-{e['index']}"
        for e in log
        if e["type"] == "INSTANCE_STATE" and e["state"] in FINAL
    )
    assert instance_ends == sorted(RESTARTED_ENDS)  # each instance ended exactly once

    output = "".join(client.task_logs(job_id, "worker", 1, follow=False))
    assert "worker 1 done" in output


def _started(client: Client, job_id: str) -> dict[str, str]:
    return {n: i["startedAt"] for n, i in instances(job(client, job_id)).items()}


def test_without_a_restart_the_job_ends_as_the_restarted_ones_must(tmp_path: Path) -> None:
    """The reference run: what the restart tests expect is what an undisturbed run gives."""
    with served("sqlite", tmp_path) as server:
        server.start()
        client = server.client()
        job_id, before = _submit_and_wait_running(client)
        _check_the_restarted_job(client, job_id, before, _started(client, job_id))
        nothing_left(server.owner)


def test_instances_that_end_while_the_server_is_killed_are_recorded_after_it_restarts(
    kind: str, tmp_path: Path
) -> None:
    with served(kind, tmp_path) as server:
        server.start()
        client = server.client()  # the local admin: a loopback server without users
        job_id, before = _submit_and_wait_running(client)
        started = _started(client, job_id)
        server.kill()

        until(
            lambda: (
                len(containers(server.owner, "exited")) == 4
                and not containers(server.owner, "running")
            ),
            "every instance ending while the server is down",
            timeout=30,
        )
        server.start()
        _check_the_restarted_job(client, job_id, before, started)
        nothing_left(server.owner)


@pytest.mark.alone  # its workers' `sleep 6` must outlive a server's restart
def test_instances_still_running_when_the_server_comes_back_are_adopted(
    kind: str, tmp_path: Path
) -> None:
    with served(kind, tmp_path) as server:
        server.start()
        client = server.client()
        job_id, before = _submit_and_wait_running(client)
        started = _started(client, job_id)
        server.kill()
        server.start()
        # the workers outlive the restart: the new server takes them over as they run
        running = containers(server.owner, "running")
        assert len([n for n in running if "-worker-" in n]) == 2, running
        _check_the_restarted_job(client, job_id, before, started)
        nothing_left(server.owner)


def test_servers_on_separate_state_directories_leave_each_others_containers_alone(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        first = stack.enter_context(served("sqlite", tmp_path, "first"))
        second = stack.enter_context(served("sqlite", tmp_path, "second"))
        assert first.owner != second.owner
        first.start()
        client = first.client()
        sleepers = job_config(
            name="sleepers", roles={"main": {"instances": 2, "commands": ["sleep 120"]}}
        )
        job_id, _ = _submit_and_wait_running(client, sleepers)
        of_job = {"label": f"{JOB_LABEL}={parse_global_id(job_id)[1]}", "status": "running"}
        api = docker.from_env().api
        mine = sorted(c["Id"] for c in api.containers(filters=of_job))
        assert len(mine) == 2
        second.start()  # takes back what its own state directory records, nothing else
        assert sorted(c["Id"] for c in api.containers(filters=of_job)) == mine
        found = job(client, job_id)
        assert (found["state"], found["attempt"]) == ("RUNNING", 1)


def test_websockets_are_served_uncompressed(tmp_path: Path) -> None:
    """A client offering per-message deflate (websockets does by default) gets plain frames:
    messages here are small JSON, and compressing each cost more than the rest of delivering
    it to a thousand subscribers."""
    from websockets.sync.client import connect

    with served("sqlite", tmp_path) as server:
        server.start()
        url = server.url.replace("http://", "ws://") + "/graphql"
        with connect(url, subprotocols=["graphql-transport-ws"]) as ws:
            assert "Sec-WebSocket-Extensions" not in ws.response.headers
            ws.send('{"type": "connection_init", "payload": {}}')
            assert '"connection_ack"' in str(ws.recv(timeout=10))


# --- stopping the server, and stopping every job ----------------------------------------------

SLEEPERS = job_config(
    name="sleepers", roles={"sleeper": {"instances": 2, "commands": ["sleep 600"]}}
)


def _running(server: Server, token: str) -> str:
    """Submit SLEEPERS as the token's user; its id once both instances run."""
    job_file = server.state_dir.parent / "sleepers.json"
    job_file.write_text(SLEEPERS)
    submitted = server.paigraph("submit", str(job_file), token=token)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    client = server.client(token)
    until(
        lambda: [i["state"] for i in instances(job(client, job_id)).values()] == ["RUNNING"] * 2,
        f"job {job_id} running",
    )
    return job_id


def test_stopping_the_server_says_what_keeps_running_and_stop_all_stops_it(
    tmp_path: Path,
) -> None:
    with served("sqlite", tmp_path) as server:
        tokens = server.ann_bob_and_root()
        server.start()
        ann_job = _running(server, tokens["ann"])
        bob_job = _running(server, tokens["bob"])

        server.stop()  # as Ctrl-C does: uvicorn shuts down, the containers run on
        assert (
            "paigraph stopped; 2 jobs (4 instances) keep running in their containers."
            in server.output()
        ), server.output()
        assert "paigraph stop --all" in server.output()
        assert len(containers(server.owner, "running")) == 4

        server.start()  # adopts them
        by_bob = server.paigraph("stop", "--all", token=tokens["bob"])
        assert by_bob.returncode == 0, by_bob.stderr
        assert f"stopping sleepers ({bob_job})" in by_bob.stdout
        assert "1 of 1 running job (yours) stopping" in by_bob.stdout
        assert final_job(server.client(tokens["root"]), bob_job)["state"] == "STOPPED"
        assert job(server.client(tokens["root"]), ann_job)["state"] == "RUNNING"

        by_root = server.paigraph("stop", "--all", token=tokens["root"])
        assert by_root.returncode == 0, by_root.stderr
        assert f"stopping sleepers ({ann_job})" in by_root.stdout
        assert "1 of 1 running job (anyone's) stopping" in by_root.stdout
        assert final_job(server.client(tokens["root"]), ann_job)["state"] == "STOPPED"
        again = server.paigraph("stop", "--all", token=tokens["root"])
        assert again.stdout.strip() == "no running job to stop (anyone's)"
        both = server.paigraph("stop", "sleepers", "--all", token=tokens["root"])
        assert both.returncode == 2 and "name one job, or give --all" in both.stderr

        server.stop()
        last_run = server.output().rsplit("Started server process", 1)[1]
        assert "paigraph stopped; no job was running." in last_run, last_run
        nothing_left(server.owner)
