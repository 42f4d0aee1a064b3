"""Whether a container was killed for its memory, told reliably.

Docker's `OOMKilled` flag is lost when containerd reports the exit before the OOM (seen under
load); the engine's `oom` event is sent either way, so an exit by SIGKILL without the flag
looks for that event.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import docker
import docker.errors
import requests.exceptions

from simulator.containers import ContainerInfo

# A main process ended by SIGKILL (128 + 9): how an OOM kill is told, among other kills.
KILLED_EXIT_CODE = 137


def killed_for_memory(
    api: docker.APIClient, info: ContainerInfo, settle_seconds: float = 1.0
) -> bool:
    """Docker's flag, or else an `oom` event of the container since it started, waiting up to
    `settle_seconds` after its exit for one told late (a container that ended longer ago, as
    one adopted after a restart, is not waited for). An engine that does not answer leaves
    the flag as the answer."""
    if info.oom_killed:
        return True
    if info.exit_code != KILLED_EXIT_CODE or info.started_at is None:
        return False
    now = datetime.now(UTC)
    until = max(now, (info.finished_at or now) + timedelta(seconds=settle_seconds))
    try:
        seen = api.events(
            since=info.started_at,
            until=until,
            filters={"container": info.id, "event": "oom"},
            decode=True,
        )
        return any(True for _ in seen)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
