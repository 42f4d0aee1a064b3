"""The simulator backend's picture of its attempts: instances, their state, the gang's order.

The gang's order (roles as listed, indexes ascending) is the one order the cluster's slots, the
network's addresses and the port asks are all given in.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from backends.base import InstanceKey, LaunchRequest, Placement, RoleLaunch
from backends.docker_records import instance_dir, read_exit, read_run
from backends.runtime_env import port_requests
from backends.start_gate import ReadinessCount
from backends.threaded import attempt_id as attempt_id  # re-exported: one definition
from simulator.cluster import Demand
from simulator.ports import PortAsk


@dataclass(eq=False)  # compared by identity: the relaunch queue holds these
class Instance:
    key: InstanceKey
    dir: Path
    run: int = 1  # how many containers it was given; a relaunch, or one made again, adds one
    task_attempt: int = 1  # the run the job engine knows: 1, then what each relaunch asked for
    container_id: str | None = None
    started_at: datetime | None = None
    placement: Placement | None = None
    ended: bool = False
    waiting_reason: str | None = None  # why a relaunch waits, told once per change
    gated: bool = False  # its container waits at the gate: STARTED is told when it opens
    ran: bool = False  # its gate was opened in this run: its commands started
    ready: bool = False  # ready now, by its role's readiness check (start_gate.ReadinessCount)
    readiness: ReadinessCount | None = None  # its checks' results in this run, counted
    next_check: float = 0.0  # monotonic time its readiness is checked again
    # its wait for its role's dependencies failed: its container is being stopped, and that
    # end, not the container's, is told (start_gate.DEPENDENCY_FAILED)
    gave_up: bool = False
    exit_code: int | None = None  # how it ended, once it did

    @property
    def attempt_id(self) -> str:
        return attempt_id(self.key.job_id, self.key.attempt)

    @property
    def port_owner(self) -> str:
        """Who holds the instance's ports in the port allocator."""
        return f"{self.attempt_id}/{self.key.role}/{self.key.index}"


@dataclass
class Attempt:
    request: LaunchRequest
    dir: Path
    instances: dict[tuple[str, int], Instance] = field(default_factory=dict)
    network: str | None = None
    addresses: list[str] = field(default_factory=list)  # the network's, in the gang's order
    network_lock: threading.Lock = field(default_factory=threading.Lock)
    placed: bool = False
    stopping: bool = False
    forgotten: bool = False
    waiting_reason: str | None = None
    images_checked: bool = False  # its images were found on the engine

    @classmethod
    def new(cls, request: LaunchRequest, directory: Path, *, placed: bool = False) -> Attempt:
        """The attempt with every instance of the request, each in its folder under `directory`."""
        attempt = cls(request=request, dir=directory, placed=placed)
        for role, index in gang_order(request):
            key = InstanceKey(
                job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
            )
            attempt.instances[(role.name, index)] = Instance(
                key=key, dir=instance_dir(directory, role.name, index)
            )
        return attempt

    @property
    def id(self) -> str:
        return attempt_id(self.request.job_id, self.request.attempt)

    def all_ended(self) -> bool:
        return all(i.ended for i in self.instances.values())


def recorded_attempt(request: LaunchRequest, directory: Path) -> tuple[Attempt, list[Instance]]:
    """An attempt as its records left it before a restart, placed, with each instance's run
    and end; and the instances whose relaunch still waited to be placed."""
    attempt = Attempt.new(request, directory, placed=True)
    queued = []
    for instance in attempt.instances.values():
        run = read_run(instance.dir)
        if run is not None:
            instance.run = run.run
            instance.task_attempt = run.task_attempt
            if run.placement is not None:
                instance.placement = run.placement
            if run.queued:
                queued.append(instance)
        ended = read_exit(instance.dir)
        if ended is not None:
            instance.ended = True
            instance.placement = ended.placement
    return attempt, queued


def gang_order(request: LaunchRequest) -> list[tuple[RoleLaunch, int]]:
    """Every instance of the attempt, roles in order, indexes ascending: the gang's order."""
    return [(role, index) for role in request.roles for index in range(role.instances)]


def gang_position(request: LaunchRequest, key: InstanceKey) -> int:
    """The instance's place in the gang's order."""
    position = 0
    for role in request.roles:
        if role.name == key.role:
            return position + key.index
        position += role.instances
    raise KeyError(key.role)


def demand(role: RoleLaunch) -> Demand:
    return Demand(role.resources.cpu, role.resources.memory_mb, role.resources.gpu)


def port_asks(role: RoleLaunch, index: int) -> list[PortAsk]:
    """The instance's ports. Every instance shares this one host, so a fixed `beginAt` range
    is laid out per instance, instance i starting at beginAt + i * count (OpenPAI's
    sequential scheme); without beginAt the allocator picks free ports."""
    return [
        PortAsk(p.label, p.count, p.begin_at + index * p.count if p.begin_at else 0)
        for p in port_requests(role)
    ]


def same_ports(asks: list[PortAsk], previous: Placement) -> list[PortAsk] | None:
    """Asks for exactly the ports an instance had, or None when a label's ports were not one
    consecutive run (an ask names a first port and a count)."""
    again = []
    for ask in asks:
        had = previous.ports.get(ask.label, [])
        if len(had) != ask.count:
            return None
        if had and had != list(range(had[0], had[0] + ask.count)):
            return None
        again.append(ask._replace(begin_at=had[0]) if had else ask)
    return again
