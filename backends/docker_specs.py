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

from backends.base import WORK_DIR, InstanceKey, LaunchRequest, Placement, RoleLaunch, oom_reason
from backends.entrypoint import ENTRYPOINT, RUN_DIR, RUNTIME_DIR
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
# The wait looks every 0.1 s for the first second, then every 0.5 s: each look forks `sleep`
# (some 8 ms of CPU a second per container at 0.1 s), and while a large gang starts, dozens of
# waiting containers looking ten times a second took a quarter of a 2-core machine from the
# engine starting the rest. A gang that starts within a second is let go as soon as before.
_WAIT_AT_GATE = (
    f"n=0; until [ -e {GATE} ]; do if [ $n -lt 10 ]; then n=$((n+1)); sleep 0.1; "
    f"else sleep 0.5; fi; done; exec /bin/sh {ENTRYPOINT}"
)


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


# Below this a scaled-down memory limit is not raised further: a container needs some memory
# to start at all, and a request smaller than this is given as asked.
LEAST_MEMORY_MB = 64


@dataclass(frozen=True)
class HostLimits:
    """This machine's limits. Placement counts what a job asks on the simulated nodes; the
    containers get the request scaled to what this machine can give: cpus capped at the
    machine's, and memory capped at each instance's share of the machine's memory among the
    instances of its attempt (which run together), so that a job asking for a big node still
    runs here, told what it was given.
    """

    cpus: int
    memory_mb: int
    pids_limit: int

    def cpu_limit(self, role: RoleLaunch) -> float:
        return float(min(role.resources.cpu, self.cpus))

    def memory_limit(self, request: LaunchRequest, role: RoleLaunch) -> int:
        """The memory limit of each instance of `role`, in MB: what it asks while the whole
        attempt fits in this machine's memory, else its share of it (at least
        LEAST_MEMORY_MB, never more than asked)."""
        asked = role.resources.memory_mb
        together = sum(r.resources.memory_mb * r.instances for r in request.roles)
        if together <= self.memory_mb:
            return asked
        return min(asked, max(LEAST_MEMORY_MB, asked * self.memory_mb // together))

    def capped(self, request: LaunchRequest, role: RoleLaunch) -> list[str]:
        """What the role's containers get less of than asked, e.g. "memoryMB 16384 -> 3000"."""
        capped = []
        if role.resources.cpu > self.cpus:
            capped.append(f"cpu {role.resources.cpu} -> {self.cpus}")
        memory = self.memory_limit(request, role)
        if memory < role.resources.memory_mb:
            capped.append(f"memoryMB {role.resources.memory_mb} -> {memory}")
        return capped

    def clipping_note(self, request: LaunchRequest, role: RoleLaunch) -> str | None:
        """What was capped for the role, told with its PLACED event; None when nothing."""
        capped = self.capped(request, role)
        return "limits scaled to this machine: " + ", ".join(capped) if capped else None

    def capping_warning(self, request: LaunchRequest) -> str | None:
        """One sentence for the job's warnings naming every role whose limits are capped."""
        roles = [
            f"{role.name} ({', '.join(capped)})"
            for role in request.roles
            if (capped := self.capped(request, role))
        ]
        if not roles:
            return None
        return (
            f"this machine has {self.cpus} cpu and {self.memory_mb} MB of memory, less than "
            f"the job asks: placement counts the requests on the simulated nodes, but the "
            f"containers' limits are scaled to this machine, per instance: {'; '.join(roles)}"
        )

    def oom_reason(self, request: LaunchRequest, role: RoleLaunch) -> str:
        """The end reason of an instance of `role` killed for memory."""
        asked, given = role.resources.memory_mb, self.memory_limit(request, role)
        if given < asked:
            return (
                f"killed because it used more memory than this machine gave it (out of memory: "
                f"asked {asked} MB; this machine gave {given} MB, its share of this machine's "
                f"{self.memory_mb} MB)"
            )
        return oom_reason(asked)


def gpu_env(slot: Slot) -> dict[str, str]:
    """NVIDIA_VISIBLE_DEVICES as the NVIDIA device plugin gives it: the instance's GPU
    indices on its node, or `none` for an instance without GPUs, as OpenPAI sets it (and,
    like OpenPAI, no CUDA_VISIBLE_DEVICES)."""
    return {"NVIDIA_VISIBLE_DEVICES": ",".join(str(g) for g in slot.gpus) or "none"}


def simulated_gpu_note(slot: Slot, real_gpus: bool) -> str | None:
    """The line an instance with simulated GPUs prints first; None when they are real."""
    if not slot.gpus or real_gpus:
        return None
    return (
        f"GPUs {','.join(map(str, slot.gpus))} of {slot.node} are simulated: "
        f"NVIDIA_VISIBLE_DEVICES names them, but this machine attaches no device"
    )


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
    extra_mounts: list[BindMount] | None = None,
) -> ContainerSpec:
    """The container of one run of an instance; `mounts` holds the materials by (role, name).

    The runtime folder is mounted read-only and only `writable_dir` inside it read-write, so the
    container can write nothing the server reads but its log. Simulated GPUs are only named in
    NVIDIA_VISIBLE_DEVICES; real ones are device requests too.
    """
    role = request.role(key.role)
    memory = host.memory_limit(request, role)
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
        memory_mb=memory,
        cpus=host.cpu_limit(role),
        shm_mb=max(1, min(role.resources.shm_mb, memory)),
        pids_limit=host.pids_limit,
        mounts=[
            BindMount(str(runtime_dir), RUNTIME_DIR, read_only=True),
            BindMount(str(writable_dir), RUN_DIR),
            # not an optional one that was skipped
            *(mount for (owner_role, _), mount in mounts.items() if owner_role == role.name),
            *(
                BindMount(s.source, s.target, read_only=s.read_only, volume=s.volume)
                for s in role.storages
            ),
            *(extra_mounts or []),
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
