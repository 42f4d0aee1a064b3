"""A job submitted with fields that have no effect keeps its warnings: `paigraph submit` says
them, and the job shows them (GraphQL `Job.warnings`, `paigraph status`), after a restart too.
A real `paigraph serve` on the Docker backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import Api, browser_page, chromium, need_browser_and_build
from tests.servers import final_job, served
from tests.simulated import job_config

pytestmark = pytest.mark.docker

HIVED = "`extras.hivedScheduler` is OpenPAI's HiveD scheduler"
WARNED_JOB = json.loads(
    job_config(
        name="warned",
        roles={"main": {"commands": ["echo done"]}},
        extras={"hivedScheduler": {"jobPriorityClass": "prod"}},
    )
)
WARNED_JOB["taskRoles"]["main"]["extraContainerOptions"] = {"infiniband": True}

WARNINGS = """query($id: ID!) { job(id: $id) { name state warnings { path code message } } }"""


@pytest.mark.parametrize("kind", ["sqlite"])
def test_a_submitted_job_keeps_and_shows_its_warnings(kind: str, tmp_path: Path) -> None:
    config = tmp_path / "warned.json"
    config.write_text(json.dumps(WARNED_JOB))
    with served(kind, tmp_path) as server:
        added = server.paigraph("users", "add", "ann")
        assert added.returncode == 0, added.stderr
        token = added.stdout.strip()
        server.start()

        submitted = server.paigraph("submit", str(config), token=token)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()  # stdout is the id alone; the warnings go to stderr
        assert "warning extras.hivedScheduler:" in submitted.stderr
        assert "taskRoles.main.extraContainerOptions.infiniband:" in submitted.stderr

        client = server.client(token)
        assert final_job(client, job_id)["state"] == "SUCCEEDED"  # warned, and it still runs
        shown = client.execute(WARNINGS, {"id": job_id})["job"]["warnings"]
        assert sorted((w["path"], w["code"]) for w in shown) == [
            (["extras", "hivedScheduler"], "ignored"),
            (["taskRoles", "main", "extraContainerOptions", "infiniband"], "ignored"),
        ]
        assert any(HIVED in w["message"] for w in shown)

        server.kill()
        server.start()  # kept with the job, not recomputed
        again = client.execute(WARNINGS, {"id": job_id})["job"]["warnings"]
        assert again == shown
        status = server.paigraph("status", job_id, token=token)
        assert status.returncode == 0, status.stderr
        text = " ".join(status.stdout.split())
        assert "warning extras.hivedScheduler:" in text
        assert HIVED in text
        assert "[ignored]" in text


@pytest.mark.parametrize("kind", ["sqlite"])
def test_the_submit_and_resolve_payloads_carry_the_warnings(kind: str, tmp_path: Path) -> None:
    with served(kind, tmp_path) as server:
        added = server.paigraph("users", "add", "ann")
        token = added.stdout.strip()
        server.start()
        payload = server.client(token).execute(
            "mutation($config: String!) { submitJob(input: {config: $config}) {"
            " job { id warnings { path } } errors { path } warnings { path code message } } }",
            {"config": json.dumps(WARNED_JOB)},
        )["submitJob"]
        assert payload["errors"] == []
        paths = sorted(w["path"] for w in payload["warnings"])
        assert paths == [
            ["extras", "hivedScheduler"],
            ["taskRoles", "main", "extraContainerOptions", "infiniband"],
        ]
        assert sorted(w["path"] for w in payload["job"]["warnings"]) == paths
        final_job(server.client(token), payload["job"]["id"])
        resolved = server.client(token).execute(
            "mutation($config: String!) { resolveJob(input: {config: $config}) {"
            " errors { path } warnings { path code } } }",
            {"config": json.dumps(WARNED_JOB)},
        )["resolveJob"]
        assert resolved["errors"] == []
        assert sorted(w["path"] for w in resolved["warnings"]) == paths


def two_gpus_job() -> dict[str, Any]:
    """A job whose one instance asks for two GPUs and prints the ones it sees."""
    job: dict[str, Any] = json.loads(
        job_config(name="gpus", roles={"main": {"commands": ["echo done"]}})
    )
    job["taskRoles"]["main"]["resourcePerInstance"]["gpu"] = 2
    job["taskRoles"]["main"]["commands"] = ['echo "visible=$NVIDIA_VISIBLE_DEVICES"']
    return job


@pytest.mark.parametrize("kind", ["sqlite"])
def test_a_job_given_simulated_gpus_is_told_so_and_its_log_says_it(
    kind: str, tmp_path: Path
) -> None:
    """The defaults are a GPU cluster on a machine without GPUs: a job asking for two runs,
    its warnings say they are simulated, and its instance prints which ones at its start."""
    gpu_job = two_gpus_job()
    with served(kind, tmp_path) as server:
        token = server.paigraph("users", "add", "ann").stdout.strip()
        server.start()
        client = server.client(token)
        resolved = client.execute(
            "mutation($config: String!) { resolveJob(input: {config: $config}) {"
            " errors { path } warnings { path code message } } }",
            {"config": json.dumps(gpu_job)},
        )["resolveJob"]
        assert resolved["errors"] == []
        [simulated] = [w for w in resolved["warnings"] if w["code"] == "simulated"]
        assert simulated["path"] == ["taskRoles"]
        assert "task role(s) main ask for GPUs, which are simulated" in simulated["message"]
        payload = client.execute(
            "mutation($config: String!) { submitJob(input: {config: $config}) {"
            " job { id } errors { path } warnings { code message } } }",
            {"config": json.dumps(gpu_job)},
        )["submitJob"]
        assert payload["errors"] == []
        assert simulated["message"] in [w["message"] for w in payload["warnings"]]
        job_id = payload["job"]["id"]
        assert final_job(client, job_id)["state"] == "SUCCEEDED"
        kept = client.execute(WARNINGS, {"id": job_id})["job"]["warnings"]
        assert [(w["path"], w["code"]) for w in kept] == [(["taskRoles"], "simulated")]
        logs = server.paigraph("logs", job_id, "main", "0", token=token)
        assert logs.returncode == 0, logs.stderr
        assert "[paigraph] GPUs 0,1 of node-0 are simulated" in logs.stdout
        assert "visible=0,1" in logs.stdout


@pytest.mark.browser
def test_the_job_page_shows_the_warnings(tmp_path: Path) -> None:
    need_browser_and_build()
    with served("sqlite", tmp_path) as server:
        token = server.paigraph("users", "add", "ann").stdout.strip()
        server.start()
        api = Api(server.url, token)
        job_id = api.submit(json.dumps(WARNED_JOB))
        api.wait(job_id, lambda job: job["state"] == "SUCCEEDED")
        with chromium() as browser, browser_page(browser, server.url, token) as (page, _):
            page.goto(f"/jobs/{job_id}")
            shown = page.get_by_test_id("warnings")
            shown.wait_for()
            text = shown.inner_text()
            assert "extras.hivedScheduler" in text and HIVED in text
            assert "taskRoles.main.extraContainerOptions.infiniband" in text
            assert text.count("[ignored]") == 2


@pytest.mark.browser
def test_the_job_page_says_when_its_gpus_are_simulated(tmp_path: Path) -> None:
    need_browser_and_build()
    with served("sqlite", tmp_path) as server:
        token = server.paigraph("users", "add", "ann").stdout.strip()
        server.start()
        api = Api(server.url, token)
        job_id = api.submit(json.dumps(two_gpus_job()))
        api.wait(job_id, lambda job: job["state"] == "SUCCEEDED")
        with chromium() as browser, browser_page(browser, server.url, token) as (page, _):
            page.goto(f"/jobs/{job_id}")
            shown = page.get_by_test_id("warnings")
            shown.wait_for()
            text = shown.inner_text()
            assert "task role(s) main ask for GPUs, which are simulated" in text
            assert "NVIDIA_VISIBLE_DEVICES" in text
            assert "[simulated]" in text
