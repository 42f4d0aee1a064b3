"""Who reads which jobs, under both values of the server's `job_visibility` setting, against a
real `paigraph serve` and a real running job: ann owns it, bob is another user, root an admin.

`all` (the default, OpenPAI's rule): everyone reads it, secrets masked. `own`: bob meets it
nowhere, exactly as a job that does not exist (job by ID and by name, node, the jobs list, the
jobEvents and taskLogs subscriptions, exec); ann and root read it as before. The same server is
restarted on the same database with the other setting; the job keeps running meanwhile."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.client.exec_client import ExecClient
from server.client.remote import Client, RemoteError
from tests.servers import Server, instances, job, served
from tests.waiting import until

pytestmark = pytest.mark.docker

JOB = {
    "protocolVersion": 2,
    "name": "private_work",
    "type": "job",
    "secrets": {"token": "tok-Sekr3t"},
    "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": "paigraph/busybox:test"}],
    "taskRoles": {
        "main": {
            "dockerImage": "bb",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
            "commands": ["echo working for ann", "sleep 600"],
        }
    },
}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    tmp_path = tmp_path_factory.mktemp("visibility")
    with served("sqlite", tmp_path) as server:
        tokens = server.ann_bob_and_root()
        server.start()
        config = tmp_path / "job.json"
        config.write_text(json.dumps(JOB))
        submitted = server.paigraph("submit", str(config), token=tokens["ann"])
        assert submitted.returncode == 0, submitted.stderr
        tokens["job"] = submitted.stdout.strip()
        until(
            lambda: all(
                i["state"] == "RUNNING"
                for i in instances(job(server.client(tokens["ann"]), tokens["job"])).values()
            ),
            "the job running",
        )
        yield server, tokens
        server.paigraph("stop", tokens["job"], token=tokens["ann"])


def restarted(server: Server, visibility: str | None) -> None:
    server.stop()
    server.settings.pop("PAIGRAPH_JOB_VISIBILITY", None)
    if visibility is not None:
        server.settings["PAIGRAPH_JOB_VISIBILITY"] = visibility
    server.start()


def what_is_read(server: Server, token: str, job_id: str) -> dict[str, bool]:
    """Each way of reading the job: whether it showed the job to the user with `token`."""
    client = Client(server.url, token)
    one = client.execute("query($id: ID!) { job(id: $id) { id config } }", {"id": job_id})
    if one["job"] is not None:
        assert "tok-Sekr3t" not in one["job"]["config"]  # secrets masked for everyone
    named = client.execute('query { job(name: "ann~private_work") { id } }')
    node = client.execute("query($id: ID!) { node(id: $id) { id } }", {"id": job_id})
    listed = client.execute("{ jobs(first: 100) { edges { node { id } } } }")
    read = {
        "job": one["job"] is not None,
        "job by name": named["job"] is not None,
        "node": node["node"] is not None,
        "jobs": job_id in {e["node"]["id"] for e in listed["jobs"]["edges"]},
    }
    try:
        read["jobEvents"] = next(client.job_events(job_id), None) is not None
    except RemoteError as exc:
        assert "no job" in str(exc), exc
        read["jobEvents"] = False
    try:
        read["taskLogs"] = "working for ann" in "".join(
            client.task_logs(job_id, "main", 0, follow=False)
        )
    except RemoteError as exc:
        assert "no job" in str(exc), exc
        read["taskLogs"] = False
    return read


EVERY_WAY = {"job", "job by name", "node", "jobs", "jobEvents", "taskLogs"}


def exec_answer(server: Server, token: str, job_id: str) -> tuple[int, str]:
    """`echo inside` run in the job's instance through /exec itself (the command line would
    look the job up first): its exit code and output, or 255 and the server's refusal."""
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out:
        try:
            code = ExecClient(Client(server.url, token)).run(
                job_id,
                "main",
                0,
                ["echo", "inside"],
                tty_mode=False,
                stdin=stdin,
                stdout=out,
                stderr=out,
            )
        except RemoteError as exc:
            return 255, str(exc)
        out.seek(0)
        return code, out.read().decode()


def test_by_default_every_user_reads_every_job_with_secrets_masked(running) -> None:
    server, tokens = running
    restarted(server, None)
    for user in ("ann", "bob", "root"):
        assert what_is_read(server, tokens[user], tokens["job"]) == dict.fromkeys(
            EVERY_WAY, True
        ), user
    # running commands inside is the owner's or an admin's whatever the setting
    code, said = exec_answer(server, tokens["bob"], tokens["job"])
    assert code == 255 and "belongs to ann" in said
    assert exec_answer(server, tokens["root"], tokens["job"]) == (0, "inside\n")


def test_with_own_a_user_reads_only_their_own_jobs_and_an_admin_every_job(running) -> None:
    server, tokens = running
    restarted(server, "own")
    try:
        assert what_is_read(server, tokens["bob"], tokens["job"]) == dict.fromkeys(EVERY_WAY, False)
        code, said = exec_answer(server, tokens["bob"], tokens["job"])
        assert code == 255 and "no job has id" in said and "ann" not in said
        for user in ("ann", "root"):
            assert what_is_read(server, tokens[user], tokens["job"]) == dict.fromkeys(
                EVERY_WAY, True
            ), user
        assert exec_answer(server, tokens["ann"], tokens["job"]) == (0, "inside\n")
    finally:
        restarted(server, None)


def test_a_wrong_value_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with served("sqlite", tmp_path) as server:
        server.settings["PAIGRAPH_JOB_VISIBILITY"] = "friends"
        done = server.paigraph("serve", "--port", str(server.port))
        assert done.returncode == 2
        assert "PAIGRAPH_JOB_VISIBILITY (or --job-visibility) must be one of all, own" in (
            done.stderr.replace("\n", " ")
        )
