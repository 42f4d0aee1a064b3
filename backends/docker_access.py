"""What users reach of the simulator's instances while they run: their logs (kept within
their limit), a command run in them, and what they use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from backends import docker_records as records
from backends.base import BackendError, InstanceKey, UnknownInstance
from backends.docker_core import DockerCore
from backends.docker_exec import DockerExecSession
from backends.docker_specs import ATTEMPT, INDEX, JOB, ROLE
from backends.docker_usage import Watched
from backends.instance_exec import ExecRequest
from backends.threaded import LogSource
from backends.usage import UsageSample
from simulator.containers import OWNER

log = logging.getLogger(__name__)

_LOG_CHECK_SECONDS = 2.0  # how often running instances' logs are kept within their limit


class DockerAccess(DockerCore):
    """Logs, exec and usage of the simulator's instances."""

    def usage_source(self) -> str:
        return self.usage_meter.source()

    async def sample_usage(self) -> Sequence[UsageSample]:
        """Every running container's use (backends.docker_usage says how it is measured)."""
        with self._lock:
            running = [
                Watched(
                    key=i.key,
                    container_id=i.container_id,
                    real_gpus=bool(i.placement and self.cluster.node(i.placement.node).real_gpus),
                )
                for i in self._by_container.values()
                if i.container_id is not None and not i.ended and i.started_at is not None
            ]
        return await asyncio.to_thread(self.usage_meter.sample, running)

    def _log_source(self, key: InstanceKey) -> LogSource:
        directory = self._instance_dir(key)
        log_file = records.instance_log(directory)
        if not directory.is_dir():
            raise UnknownInstance(f"no instance {key.role}-{key.index} in attempt {key.attempt}")
        return LogSource(
            read_from=log_file.read,
            tail_offset=log_file.tail_offset,
            running=lambda: not records.has_exit(directory),
        )

    def exec_session(self, key: InstanceKey, request: ExecRequest) -> DockerExecSession:
        """Run a command in the instance's running container (`paigraph exec` and `shell`)."""
        labels = {
            OWNER: self.owner,
            JOB: key.job_id,
            ATTEMPT: str(key.attempt),
            ROLE: key.role,
            INDEX: str(key.index),
        }
        try:
            found = self.engine.containers(labels)
        except Exception as exc:
            raise BackendError(f"cannot look up the container of {key}: {exc}") from None
        if not found:
            raise UnknownInstance(f"instance {key.role}-{key.index} has no container (any more)")
        running = [c for c in found if c.status == "running"]
        if not running:
            raise BackendError(
                f"instance {key.role}-{key.index} is not running (its container is "
                f"{found[-1].status})"
            )
        return DockerExecSession(self.engine.api, running[-1].id, request)

    def _keep_logs(self) -> None:
        """Keep every running instance's log within the limit, every few seconds, until closed;
        a job printing without end costs the disk a bounded amount."""
        while not self._closed.wait(_LOG_CHECK_SECONDS):
            with self._lock:
                running = [
                    i.dir
                    for a in self._attempts.values()
                    for i in a.instances.values()
                    if i.container_id and not i.ended
                ]
            for directory in running:
                self._keep_log(directory)
