"""What the simulator's Docker objects are called and labelled, and how a container is specified.

Every container and network carries its owner and attempt in labels: that is how a restarted
backend finds its own again, and how leftovers of a `paigraph run` that died are told apart.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from backends.base import InstanceKey, LaunchRequest, Placement, RoleLaunch
from backends.entrypoint import ENTRYPOINT, RUN_DIR, RUNTIME_DIR, WORK_DIR
from simulator.cluster import Slot
from simulator.containers import LABEL, OWNER, BindMount, ContainerSpec
from simulator.names import safe

JOB = f"{LABEL}.job"
ATTEMPT = f"{LABEL}.attempt"
ROLE = f"{LABEL}.role"
INDEX = f"{LABEL}.index"
NODE = f"{LABEL}.node"
PORTS = f"{LABEL}.ports"
GPUS = f"{LABEL}.gpus"
RUN = f"{LABEL}.run"  # 1, then 2, 3 ... for each time the instance is started again
TASK_ATTEMPT = f"{LABEL}.task-attempt"  # the run the job engine knows it by (InstanceEvent.run)


GATE = f"{RUNTIME_DIR}/go"  # written by the backend once every container of the gang started
# Docker publishes a container's ports when it starts it, and a port may have been taken since
# it was checked free: the commands wait until the whole gang has started, so that a container
# whose port was lost can be replaced (and its peers' environment rewritten) before anything ran
_WAIT_AT_GATE = f"until [ -e {GATE} ]; do sleep 0.1; done; exec /bin/sh {ENTRYPOINT}"


def run_owner() -> str:
    """The owner label of a foreground `paigraph run`: host and pid, so leftovers can be told."""
    return f"run-{socket.gethostname()}-{os.getpid()}"


def left_by_dead_run(owner: str, me: str) -> bool:
    """Whether `owner` is a `paigraph run` on this host (not `me`) whose process is gone
    (killed, machine rebooted): what it left behind belongs to no one."""
    match = re.fullmatch(rf"run-{re.escape(socket.gethostname())}-(\d+)", owner)
    return match is not None and owner != me and not _pid_alive(int(match.group(1)))


def network_name(request: LaunchRequest) -> str:
    """A new name each time: the network of the attempt may be made again after a removal."""
    return f"pai-{safe(request.job_id)}-{request.attempt}-{os.urandom(3).hex()}"


def attempt_labels(owner: str, request: LaunchRequest) -> dict[str, str]:
    return {OWNER: owner, JOB: request.job_id, ATTEMPT: str(request.attempt)}


@dataclass(frozen=True)
class HostLimits:
    """This machine's limits: a role asking for more runs clipped to them."""

    cpus: int
    memory_mb: int
    pids_limit: int

    def clipping_note(self, role: RoleLaunch) -> str | None:
        """What was clipped for the role, told with its PLACED event; None when nothing."""
        clipped = []
        if role.resources.cpu > self.cpus:
            clipped.append(f"cpu {role.resources.cpu} -> {self.cpus}")
        if role.resources.memory_mb > self.memory_mb:
            clipped.append(f"memoryMB {role.resources.memory_mb} -> {self.memory_mb}")
        return "limits clipped to this machine: " + ", ".join(clipped) if clipped else None


def container_spec(
    owner: str,
    request: LaunchRequest,
    key: InstanceKey,
    run: int,
    placement: Placement,
    *,
    task_attempt: int = 1,
    runtime_dir: Path,
    writable_dir: Path,
    env: dict[str, str],
    network: str,
    mounts: dict[tuple[str, str], BindMount],
    slot: Slot,
    real_gpus: bool,
    host: HostLimits,
    publish_address: str = "127.0.0.1",
) -> ContainerSpec:
    """The container of one run of an instance; `mounts` holds the materials by (role, name).

    `runtime_dir` (environment, entrypoint) is mounted read-only and `writable_dir` (inside it)
    read-write: the container can write nothing the server reads but its log.
    """
    role = request.role(key.role)
    index = key.index
    all_ports = [p for label_ports in placement.ports.values() for p in label_ports]
    aliases = [f"{role.name}-{index}"]
    if safe(role.name) != role.name:
        aliases.append(f"{safe(role.name)}-{index}")
    name = f"pai-{safe(request.job_id)}-{request.attempt}-{safe(role.name)}-{index}"
    return ContainerSpec(
        # each run its own name: the container of the run before may not be removed yet
        name=name if run == 1 else f"{name}-run{run}",
        image=role.image,
        command=["/bin/sh", "-c", _WAIT_AT_GATE],
        network=network,
        ip=placement.host_ip,
        aliases=aliases,
        labels={
            **attempt_labels(owner, request),
            ROLE: role.name,
            INDEX: str(index),
            NODE: placement.node,
            PORTS: json.dumps(placement.ports),
            GPUS: json.dumps(list(slot.gpus)),
            RUN: str(run),
            TASK_ATTEMPT: str(task_attempt),
        },
        env=env,
        ports=all_ports,
        publish_address=publish_address,
        memory_mb=min(role.resources.memory_mb, host.memory_mb),
        cpus=float(min(role.resources.cpu, host.cpus)),
        shm_mb=max(1, min(role.resources.shm_mb, role.resources.memory_mb)),
        pids_limit=host.pids_limit,
        mounts=[
            BindMount(str(runtime_dir), RUNTIME_DIR, read_only=True),
            BindMount(str(writable_dir), RUN_DIR),
            *(
                mounts[(role.name, m.name)]
                for m in role.materials
                if (role.name, m.name) in mounts  # not an optional one that was skipped
            ),
            *(
                BindMount(s.source, s.target, read_only=s.read_only, volume=s.volume)
                for s in role.storages
            ),
        ],
        working_dir=WORK_DIR,
        gpu_devices=[str(g) for g in slot.gpus] if real_gpus else [],
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
