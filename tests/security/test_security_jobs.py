"""A job must never reach the host: a hostile ordinary user's jobs against a real server.

Each test is a reproducer of the security review, run as user `bob` (no admin rights) with a
plain busybox job on a real `paigraph serve` and real containers. The files a job aims at are
files under the test's own temporary directory; the server runs as the same user as the tests
(root on CI), as compose and the README's setup run it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.client.remote import Client
from tests.servers import Server, event_log, final_job, served
from tests.simulated import job_config
from tests.waiting import until

pytestmark = pytest.mark.docker

SECRET = "host-secret-4f1c: a line only the host may read"
ORIGINAL = "untouched by any job\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served("sqlite", tmp_path) as running:
        yield running


def ordinary_user(server: Server, name: str = "bob") -> Client:
    added = server.paigraph("users", "add", name)
    assert added.returncode == 0, added.stderr
    return server.client(added.stdout.strip())


def submit(client: Client, config: str) -> str:
    submitted = client.submit(config, {})
    assert submitted["errors"] == [], submitted["errors"]
    return submitted["job"]["id"]


def log_text(client: Client, job_id: str, role: str = "main", index: int = 0) -> str:
    return "".join(client.task_logs(job_id, role, index, follow=False))


def victim(tmp_path: Path, name: str, text: str = ORIGINAL) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_role(commands: list[str], **role: Any) -> dict[str, dict[str, Any]]:
    return {"main": {"commands": commands, **role}}


def test_a_job_cannot_make_the_server_read_a_host_file_as_its_log(
    server: Server, tmp_path: Path
) -> None:
    secret = victim(tmp_path, "secret.txt", SECRET + "\n")
    # the review's reproducer (the log beside the runtime files), and the same aimed at the
    # folder the job may write now
    commands = [
        "rm -f /usr/local/pai/output.log /usr/local/pai/run/output.log",
        f"ln -s {secret} /usr/local/pai/output.log || echo runtime folder is read-only",
        f"ln -s {secret} /usr/local/pai/run/output.log",
        "sleep 3",
    ]
    server.start()
    bob = ordinary_user(server)
    job_id = submit(bob, job_config(one_role(commands), name="read-host"))
    until(lambda: bob.job(job_id)["state"] == "RUNNING", "the job running", 60)
    until(lambda: "cannot be read" in log_text(bob, job_id), "the log refused", 30)
    while_running = log_text(bob, job_id)
    assert final_job(bob, job_id)["state"] == "SUCCEEDED"
    after = log_text(bob, job_id)
    for text in (while_running, after):
        assert SECRET not in text
        assert "output.log is not a regular file (a symbolic link)" in text or (
            "it is a symbolic link" in text
        )


def test_a_job_cannot_make_the_server_write_a_host_file(server: Server, tmp_path: Path) -> None:
    exit_target, log_target, script_target = (
        victim(tmp_path, name) for name in ("exit-target", "log-target", "script-target")
    )
    # The first run plants links where the server once wrote the exit record and where it
    # appends the retry marker; the second run (a task retry) links the entrypoint, which the
    # server writes again for every run.
    commands = [
        f"ln -sf {exit_target} /usr/local/pai/exit.json || echo cannot link exit.json",
        f"ln -sf {exit_target} /usr/local/pai/run/exit.json",
        f"rm -f /usr/local/pai/run/output.log; ln -s {log_target} /usr/local/pai/run/output.log",
        f"ln -sf {script_target} /usr/local/pai/entrypoint.sh || echo cannot link entrypoint",
        "exit 1",
    ]
    config = job_config(
        one_role(commands, taskRetryCount=1), name="write-host", extras={"gangAllocation": False}
    )
    server.start()
    bob = ordinary_user(server)
    job_id = submit(bob, config)
    found = final_job(bob, job_id, timeout=90)
    assert found["state"] == "FAILED"
    assert found["taskRoles"][0]["instances"][0]["taskAttempt"] == 2  # the retry did run
    for path in (exit_target, log_target, script_target):
        assert path.read_text() == ORIGINAL, f"{path.name} was written by the server"


def test_what_a_job_leaves_in_its_folders_never_stops_the_server(
    server: Server, tmp_path: Path
) -> None:
    commands = [
        "mkdir /usr/local/pai/exit.json || echo runtime folder is read-only",
        "mkdir /usr/local/pai/run/exit.json /usr/local/pai/run/relaunch.json",
        "rm -f /usr/local/pai/run/output.log; mkdir /usr/local/pai/run/output.log",
        "exit 0",
    ]
    server.start()
    bob = ordinary_user(server)
    job_id = submit(bob, job_config(one_role(commands), name="dirs"))
    assert final_job(bob, job_id)["state"] == "SUCCEEDED"
    assert "output.log is not a regular file (a directory)" in log_text(bob, job_id)

    server.stop()
    server.start()  # fails the test when the server cannot start again
    assert bob.job(job_id)["state"] == "SUCCEEDED"
    next_id = submit(bob, job_config(one_role(["echo still serving"]), name="after"))
    assert final_job(bob, next_id)["state"] == "SUCCEEDED"
    assert "still serving" in log_text(bob, next_id)


def storage_job(name: str, commands: list[str], uri: str | None = None) -> str:
    """A job whose role uses an `output` prerequisite named `results`: without `uri` a storage
    of the job's owner, with it a directory under the allowed roots."""
    results: dict[str, Any] = {"name": "results", "type": "output"}
    if uri is not None:
        results["uri"] = uri
    doc = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [
            {"name": "bb", "type": "dockerimage", "uri": "paigraph/busybox:test"},
            results,
        ],
        "taskRoles": {
            "main": {
                "instances": 1,
                "dockerImage": "bb",
                "output": "results",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                "commands": commands,
            }
        },
    }
    return json.dumps(doc)


def test_a_storage_no_admin_defined_belongs_to_one_user(server: Server) -> None:
    server.start()
    alice, bob = ordinary_user(server, "alice"), ordinary_user(server, "bob")
    written = submit(alice, storage_job("train", ["echo alice-weights > results/model.txt"]))
    assert final_job(alice, written)["state"] == "SUCCEEDED"

    prying = [
        "cat results/model.txt || echo nothing of alice here",
        "echo bob-was-here > results/model.txt",
    ]
    pried = submit(bob, storage_job("pry", prying))
    assert final_job(bob, pried)["state"] == "SUCCEEDED"
    bobs_log = log_text(bob, pried)
    assert "alice-weights" not in bobs_log and "nothing of alice here" in bobs_log

    read_back = submit(alice, storage_job("evaluate", ["cat results/model.txt"]))
    assert final_job(alice, read_back)["state"] == "SUCCEEDED"
    alices_log = log_text(alice, read_back)
    assert "alice-weights" in alices_log and "bob-was-here" not in alices_log


def test_directories_under_the_allowed_roots_are_only_read(server: Server, tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    (root / "imagenet").mkdir(parents=True)
    (root / "imagenet" / "labels.txt").write_text("cat\ndog\n")
    settings = tmp_path / "simulator.yaml"
    settings.write_text(f"allowed_file_roots: [{root}]\n")
    server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
    commands = [
        "cat results/labels.txt",
        "echo overwritten > results/labels.txt || echo the dataset is read-only",
        "rm -rf results/* || echo cannot remove",
    ]
    server.start()
    bob = ordinary_user(server)
    job_id = submit(bob, storage_job("reader", commands, uri=(root / "imagenet").as_uri()))
    assert final_job(bob, job_id)["state"] == "SUCCEEDED"
    text = log_text(bob, job_id)
    assert "dog" in text and "the dataset is read-only" in text
    assert (root / "imagenet" / "labels.txt").read_text() == "cat\ndog\n"


def test_a_log_printed_without_end_keeps_its_head_and_tail_only(
    server: Server, tmp_path: Path
) -> None:
    settings = tmp_path / "simulator.yaml"
    settings.write_text("log_limit_mb: 1\n")
    server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
    printing = [  # about 4 MB of numbered lines, then time for the server to trim it
        'i=0; while [ $i -lt 80000 ]; do echo "line $i of a job that never stops talking";'
        " i=$((i+1)); done",
        "sleep 3",
    ]
    server.start()
    bob = ordinary_user(server)
    job_id = submit(bob, job_config(one_role(printing), name="chatty"))
    assert final_job(bob, job_id, timeout=120)["state"] == "SUCCEEDED"
    text = log_text(bob, job_id)
    assert "line 0 of a job" in text and "line 79999 of a job" in text
    assert "bytes of output were dropped here" in text
    assert len(text) < 1_200_000
    tail = bob.subscribe(
        'subscription($id: ID!) { taskLogs(jobId: $id, taskRole: "main", index: 0, tail: 4)'
        " { data } }",
        {"id": job_id},
    )
    last_lines = "".join(chunk["taskLogs"]["data"] for chunk in tail)
    assert "line 79999 of a job" in last_lines and "dropped" not in last_lines
    logs = list(server.state_dir.glob("attempts/*/*/*/main-0/pai/run/output.log"))
    assert len(logs) == 1 and logs[0].stat().st_blocks * 512 < 1_500_000


def test_a_job_flipping_a_folder_to_a_host_link_never_gets_another_users_copy_to_read_it(
    server: Server, tmp_path: Path
) -> None:
    """The security review's race, as real jobs: bob may write under an allowed root through a
    storage the admin granted him, and keeps swapping a folder there between a real one and a
    symlink to a host folder while alice's jobs copy data from under it. None of alice's jobs
    may print the host file, and the shared download cache must never hold it."""
    root = tmp_path / "datasets"
    shared = root / "shared"
    (shared / "dir").mkdir(parents=True)
    (shared / "dir" / "data.txt").write_text("inside 0\n")
    host = tmp_path / "host"
    host.mkdir()
    (host / "data.txt").write_text(SECRET + "\n")
    settings = tmp_path / "simulator.yaml"
    settings.write_text(f"allowed_file_roots: [{root}]\n")
    server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
    server.start()
    bob, alice = ordinary_user(server, "bob"), ordinary_user(server, "alice")
    granted = server.paigraph("storages", "add", "shared", "--path", str(shared), "--user", "bob")
    assert granted.returncode == 0, granted.stderr

    flipping = [  # a fresh real folder (new files: a new cache key) and the link, in turn
        "cd /mnt/shared; i=0",
        "while true; do i=$((i+1));"
        ' mkdir fresh; echo "inside $i" > fresh/data.txt; rm -rf gone;'  # while dir is real
        f" mv dir gone; ln -s {host} dir;"  # the link, until
        " rm dir; mv fresh dir; done",  # a real folder again
    ]
    flipper = json.loads(job_config(one_role(flipping), name="flipper"))
    flipper["extras"] = {"storages": [{"name": "shared", "mountPath": "/mnt/shared"}]}
    flipper_id = submit(bob, json.dumps(flipper))
    until(lambda: bob.job(flipper_id)["state"] == "RUNNING", "the flipper running", 60)
    until(lambda: (shared / "gone").exists() or (shared / "dir").is_symlink(), "flips", 30)

    def reader(n: int, uri: str) -> str:
        doc = json.loads(job_config(one_role(["cat /work/ds/* /work/ds/*/* 2>/dev/null; true"])))
        doc["name"] = f"reader-{n}"
        doc["prerequisites"].append({"name": "ds", "type": "data", "uri": [uri]})
        doc["taskRoles"]["main"]["data"] = "ds"
        return json.dumps(doc)

    uris = [str(shared / "dir" / "data.txt"), (shared / "dir").as_uri()]
    read: list[str] = []
    refused: list[str] = []
    for batch in range(12):  # until both outcomes were seen, many rounds of the race
        ids = []
        for n in range(batch * 8, batch * 8 + 8):
            submitted = alice.submit(reader(n, uris[n % 2]), {})
            if submitted["errors"]:
                refused.append(json.dumps(submitted["errors"]))
            else:
                ids.append(submitted["job"]["id"])
        for job_id in ids:
            ended = final_job(alice, job_id, timeout=120)
            text = log_text(alice, job_id) if ended["state"] == "SUCCEEDED" else ""
            said = json.dumps(event_log(alice, job_id))
            assert SECRET not in text and SECRET not in said, (text, said)
            (read if "inside" in text else refused).append(text or said)
        if batch >= 5 and read and refused:
            break
    bob.stop(flipper_id)
    assert read and refused, (len(read), refused[:3])  # the race was run both ways
    cache = server.state_dir / "cache"
    leaked = [p for p in cache.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(SECRET not in p.read_text(errors="replace") for p in leaked)
