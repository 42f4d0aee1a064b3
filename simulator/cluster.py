"""Simulated capacity: nodes, virtual-cluster quotas and gang placement.

An attempt is placed all at once or not at all, first-fit-decreasing, and a shortage says what
is missing so the job can wait or be refused with a reason (docs/architecture.md, How the
simulator places an attempt).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from simulator.settings import Capacity, SimulatorSettings

_RESOURCES = ("cpu", "memory_mb", "gpu")


@dataclass(frozen=True, slots=True)
class Demand:
    """What one instance asks for."""

    cpu: int
    memory_mb: int
    gpu: int = 0

    def __post_init__(self) -> None:
        for name in _RESOURCES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")


class Slot(NamedTuple):
    """Where one instance was placed: a node and the GPU indices it got there."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Placed:
    """The attempt holds its resources; one slot per demand, in the order asked."""

    slots: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class Shortage:
    """The attempt does not fit now; ``reason`` names what is missing."""

    reason: str


class NeverFits(ValueError):
    """The attempt can never be placed here, whatever else finishes."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    cpu: int
    memory_mb: int
    gpus: tuple[int, ...]  # indices handed out on this node
    real_gpus: bool  # the indices are the host's NVIDIA devices, not simulated ones

    @property
    def gpu(self) -> int:
        return len(self.gpus)

    @property
    def capacity(self) -> Capacity:
        return Capacity(self.cpu, self.memory_mb, self.gpu)


@dataclass(frozen=True, slots=True)
class NodeUsage:
    name: str
    capacity: Capacity
    used: Capacity
    gpus_used: tuple[int, ...]
    real_gpus: bool
    instances: int

    @property
    def free(self) -> Capacity:
        return Capacity(*(c - u for c, u in zip(self.capacity, self.used, strict=True)))


@dataclass(frozen=True, slots=True)
class VcUsage:
    name: str
    quota: Capacity
    used: Capacity
    attempts: int
    instances: int

    @property
    def free(self) -> Capacity:
        return Capacity(*(q - u for q, u in zip(self.quota, self.used, strict=True)))


@dataclass(frozen=True, slots=True)
class Usage:
    """A consistent snapshot of the cluster, for tables and the API."""

    nodes: tuple[NodeUsage, ...]
    vcs: tuple[VcUsage, ...]


# --- host GPUs ----------------------------------------------------------------------------


def parse_nvidia_smi_list(text: str) -> tuple[int, ...]:
    """Device indices from ``nvidia-smi -L`` output ("GPU 0: NVIDIA A100 (UUID: ...)")."""
    return tuple(int(m[1]) for m in re.finditer(r"^GPU (\d+):", text, re.MULTILINE))


def detect_host_gpus(timeout: float = 10.0) -> tuple[int, ...]:
    """The host's NVIDIA GPU indices; empty when ``nvidia-smi`` is absent or fails.

    When this is not empty, the first simulated node has exactly these GPUs, and an instance
    placed there gets the real devices; every other node keeps its simulated GPUs.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        done = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_nvidia_smi_list(done.stdout) if done.returncode == 0 else ()


# --- accounting ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    node: str
    demand: Demand
    gpus: tuple[int, ...]


@dataclass(slots=True)
class _Holding:
    vc: str
    entries: list[_Entry | None]


@dataclass(slots=True)
class _NodeState:
    info: NodeInfo
    cpu_used: int = 0
    memory_used: int = 0
    gpu_use: Counter[int] = field(default_factory=Counter)
    instances: int = 0

    def free(self) -> Capacity:
        free_gpus = sum(1 for g in self.info.gpus if self.gpu_use[g] <= 0)
        return Capacity(
            self.info.cpu - self.cpu_used, self.info.memory_mb - self.memory_used, free_gpus
        )

    def free_gpu_indices(self) -> list[int]:
        return [g for g in self.info.gpus if self.gpu_use[g] <= 0]

    def take(self, entry: _Entry) -> None:
        self.cpu_used += entry.demand.cpu
        self.memory_used += entry.demand.memory_mb
        self.gpu_use.update(entry.gpus)
        self.instances += 1

    def give_back(self, entry: _Entry) -> None:
        self.cpu_used -= entry.demand.cpu
        self.memory_used -= entry.demand.memory_mb
        self.gpu_use.subtract(entry.gpus)
        self.instances -= 1


class Cluster:
    """The simulated nodes and who holds what on them; every method is thread-safe."""

    def __init__(
        self, settings: SimulatorSettings, *, host_gpus: Sequence[int] | None = None
    ) -> None:
        if host_gpus is None:
            host_gpus = detect_host_gpus() if settings.use_host_gpus else ()
        infos: list[NodeInfo] = []
        for i, spec in enumerate(settings.cluster_nodes):
            real = i == 0 and len(host_gpus) > 0
            gpus = tuple(host_gpus) if real else tuple(range(spec.gpu or 0))
            infos.append(NodeInfo(spec.name, spec.cpu, spec.memory_mb, gpus, real))
        self._nodes = {info.name: _NodeState(info) for info in infos}
        # what the nodes have never changes: kept, as every submission asks about it
        self._capacities = {info.name: info.capacity for info in infos}
        self._largest = Capacity(*(max(c[i] for c in self._capacities.values()) for i in range(3)))
        total = Capacity(*(sum(n.capacity[i] for n in infos) for i in range(3)))
        self._total = total
        self._quotas = {vc.name: vc.quota_of(total) for vc in settings.virtual_clusters}
        self._held: dict[str, _Holding] = {}
        self._lock = threading.Lock()

    # -- what the cluster is --

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return tuple(n.info for n in self._nodes.values())

    @property
    def vc_names(self) -> tuple[str, ...]:
        return tuple(self._quotas)

    def quota(self, vc: str) -> Capacity:
        return self._quotas[self._known_vc(vc)]

    def node(self, name: str) -> NodeInfo:
        return self._nodes[name].info

    # -- placing --

    def never_fits(self, vc: str, demands: Sequence[Demand]) -> str | None:
        """Why this attempt can never run here, or None when it can once room is free."""
        if vc not in self._quotas:
            return self._unknown_vc(vc)
        for d in dict.fromkeys(demands):  # each different demand once: most repeat
            reason = self._too_big(d)
            if reason:
                return reason
        quota = self._quotas[vc]
        asked = _sum(demands)
        for i, name in enumerate(_RESOURCES):
            if asked[i] > quota[i]:
                return (
                    f"needs {_amount(name, asked[i])} in total, more than the quota of "
                    f"vc {vc} ({_amount(name, quota[i])}; virtual_clusters in the simulator "
                    f"settings)"
                )
        empty = dict(self._capacities)
        placed, _ = _first_fit_decreasing(demands, empty)
        if placed < len(demands):
            return (
                f"even an empty cluster fits only {placed} of the {len(demands)} instances "
                f"at once; the nodes are too small for this mix (node_count, node or nodes in "
                f"the simulator settings)"
            )
        return None

    def place(self, attempt_id: str, vc: str, demands: Sequence[Demand]) -> Placed | Shortage:
        """Hold resources for every demand at once, or for none; raises NeverFits."""
        reason = self.never_fits(vc, demands)
        if reason is not None:
            raise NeverFits(reason)
        with self._lock:
            if attempt_id in self._held:
                raise ValueError(f"attempt {attempt_id!r} already holds resources")
            shortage = self._vc_shortage(vc, demands)
            if shortage:
                return Shortage(shortage)
            free = {name: state.free() for name, state in self._nodes.items()}
            placed, where = _first_fit_decreasing(demands, free)
            if placed < len(demands):
                return Shortage(self._node_shortage(demands, where, free))
            entries: list[_Entry | None] = []
            for d, node in zip(demands, where, strict=True):
                assert node is not None
                state = self._nodes[node]
                entry = _Entry(node, d, tuple(state.free_gpu_indices()[: d.gpu]))
                state.take(entry)
                entries.append(entry)
            self._held[attempt_id] = _Holding(vc, entries)
            return Placed(tuple(Slot(e.node, e.gpus) for e in entries if e is not None))

    def place_one(
        self,
        attempt_id: str,
        vc: str,
        index: int,
        demand: Demand,
        *,
        prefer: str | None = None,
    ) -> Placed | Shortage:
        """Hold resources for the ``index``-th demand of an attempt again, after it was given
        back: one instance started again on its own (task retry without gang allocation).

        The rest of the attempt is not touched, so this works while its peers run and after
        all of them ended. ``prefer`` is tried first, so the instance returns to the node it
        ran on when that has room. Raises NeverFits, and ValueError when that demand still
        holds resources or the attempt holds them in another virtual cluster.
        """
        if index < 0:
            raise ValueError(f"demand index must be >= 0, not {index}")
        reason = self.never_fits(vc, [demand])
        if reason is not None:
            raise NeverFits(reason)
        with self._lock:
            holding = self._held.get(attempt_id)
            if holding is not None:
                if holding.vc != vc:
                    raise ValueError(f"attempt {attempt_id!r} holds resources in vc {holding.vc}")
                if index < len(holding.entries) and holding.entries[index] is not None:
                    raise ValueError(
                        f"demand {index} of attempt {attempt_id!r} already holds resources"
                    )
            shortage = self._vc_shortage(vc, [demand])
            if shortage:
                return Shortage(shortage)
            free = {name: state.free() for name, state in self._nodes.items()}
            order = sorted(free, key=lambda name: name != prefer)  # stable: settings order
            node = next((name for name in order if _fits(demand, free[name])), None)
            if node is None:
                return Shortage(self._node_shortage([demand], [None], free))
            state = self._nodes[node]
            entry = _Entry(node, demand, tuple(state.free_gpu_indices()[: demand.gpu]))
            state.take(entry)
            if holding is None:
                holding = self._held[attempt_id] = _Holding(vc, [])
            holding.entries.extend([None] * (index + 1 - len(holding.entries)))
            holding.entries[index] = entry
            return Placed((Slot(entry.node, entry.gpus),))

    def release(self, attempt_id: str) -> None:
        """Give back everything the attempt still holds; unknown attempts are ignored."""
        with self._lock:
            holding = self._held.pop(attempt_id, None)
            if holding is None:
                return
            for entry in holding.entries:
                if entry is not None:
                    self._nodes[entry.node].give_back(entry)

    def release_one(self, attempt_id: str, index: int) -> None:
        """Give back what the ``index``-th demand holds (its instance ended); idempotent."""
        with self._lock:
            holding = self._held.get(attempt_id)
            if holding is None or not 0 <= index < len(holding.entries):
                return
            entry = holding.entries[index]
            if entry is None:
                return
            self._nodes[entry.node].give_back(entry)
            holding.entries[index] = None
            if all(e is None for e in holding.entries):
                del self._held[attempt_id]

    def adopt(
        self,
        attempt_id: str,
        vc: str,
        instances: Sequence[tuple[str, Demand, Sequence[int]] | None],
    ) -> None:
        """Record what a running attempt holds, as found after a restart.

        ``instances`` has one ``(node, demand, gpu indices)`` per demand in the order of the
        original placement, or None for an instance that holds nothing any more. What is found
        is a fact, so it is recorded even if it overcommits a node or a quota.
        """
        with self._lock:
            if vc not in self._quotas:
                raise ValueError(self._unknown_vc(vc))
            if attempt_id in self._held:
                raise ValueError(f"attempt {attempt_id!r} already holds resources")
            entries: list[_Entry | None] = []
            for item in instances:
                if item is None:
                    entries.append(None)
                    continue
                node, demand, gpus = item
                state = self._nodes.get(node)
                if state is None:
                    known = ", ".join(self._nodes)
                    raise ValueError(f"unknown node {node!r}; the nodes are: {known}")
                foreign = sorted(set(gpus) - set(state.info.gpus))
                if foreign:
                    raise ValueError(f"node {node} has no gpu {foreign[0]}")
                entries.append(_Entry(node, demand, tuple(gpus)))
            for entry in entries:
                if entry is not None:
                    self._nodes[entry.node].take(entry)
            if any(e is not None for e in entries):
                self._held[attempt_id] = _Holding(vc, entries)

    def holds(self, attempt_id: str) -> bool:
        with self._lock:
            return attempt_id in self._held

    def usage(self) -> Usage:
        with self._lock:
            nodes = tuple(
                NodeUsage(
                    name=s.info.name,
                    capacity=s.info.capacity,
                    used=Capacity(
                        s.cpu_used, s.memory_used, sum(1 for g in s.info.gpus if s.gpu_use[g] > 0)
                    ),
                    gpus_used=tuple(g for g in s.info.gpus if s.gpu_use[g] > 0),
                    real_gpus=s.info.real_gpus,
                    instances=s.instances,
                )
                for s in self._nodes.values()
            )
            vcs = []
            for name, quota in self._quotas.items():
                held = [h for h in self._held.values() if h.vc == name]
                entries = [e.demand for h in held for e in h.entries if e is not None]
                vcs.append(VcUsage(name, quota, _sum(entries), len(held), len(entries)))
            return Usage(nodes, tuple(vcs))

    # -- reasons --

    def _known_vc(self, vc: str) -> str:
        if vc not in self._quotas:
            raise ValueError(self._unknown_vc(vc))
        return vc

    def _unknown_vc(self, vc: str) -> str:
        return f"unknown virtual cluster {vc!r}; known: {', '.join(self._quotas)}"

    def _too_big(self, d: Demand) -> str | None:
        if d.gpu and self._total.gpu == 0:
            return (
                f"an instance asks {_amount('gpu', d.gpu)}, but the cluster has no gpus "
                f"(set gpus_per_node in the simulator settings to simulate some)"
            )
        for i, name in enumerate(_RESOURCES):
            largest = self._largest[i]
            if getattr(d, name) > largest:
                return (
                    f"an instance asks {_amount(name, getattr(d, name))}, the largest node "
                    f"has {_amount(name, largest)} ({_SIZE_SETTINGS[name]})"
                )
        if not any(_fits(d, c) for c in self._capacities.values()):
            return (
                f"an instance asks {_describe(d)}; no node has all of that (the nodes' sizes "
                f"are node or nodes in the simulator settings)"
            )
        return None

    def _vc_shortage(self, vc: str, demands: Sequence[Demand]) -> str | None:
        asked = _sum(demands)
        used = _sum([e.demand for h in self._held.values() if h.vc == vc for e in h.entries if e])
        quota = self._quotas[vc]
        cluster_free = Capacity(*(sum(s.free()[i] for s in self._nodes.values()) for i in range(3)))
        missing = []
        for i, name in enumerate(_RESOURCES):
            free_vc = max(quota[i] - used[i], 0)
            if asked[i] > free_vc:
                missing.append(
                    f"needs {_amount(name, asked[i])}, {_free(name, free_vc)} in vc {vc}"
                )
            elif asked[i] > max(cluster_free[i], 0):
                missing.append(
                    f"needs {_amount(name, asked[i])}, {_free(name, max(cluster_free[i], 0))} "
                    f"in the cluster"
                )
        return "; ".join(missing) or None

    def _node_shortage(
        self, demands: Sequence[Demand], where: list[str | None], free: dict[str, Capacity]
    ) -> str:
        first_left = next(d for d, w in zip(demands, where, strict=True) if w is None)
        if not any(_fits(first_left, c) for c in free.values()):
            lacking = [
                (name, getattr(first_left, name))
                for i, name in enumerate(_RESOURCES)
                if getattr(first_left, name) > max(c[i] for c in free.values())
            ]
            if lacking:
                return "; ".join(f"no node has {_free_amount(n, v)}" for n, v in lacking)
            wanted = [(n, getattr(first_left, n)) for n in _RESOURCES if getattr(first_left, n)]
            return f"no node has {_join([_free_amount(n, v) for n, v in wanted])} at once"
        placed = sum(1 for w in where if w is not None)
        return (
            f"only {placed} of {len(demands)} instances fit on the free nodes; none has room "
            f"for one more with {_describe(first_left)}"
        )


# The settings that make a node larger, named when an instance is larger than every node.
_SIZE_SETTINGS = {
    "cpu": "node.cpu, or cpu in nodes, in the simulator settings",
    "memory_mb": "node.memory_mb, or memory_mb in nodes, in the simulator settings",
    "gpu": "gpus_per_node, node.gpu, or gpu in nodes, in the simulator settings",
}


def _fits(d: Demand, free: Capacity) -> bool:
    return d.cpu <= free.cpu and d.memory_mb <= free.memory_mb and d.gpu <= free.gpu


def _first_fit_decreasing(
    demands: Sequence[Demand], free: dict[str, Capacity]
) -> tuple[int, list[str | None]]:
    """How many demands fit and the node of each (None: no room), largest demands first."""
    room = dict(free)
    where: list[str | None] = [None] * len(demands)
    order = sorted(
        range(len(demands)),
        key=lambda i: (demands[i].gpu, demands[i].cpu, demands[i].memory_mb),
        reverse=True,
    )
    placed = 0
    for i in order:
        d = demands[i]
        for name, cap in room.items():
            if _fits(d, cap):
                room[name] = Capacity(cap.cpu - d.cpu, cap.memory_mb - d.memory_mb, cap.gpu - d.gpu)
                where[i] = name
                placed += 1
                break
    return placed, where


def _sum(demands: Sequence[Demand]) -> Capacity:
    return Capacity(
        sum(d.cpu for d in demands), sum(d.memory_mb for d in demands), sum(d.gpu for d in demands)
    )


def _amount(resource: str, n: int) -> str:
    if resource == "cpu":
        return f"{n} cpu"
    if resource == "memory_mb":
        return f"{n} MB memory"
    return f"{n} gpu" if n == 1 else f"{n} gpus"


def _free(resource: str, n: int) -> str:
    """The second half of "needs 16 cpu, 6 free": the unit is already named."""
    return f"{n} MB free" if resource == "memory_mb" else f"{n} free"


def _free_amount(resource: str, n: int) -> str:
    if resource == "cpu":
        return f"{n} free cpu"
    if resource == "memory_mb":
        return f"{n} MB free memory"
    return f"{n} free gpu" if n == 1 else f"{n} free gpus"


def _describe(d: Demand) -> str:
    parts = [_amount("cpu", d.cpu), _amount("memory_mb", d.memory_mb)]
    if d.gpu:
        parts.append(_amount("gpu", d.gpu))
    return _join(parts)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
