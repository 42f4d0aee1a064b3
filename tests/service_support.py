"""Job configs for the job service tests: small protocol v2 jobs on the local busybox image."""

from __future__ import annotations

from typing import Any

from server.protocol import parse_job
from server.protocol.model import JobSpec
from tests.simulated import job_config


def ps_worker(name: str = "psworker", *, worker: list[str] | None = None, **top: Any) -> str:
    """The two-role job: one ps that serves until the workers are done, two workers."""
    return job_config(
        {
            "ps": {"commands": ["sleep 600"]},
            "worker": {
                "instances": 2,
                "commands": worker or ["echo worker $PAI_TASK_INDEX done"],
            },
        },
        name=name,
        **top,
    )


def spec_of(text: str) -> JobSpec:
    spec = parse_job(text).spec
    assert spec is not None
    return spec
