"""No zombie jobs: a job the backend could never start is refused at submission, a job whose
runner hits an unexpected error ends FAILED with the error and gives its resources back, and
stopJob ends any job that has not ended, even one no runner drives any more. Real containers,
a real database (SQLite, and PostgreSQL when PAIGRAPH_TEST_PG is set)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from backends.base import LaunchRequest
from backends.docker import DockerBackend
from backends.docker_attempts import attempt_id
from server.jobs import JobState
from server.jobs.service import JobService
from server.shapes.values import Job
from tests.api.test_api_jobs import SUBMIT, served
from tests.api_support import data
from tests.job_engine.test_job_service import (
    job_of,
    nothing_left,
    running,
    service_on,
    service_with,
    submitted,
    user,
)
from tests.service_support import job_config
from tests.simulated import settings
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

RESOLVE = """
mutation($config: String!, $parameters: JSON) {
  resolveJob(input: {config: $config, parameters: $parameters}) { errors { path code message } }
}
"""
SUBMIT_WITH_PARAMETERS = """
mutation($config: String!, $parameters: JSON) {
  submitJob(input: {config: $config, parameters: $parameters}) {
    job { id } errors { path code message }
  }
}
"""
JOBS = "{ jobs(first: 50) { edges { node { id } } } }"


class Exploding(DockerBackend):
    """The real backend, except that what the test names fails the way no validation can
    foresee: the launch goes through, then raises; or a stop raises before it does anything."""

    def __init__(self, *args: Any, fail_launch: bool = False, fail_stop: bool = False, **kw: Any):
        super().__init__(*args, **kw)
        self.fail_launch, self.fail_stop = fail_launch, fail_stop

    async def launch(self, request: LaunchRequest) -> None:
        await super().launch(request)
        if self.fail_launch:
            raise RuntimeError("the engine went away mid-launch")

    async def stop(self, job_id: str, attempt: int, grace_seconds: float | None = None) -> None:
        if self.fail_stop:
            raise RuntimeError("the engine refused to stop anything")
        await super().stop(job_id, attempt, grace_seconds)


def sleeper(name: str) -> str:
    return job_config({"main": {"commands": ["sleep 600"]}}, name=name)


async def ended(service: JobService, job_id: str) -> Job:
    async def final() -> Job | None:
        job = await job_of(service.store, job_id)
        return job if job.state.is_final else None

    return await until_async(final, f"job {job_id} ending", 60)


# --- refused at submission ---------------------------------------------------------------------


async def test_nul_bytes_and_unparsable_images_are_refused_before_a_job_is_stored(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    nul_command = job_config({"main": {"commands": ["echo a\0b"]}}, name="nulcmd")
    rendered = job_config({"main": {"commands": ["echo <% $parameters.x %>"]}}, name="nulparam")
    spaced = json.loads(job_config({"main": {"commands": ["echo hi"]}}, name="spaced"))
    spaced["prerequisites"][0]["uri"] = "busybox latest"
    cases = [
        (nul_command, None, ["taskRoles", "main", "commands", "0"], "nul-byte"),
        (rendered, {"x": "a\0b"}, ["parameters", "x"], "nul-byte"),
        (json.dumps(spaced), None, ["prerequisites", "0", "uri"], "image-reference"),
    ]
    async with served(db_url, tmp_path / "state", owner) as server:
        token = server.user("ann", "default")
        for config, parameters, path, code in cases:
            variables = {"config": config, "parameters": parameters}
            for query, name in ((SUBMIT_WITH_PARAMETERS, "submitJob"), (RESOLVE, "resolveJob")):
                payload = (await data(server.client, query, variables, token=token))[name]
                assert [(e["path"], e["code"]) for e in payload["errors"]] == [(path, code)]
                assert payload.get("job") is None
        assert (await data(server.client, JOBS, token=token))["jobs"]["edges"] == []
        # the same jobs without the fault run (the checks refuse only the fault)
        fine = await data(server.client, SUBMIT, {"config": sleeper("fine")}, token=token)
        assert fine["submitJob"]["errors"] == []


# --- the runner fails ----------------------------------------------------------------------------


async def test_a_job_whose_launch_raises_ends_failed_gives_back_its_resources_and_stays_ended(
    db_url: str, tmp_path: Path, owner: str, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    backend = Exploding(settings(state), owner=owner, fail_launch=True)
    with caplog.at_level(logging.ERROR, logger="server.jobs.runner"):
        async with service_with(db_url, backend) as service:
            ann = user(service.store, "ann", "default")
            job = await submitted(service, ann, sleeper("boom"))
            job = await ended(service, job.id)
            assert job.state is JobState.FAILED
            assert "unexpected error" in job.state_reason
            assert "the engine went away mid-launch" in job.state_reason
            await nothing_left(owner)  # its containers and network are gone
            assert not backend.cluster.holds(attempt_id(job.id, 1))  # and its cpu is free
    logged = [r for r in caplog.records if job.id in r.getMessage() and r.exc_info]
    assert logged, "the error was not logged with its traceback"
    assert "the engine went away mid-launch" in str(logged[0].exc_info[1])
    # a restart does not bring it back for another attempt
    async with service_on(db_url, state, owner) as again:
        await asyncio.sleep(2)
        job = await job_of(again.store, job.id)
        assert (job.state, job.attempt, job.retries) == (JobState.FAILED, 1, 0)
        await nothing_left(owner)


async def test_stop_ends_a_job_when_the_backend_raises_on_stop(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    state = tmp_path / "state"
    backend = Exploding(settings(state), owner=owner, fail_stop=True)
    async with service_with(db_url, backend) as service:
        admin = user(service.store, "root", admin=True)
        job = await submitted(service, user(service.store, "ann", "default"), sleeper("stuck"))
        await running(service, job.id, 1)
        outcome = await service.stop(admin, job.id)
        assert outcome.errors == []
        job = await ended(service, job.id)
        assert job.state is JobState.STOPPED
        assert "stop requested by root" in job.state_reason
        assert "the engine refused to stop anything" in job.state_reason
        await nothing_left(owner)  # the attempt was still forgotten, its container removed


async def test_stop_ends_a_job_that_no_runner_drives(
    db_url: str, tmp_path: Path, owner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    async with service_on(db_url, state, owner) as first:
        job = await submitted(first, user(first.store, "ann", "default"), sleeper("orphan"))
        await running(first, job.id, 1)

    def cannot_resume(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("its saved plan is unusable")

    monkeypatch.setattr("server.jobs.service.plan_resumption", cannot_resume)
    async with service_on(db_url, state, owner) as second:
        assert (await job_of(second.store, job.id)).state is JobState.RUNNING
        admin = user(second.store, "root", admin=True)
        outcome = await second.stop(admin, job.id)
        assert outcome.errors == []
        assert outcome.job is not None and outcome.job.state is JobState.STOPPED
        assert "stop requested by root" in outcome.job.state_reason
        await nothing_left(owner)
        assert (await second.stop(admin, job.id)).errors[0].code == "final"
