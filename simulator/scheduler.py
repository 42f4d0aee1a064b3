"""The simulated cluster's queue: attempts waiting for capacity and instances to start again.

It returns each decision as a value (place, wait and why, never and why) and calls nothing of
the backend, which carries the decisions out; the order and the reasons are in
docs/architecture.md, How the simulator places an attempt.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from simulator.cluster import Cluster, Demand, NeverFits, Placed, Shortage, Slot
from simulator.ports import PortAllocator, PortAsk, PortError

I = TypeVar("I")  # the backend's instance  # noqa: E741

PortsByLabel = dict[str, list[int]]


@dataclass(frozen=True)
class GangAsk:
    """What placing a whole attempt asks for; every list is in the gang's order."""

    attempt_id: str
    virtual_cluster: str
    demands: Sequence[Demand]
    port_asks: Sequence[tuple[str, Sequence[PortAsk]]]  # (port owner, its asks) per instance


@dataclass(frozen=True)
class SoloAsk:
    """What placing one instance of a placed attempt again asks for."""

    attempt_id: str
    virtual_cluster: str
    position: int  # the instance's place in the gang's order
    demand: Demand
    prefer_node: str  # where it ran before: tried first
    port_owner: str
    port_asks: Sequence[PortAsk]
    same_ports: Sequence[PortAsk] | None  # exactly the ports it had, when they can be asked


@dataclass(frozen=True)
class PlaceGang:
    """Start the attempt: a slot and the ports of each instance, in the gang's order. Both
    are held for it from now on; it is still queued until the backend takes it."""

    attempt_id: str
    slots: tuple[Slot, ...]
    ports: tuple[PortsByLabel, ...]


@dataclass(frozen=True)
class WaitGang:
    """The attempt does not fit now; it stays queued, and `reason` says for what it waits."""

    attempt_id: str
    reason: str


@dataclass(frozen=True)
class RefuseGang:
    """The attempt can never be placed, for `reason`; it is off the queue."""

    attempt_id: str
    reason: str


GangDecision = PlaceGang | WaitGang | RefuseGang


@dataclass(frozen=True)
class PlaceInstance:
    """Start the instance again: its slot (and node) and ports, held for it from now on."""

    attempt_id: str
    position: int
    port_owner: str
    placed: Placed
    ports: PortsByLabel


@dataclass(frozen=True)
class WaitInstance:
    """The instance does not fit now; it stays queued, and `reason` says for what it waits."""

    reason: str


@dataclass(frozen=True)
class DropInstance:
    """The instance can never start again on its own, for `reason`; it is off the queue."""

    reason: str


InstanceDecision = PlaceInstance | WaitInstance | DropInstance


class Scheduler(Generic[I]):
    """The queue of attempts (by id) and of instances to start again, and their placement."""

    def __init__(self, cluster: Cluster, ports: PortAllocator, lock: threading.RLock) -> None:
        self._cluster = cluster
        self._ports = ports
        self._lock = lock
        self._queue: list[str] = []  # attempt ids waiting for capacity, in arrival order
        self._relaunches: list[I] = []  # instances to start again, in arrival order
        self._scheduling = threading.Lock()

    # --- the queue -------------------------------------------------------------------------------

    def add(self, attempt_id: str) -> None:
        with self._lock:
            self._queue.append(attempt_id)

    def add_first(self, attempt_id: str) -> None:
        """Queue the attempt ahead of all others (it was placed once already)."""
        with self._lock:
            if attempt_id not in self._queue:
                self._queue.insert(0, attempt_id)

    def remove(self, attempt_id: str) -> bool:
        """Take the attempt off the queue; whether it was on it."""
        with self._lock:
            if attempt_id not in self._queue:
                return False
            self._queue.remove(attempt_id)
            return True

    def add_relaunch(self, instance: I) -> None:
        with self._lock:
            self._relaunches.append(instance)

    def add_relaunch_first(self, instance: I) -> None:
        with self._lock:
            self._relaunches.insert(0, instance)

    def remove_relaunch(self, instance: I) -> bool:
        """Take the instance off the relaunch queue; whether it was on it."""
        with self._lock:
            if instance not in self._relaunches:
                return False
            self._relaunches.remove(instance)
            return True

    def remove_relaunches(self, which: Callable[[I], bool]) -> list[I]:
        """Take the instances `which` picks off the relaunch queue; those taken, in order."""
        with self._lock:
            taken = [instance for instance in self._relaunches if which(instance)]
            self._relaunches = [i for i in self._relaunches if not which(i)]
            return taken

    def relaunching(self, instance: I) -> bool:
        with self._lock:
            return instance in self._relaunches

    def relaunches(self) -> list[I]:
        with self._lock:
            return list(self._relaunches)

    def pending(self) -> bool:
        """Whether anything waits to be placed."""
        with self._lock:
            return bool(self._relaunches or self._queue)

    # --- placing ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """One placing round at a time: decisions of two rounds never interleave."""
        with self._scheduling:
            yield

    def turns(self) -> tuple[list[I], list[str]]:
        """What a round tries, in order: the instances to start again, then the queued
        attempts in arrival order. A round is tried again while anything was placed."""
        with self._lock:
            return list(self._relaunches), list(self._queue)

    def decide_gang(self, ask: GangAsk, outage: str | None = None) -> GangDecision:
        """Place the whole attempt now, or say why it waits or never fits. `outage` says why
        nothing can be placed now (the engine is away); None when it can."""
        if outage is not None:
            return WaitGang(ask.attempt_id, outage)
        try:
            result = self._cluster.place(ask.attempt_id, ask.virtual_cluster, ask.demands)
        except NeverFits as exc:
            self.remove(ask.attempt_id)
            return RefuseGang(ask.attempt_id, exc.reason)
        if isinstance(result, Shortage):
            return WaitGang(ask.attempt_id, result.reason)
        try:
            allocated = self._ports.allocate_many(ask.port_asks)
        except PortError as exc:
            self._cluster.release(ask.attempt_id)
            return WaitGang(ask.attempt_id, f"waiting for ports: {exc}")
        return PlaceGang(ask.attempt_id, tuple(result.slots), tuple(allocated))

    def take_gang(self, placed: PlaceGang) -> None:
        """Take a placed attempt off the queue; called with the shared lock held, so the
        backend records it placed in the same step."""
        with self._lock:
            self._queue.remove(placed.attempt_id)

    def decide_instance(
        self, instance: I, ask: SoloAsk | str, outage: str | None = None
    ) -> InstanceDecision:
        """Place one instance to start again, alone (preferring the node it ran on, and its
        old ports), or say why it waits or never can. `ask` is a reason instead when its
        backend knows it never can on its own; `outage` as for `decide_gang`."""
        if outage is not None:
            return WaitInstance(outage)
        if isinstance(ask, str):
            self.remove_relaunch(instance)
            return DropInstance(ask)
        try:
            result = self._cluster.place_one(
                ask.attempt_id,
                ask.virtual_cluster,
                ask.position,
                ask.demand,
                prefer=ask.prefer_node,
            )
        except NeverFits as exc:  # the settings changed since the attempt was placed
            self.remove_relaunch(instance)
            return DropInstance(exc.reason)
        if isinstance(result, Shortage):
            return WaitInstance(result.reason)
        try:
            ports = self._ports_again(ask)
        except PortError as exc:
            self._cluster.release_one(ask.attempt_id, ask.position)
            return WaitInstance(f"waiting for ports: {exc}")
        return PlaceInstance(ask.attempt_id, ask.position, ask.port_owner, result, ports)

    def take_instance(self, instance: I, *, stopping: bool) -> bool:
        """Take a placed instance off the queue; called with the shared lock held, so the
        backend records it placed in the same step. False when its attempt is `stopping` or
        a stop took it off the queue meanwhile: it is not to start (it ends as stopped), and
        what was held for it goes back with `give_back`."""
        with self._lock:
            return not stopping and self.remove_relaunch(instance)

    def give_back(self, placed: PlaceInstance) -> None:
        """Release what a placed instance that is not to start holds."""
        self._ports.release(placed.port_owner)
        self._cluster.release_one(placed.attempt_id, placed.position)

    def _ports_again(self, ask: SoloAsk) -> PortsByLabel:
        """The ports the instance had, when each label's ports are a free run; else new ones."""
        if ask.same_ports is not None:
            with contextlib.suppress(PortError):
                return self._ports.allocate(ask.port_owner, ask.same_ports)
        return self._ports.allocate(ask.port_owner, ask.port_asks)
