"""Job configs for the job service tests: small protocol v2 jobs on the local busybox image."""

from __future__ import annotations

import json
from typing import Any

from server.protocol import parse_job
from server.protocol.model import JobSpec
from tests.simulated import IMAGE


def job_config(roles: dict[str, dict[str, Any]], *, name: str = "svcjob", **top: Any) -> str:
    """A v2 job whose roles give `commands` and optionally `instances`, `cpu`, `completion`,
    `taskRetryCount`; `top` adds top-level keys (jobRetryCount, extras, ...)."""
    doc = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": IMAGE}],
        "taskRoles": {
            role: {
                "instances": spec.get("instances", 1),
                "dockerImage": "bb",
                "resourcePerInstance": {"cpu": spec.get("cpu", 1), "memoryMB": 128, "gpu": 0},
                "commands": spec["commands"],
                **{k: spec[k] for k in ("completion", "taskRetryCount") if k in spec},
            }
            for role, spec in roles.items()
        },
        **top,
    }
    return json.dumps(doc)


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
