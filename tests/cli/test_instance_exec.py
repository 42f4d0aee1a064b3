"""`paigraph exec` and `paigraph shell` against running instances on the Docker simulator,
through a real `paigraph serve`: output, stdin and exit codes pass through, the job's owner
and admins may, other users are refused, a shell gets a terminal (its size follows the local
one, Ctrl-C reaches the instance), and an instance held by a `taskFails` debug hook can be
entered after its command failed."""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack

import httpx
import pexpect
import pytest
from websockets.sync.client import connect

from server.api.jobs.exec_socket import MAX_SESSIONS_PER_USER
from server.app import exec_frames as frames
from tests.servers import ROOT, Server, instances, job, served
from tests.simulated import IMAGE
from tests.waiting import until

pytestmark = pytest.mark.docker

# `main` runs; `broken` fails, and its debug hook (seed 004's) keeps the container alive; the
# tensorboard plugin gets `main` (the first role) a port labelled tensorboard
JOB = {
    "protocolVersion": 2,
    "name": "debuggable",
    "type": "job",
    "prerequisites": [
        {"name": "bb", "type": "dockerimage", "uri": IMAGE},
        {
            "name": "debug_hook",
            "type": "script",
            "plugin": "com.microsoft.pai.runtimeplugin.cmd",
            "callbacks": [
                {
                    "event": "taskFails",
                    "commands": ["echo will sleep for debugging", "sleep 300"],
                }
            ],
        },
    ],
    "taskRoles": {
        "main": {
            "instances": 1,
            "dockerImage": "bb",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
            "commands": ["sleep 300"],
        },
        "broken": {
            "instances": 1,
            "dockerImage": "bb",
            "prerequisites": ["debug_hook"],
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
            "commands": ["echo the command fails", "exit 3"],
        },
    },
    "extras": {
        "com.microsoft.pai.runtimeplugin": [
            {"plugin": "ssh", "parameters": {"jobssh": True}},
            {"plugin": "tensorboard", "parameters": {"port": 6006, "logdir": {"a": "/tmp"}}},
        ]
    },
}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory):
    """A server, three users (ann owns the job, bob does not, root is an admin) and ann's
    job with both instances running."""
    tmp_path = tmp_path_factory.mktemp("exec")
    with served("sqlite", tmp_path) as server:
        tokens = server.ann_bob_and_root()
        server.start()
        config = tmp_path / "job.json"
        config.write_text(json.dumps(JOB))
        submitted = server.paigraph("submit", str(config), token=tokens["ann"])
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        client = server.client(tokens["ann"])
        until(
            lambda: all(i["state"] == "RUNNING" for i in instances(job(client, job_id)).values()),
            "both instances running",
        )
        yield server, tokens, job_id
        server.paigraph("stop", job_id, token=tokens["ann"])


def _exec(server: Server, token: str, *args: str, stdin: str = "") -> tuple[int, str, str]:
    done = server.paigraph("exec", *args, token=token, stdin=stdin)
    return done.returncode, done.stdout, done.stderr


def test_the_owner_runs_a_command_and_gets_its_output_and_exit_code(running) -> None:
    server, tokens, job_id = running
    code, out, err = _exec(
        server,
        tokens["ann"],
        "debuggable", "main", "0", "--",
        "sh", "-c", "echo to stdout; echo to stderr >&2; echo $PAI_TASK_ROLE_NAME; exit 7",
    )  # fmt: skip
    assert (code, out, err) == (7, "to stdout\nmain\n", "to stderr\n")

    # stdin passes through, and its end reaches the command
    code, out, _ = _exec(
        server, tokens["ann"], job_id, "main", "0", "--", "wc", "-l", stdin="a\nb\nc\n"
    )
    assert (code, out.strip()) == (0, "3")

    # an admin may too
    code, out, _ = _exec(server, tokens["root"], job_id, "main", "0", "--", "hostname")
    assert code == 0 and out.strip()


def test_another_user_is_refused(running) -> None:
    server, tokens, job_id = running
    code, out, err = _exec(server, tokens["bob"], job_id, "main", "0", "--", "true")
    assert code == 255 and out == ""
    assert "belongs to ann" in err and "only its owner or an admin" in err

    # without a token, the server asks for one
    done = server.paigraph("exec", job_id, "main", "0", "--", "true", stdin="")
    assert done.returncode == 255 and "wants a token" in done.stderr


def test_the_websocket_refuses_with_a_code_and_a_reason(running) -> None:
    server, tokens, job_id = running
    url = server.url.replace("http", "ws", 1) + frames.PATH
    start = {"type": "start", "job": job_id, "role": "main", "index": 0, "command": ["true"]}
    cases = [
        (tokens["bob"], start, "forbidden", 4403),
        ("wrong", start, "unauthorized", 4401),
        (tokens["ann"], {**start, "index": 5}, "not-found", 4404),
        (tokens["ann"], {**start, "command": []}, "bad-request", 4400),
    ]
    for token, message, code, close in cases:
        with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            ws.send(json.dumps(message))
            reply = json.loads(ws.recv(timeout=30))
            assert (reply["type"], reply["code"]) == ("error", code), reply
            with pytest.raises(Exception):  # noqa: B017 - the close follows
                ws.recv(timeout=30)
            assert ws.close_code == close


def test_wrong_instances_are_named(running) -> None:
    server, tokens, job_id = running
    code, _, err = _exec(server, tokens["ann"], job_id, "nosuch", "0", "--", "true")
    assert code == 255 and "no task role 'nosuch'" in err and "main" in err
    code, _, err = _exec(server, tokens["ann"], job_id, "main", "3", "--", "true")
    assert code == 255 and "indexes 0 to 0" in err


def test_an_instance_held_by_a_debug_hook_is_reachable_after_its_command_failed(
    running,
) -> None:
    server, tokens, job_id = running

    def hook_holds() -> bool:
        shown = server.paigraph("logs", job_id, "broken", "0", token=tokens["ann"])
        return "will sleep for debugging" in shown.stdout

    until(hook_holds, "the debug hook running after the command failed")
    code, out, _ = _exec(
        server, tokens["ann"], job_id, "broken", "0", "--", "sh", "-c", "echo inside; ps"
    )
    assert code == 0 and out.startswith("inside\n") and "sleep 300" in out


def test_a_shell_has_a_terminal_that_follows_resizes_and_takes_ctrl_c(running) -> None:
    server, tokens, job_id = running
    shell = pexpect.spawn(
        sys.executable,
        ["-m", "server.cli", "shell", job_id, "main", "0"],
        env=server.env(PAIGRAPH_TOKEN=tokens["ann"], TERM="xterm"),
        cwd=str(ROOT),
        dimensions=(40, 120),
        encoding="utf-8",
        timeout=30,
    )
    try:
        # busybox's shell asks the terminal where its cursor is; a terminal answers
        shell.expect(r"\x1b\[6n")
        shell.send("\x1b[1;1R")
        shell.sendline("echo answer=$((6*7)) in $(pwd); tty")
        shell.expect(r"answer=42 in /work")
        shell.expect(r"/dev/pts/\d+")
        shell.sendline("stty size")
        shell.expect(r"40 120")

        shell.setwinsize(30, 100)  # SIGWINCH: the new size is sent
        shell.sendline("stty size")
        shell.expect(r"30 100")

        shell.sendline("sleep 200; echo not interrupted")
        shell.expect("not interrupted\r\n")  # the line, as the terminal echoes it
        time.sleep(1)  # the sleep runs
        shell.sendcontrol("c")  # reaches the sleep, not the local client
        shell.sendline("echo back=$((1+1))")
        shell.expect(r"back=2")
        assert "not interrupted" not in shell.before

        shell.sendline("exit 5")
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
    assert shell.exitstatus == 5


def test_the_tensorboard_port_is_shown_on_the_job_and_published(running) -> None:
    server, tokens, job_id = running
    found = instances(job(server.client(tokens["ann"]), job_id))
    ports = {p["label"]: p["ports"] for p in found["main-0"]["ports"]}
    assert set(ports) == {"ssh", "http", "tensorboard"}
    assert "tensorboard" not in {p["label"] for p in found["broken-0"]["ports"]}
    (port,) = ports["tensorboard"]

    # a server started on it inside the instance answers on the host's port
    serve = (
        "echo board > /tmp/index.html; "
        "httpd -p $PAI_CONTAINER_HOST_tensorboard_PORT_LIST -h /tmp; "
        "echo $PAI_CONTAINER_HOST_tensorboard_PORT_LIST"
    )
    code, out, _ = _exec(server, tokens["ann"], job_id, "main", "0", "--", "sh", "-c", serve)
    assert (code, out.strip()) == (0, str(port))
    answer = until(
        lambda: _get(f"http://127.0.0.1:{port}/index.html"), "the board answering", timeout=10
    )
    assert answer == "board\n"


def _get(url: str) -> str | None:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.TransportError:
        return None


def test_long_sessions_do_not_hold_up_the_server(running) -> None:
    """Sixteen commands that run for a while, at once: each starts at once, and the API answers
    at once (a session reads and writes on threads of its own, not on the pool the store uses,
    where blocked reads would make every query wait for a command to end). Sixteen is the most
    one user may have open: a seventeenth is refused, another user's is not."""
    server, tokens, job_id = running
    url = server.url.replace("http", "ws", 1) + frames.PATH
    start = {"type": "start", "job": job_id, "role": "main", "index": 0, "command": ["sleep", "40"]}

    def session(token: str) -> dict:
        ws = stack.enter_context(
            connect(url, additional_headers={"Authorization": f"Bearer {token}"})
        )
        ws.send(json.dumps(start))
        return json.loads(ws.recv(timeout=60))

    with ExitStack() as stack:
        began = time.monotonic()
        for _ in range(MAX_SESSIONS_PER_USER):
            assert session(tokens["ann"])["type"] == "started"
        assert time.monotonic() - began < 30
        asked = time.monotonic()
        assert job(server.client(tokens["ann"]), job_id)["state"] == "RUNNING"
        assert time.monotonic() - asked < 5

        refused = session(tokens["ann"])
        assert refused["code"] == "too-many-sessions" and "limit 16" in refused["message"]
        assert session(tokens["root"])["type"] == "started"


def test_a_session_ends_at_once_when_its_token_is_revoked(running) -> None:
    server, _, job_id = running
    added = server.paigraph("users", "add", "eve", "--admin")
    assert added.returncode == 0, added.stderr
    session = server.start_paigraph(
        "exec", job_id, "main", "0", "--", "sh", "-c", "echo started; sleep 300",
        token=added.stdout.strip(),
    )  # fmt: skip
    try:
        assert session.stdout is not None
        assert session.stdout.readline() == "started\n"
        renewed = server.paigraph("users", "token", "eve")
        assert renewed.returncode == 0, renewed.stderr
        said, _ = session.communicate(timeout=60)  # ended by the server, not by sleep 300
    finally:
        session.kill()
    assert session.returncode != 0
    assert "revoked" in said, said
