"""`failurePolicy: ignore` on a data or script prerequisite: when it cannot be fetched, the
instance starts without it and the job's events say so; without it, the instance fails to
start, as before. Real containers on the Docker simulator, a real store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from server.jobs import JobState
from server.shapes.values import Job
from tests.job_engine.test_job_service import (
    history,
    job_of,
    service_on,
    submitted,
    user,
)
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

UNREACHABLE = "http://files.paigraph-test.invalid/mnist.tar"  # .invalid never resolves


def job_with_data(name: str, failure_policy: str | None) -> str:
    data: dict[str, Any] = {"name": "mnist", "type": "data", "uri": [UNREACHABLE]}
    if failure_policy is not None:
        data["failurePolicy"] = failure_policy
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "prerequisites": [
                {"name": "bb", "type": "dockerimage", "uri": "paigraph/busybox:test"},
                data,
            ],
            "taskRoles": {
                "main": {
                    "dockerImage": "bb",
                    "data": "mnist",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                    "commands": ["ls /work/mnist 2>/dev/null || echo no data, carrying on"],
                }
            },
        }
    )


async def _ended(store: Any, job_id: str) -> Job | None:
    job = await job_of(store, job_id)
    return job if job.state.is_final else None


async def test_data_that_cannot_be_fetched_with_failure_policy_ignore_is_skipped(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        job = await submitted(service, ann, job_with_data("tolerant", "ignore"))
        job = await until_async(lambda: _ended(service.store, job.id), "the job ending", 90)
        assert job.state is JobState.SUCCEEDED, job.state_reason
        messages = [e.message or "" for e in history(service.store, job)]
        (warning,) = [m for m in messages if "failurePolicy is ignore" in m]
        assert "data prerequisite 'mnist' could not be fetched" in warning
        assert "starts without /work/mnist" in warning
        log = "".join([c.data async for c in service.logs(job.id, "main", 0)])
        assert "no data, carrying on" in log
        assert "its failurePolicy is ignore, so the commands run without it" in log


@pytest.mark.parametrize("policy", [None, "fail"])
async def test_without_failure_policy_ignore_the_instance_fails_to_start(
    db_url: str, tmp_path: Path, owner: str, policy: str | None
) -> None:
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        job = await submitted(service, ann, job_with_data("strict", policy))
        job = await until_async(lambda: _ended(service.store, job.id), "the job ending", 90)
        assert job.state is JobState.FAILED
        assert "mnist" in job.state_reason
        messages = [e.message or "" for e in history(service.store, job)]
        assert not any("failurePolicy is ignore" in m for m in messages)
