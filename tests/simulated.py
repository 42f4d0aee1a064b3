"""Shared pieces of the simulator tests: a backend on a temporary state dir, small jobs, and
collecting events until instances end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import docker
import docker.errors

from backends.base import (
    EventKind,
    InstanceEvent,
    InstanceKey,
    LaunchRequest,
    PortRequest,
    ResourceRequest,
    RoleLaunch,
)
from backends.docker import DockerBackend
from simulator.containers import OWNER
from simulator.settings import SimulatorSettings
from tests.waiting import until_async, until_notified_async
from tests.worker_support import simulator_port_range, unique_name

IMAGE = "paigraph/busybox:test"
ENDED = (EventKind.EXITED, EventKind.STOPPED, EventKind.START_FAILED, EventKind.LOST)


def role(
    name: str,
    commands: list[str],
    *,
    instances: int = 1,
    cpu: int = 1,
    memory_mb: int = 128,
    ports: Iterable[tuple[str, int]] = (),
    image: str = IMAGE,
    **fields: Any,
) -> RoleLaunch:
    return RoleLaunch(
        name=name,
        instances=instances,
        image=image,
        resources=ResourceRequest(
            cpu=cpu,
            memory_mb=memory_mb,
            shm_mb=16,
            ports=[PortRequest(label=label, count=count) for label, count in ports],
        ),
        commands=commands,
        **fields,
    )


def job(*roles: RoleLaunch, job_id: str | None = None, **fields: Any) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id or f"t{uuid.uuid4().hex[:8]}", job_name="test", roles=list(roles), **fields
    )


def settings(state_dir: Path, **overrides: Any) -> SimulatorSettings:
    """Settings on `state_dir`, publishing on this worker's own ports unless `overrides` says
    otherwise."""
    overrides.setdefault("port_range", simulator_port_range())
    return SimulatorSettings(state_dir=state_dir, use_host_gpus=False, **overrides)


@asynccontextmanager
async def backend(
    state_dir: Path, *, owner: str | None = None, **overrides: Any
) -> AsyncIterator[DockerBackend]:
    sim = DockerBackend(settings(state_dir, **overrides), owner=owner or unique_name("test"))
    await sim.start()
    try:
        yield sim
    except BaseException:
        await sim.close()
        remove_leftovers(sim.owner)
        raise
    await sim.close()


def job_config(roles: dict[str, dict[str, Any]], *, name: str = "svcjob", **top: Any) -> str:
    """A v2 job whose roles give `commands` and optionally `instances`, `cpu`, `ports` (label
    to count), `completion`, `taskRetryCount`; `top` adds top-level keys (jobRetryCount,
    extras, ...)."""
    doc = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": IMAGE}],
        "taskRoles": {
            role: {
                "instances": spec.get("instances", 1),
                "dockerImage": "bb",
                "resourcePerInstance": {
                    "cpu": spec.get("cpu", 1),
                    "memoryMB": 128,
                    "gpu": 0,
                    **({"ports": spec["ports"]} if "ports" in spec else {}),
                },
                "commands": spec["commands"],
                **{k: spec[k] for k in ("completion", "taskRetryCount") if k in spec},
            }
            for role, spec in roles.items()
        },
        **top,
    }
    return json.dumps(doc)


class Collector:
    """Reads a backend's event stream in the background, so tests can wait for conditions."""

    def __init__(self, sim: DockerBackend) -> None:
        self.events: list[InstanceEvent] = []
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._pump(sim))

    async def _pump(self, sim: DockerBackend) -> None:
        async for event in sim.events():
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()

    def of(self, request: LaunchRequest) -> list[InstanceEvent]:
        return [
            e for e in self.events if e.job_id == request.job_id and e.attempt == request.attempt
        ]

    def ended(self, request: LaunchRequest) -> dict[InstanceKey, InstanceEvent]:
        return {e.key: e for e in self.of(request) if e.kind in ENDED and e.key is not None}

    def started(self, request: LaunchRequest) -> dict[InstanceKey, InstanceEvent]:
        return {
            e.key: e for e in self.of(request) if e.kind is EventKind.STARTED and e.key is not None
        }

    async def until(
        self, condition: Any, timeout: float = 90, what: str = "the events awaited"
    ) -> None:
        await until_notified_async(self._changed, condition, what, timeout)

    async def all_ended(self, request: LaunchRequest, timeout: float = 90) -> dict:
        await self.until(
            lambda: len(self.ended(request)) == request.total_instances,
            timeout,
            f"every instance of {request.job_id} ending",
        )
        return self.ended(request)

    def close(self) -> None:
        self._task.cancel()


def leftovers(owner: str) -> tuple[list[str], list[str]]:
    """Containers and networks Docker still has for this owner."""
    api = docker.from_env().api
    labels = {"label": f"{OWNER}={owner}"}
    containers = [c["Names"][0].lstrip("/") for c in api.containers(all=True, filters=labels)]
    networks = [n["Name"] for n in api.networks(filters=labels)]
    return containers, networks


async def nothing_left(owner: str, timeout: float = 30) -> None:
    """Until Docker has no container or network of the owner: removal follows the ending
    event."""

    def gone() -> bool:
        with contextlib.suppress(docker.errors.NotFound):  # listed, then removed meanwhile
            return leftovers(owner) == ([], [])
        return False

    async def gone_off_the_loop() -> bool:  # the backend's loop goes on meanwhile
        return await asyncio.to_thread(gone)

    await until_async(gone_off_the_loop, f"no container or network of {owner} left", timeout)


def remove_leftovers(owner: str) -> None:
    """After a failed test: take away whatever its backend could not clean up."""
    api = docker.from_env().api
    labels = {"label": f"{OWNER}={owner}"}
    for container in api.containers(all=True, filters=labels):
        with contextlib.suppress(docker.errors.APIError):
            api.remove_container(container["Id"], force=True)
    for network in api.networks(filters=labels):
        with contextlib.suppress(docker.errors.APIError):
            api.remove_network(network["Id"])


async def log_text(sim: DockerBackend, key: InstanceKey) -> str:
    return "".join([chunk.data async for chunk in sim.logs(key)])
