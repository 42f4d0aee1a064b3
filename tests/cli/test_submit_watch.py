"""`paigraph submit --watch` on a real server: the job's id, its table until it ends, and each
of its warnings said once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import Server, final_job, served
from tests.simulated import job_config

pytestmark = pytest.mark.docker

WARNED = "asks OpenPAI for an InfiniBand device"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served("sqlite", tmp_path) as server:
        server.start()
        yield server


def test_a_watched_submit_says_each_warning_of_the_job_once(server: Server, tmp_path: Path) -> None:
    doc = json.loads(job_config({"main": {"commands": ["echo watched-job-ran"]}}, name="warned"))
    doc["taskRoles"]["main"]["extraContainerOptions"] = {"infiniband": True}
    config = tmp_path / "warned.json"
    config.write_text(json.dumps(doc))

    plain = server.paigraph("submit", str(config))
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.count(WARNED) == 1, plain.stderr  # stdout is the id alone
    assert WARNED not in plain.stdout
    final_job(server.client(), plain.stdout.strip())  # a name is taken while its job runs

    watched = server.paigraph("submit", "--watch", str(config))
    said = watched.stdout + watched.stderr
    assert watched.returncode == 0, said
    assert "SUCCEEDED" in watched.stdout, said
    assert said.count(WARNED) == 1, said
    assert WARNED in watched.stderr  # where a plain submit says it
    job_id = watched.stdout.splitlines()[0]
    status = server.paigraph("status", job_id)  # the job keeps it
    assert status.stdout.count(WARNED) == 1, status.stdout
