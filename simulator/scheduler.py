"""The simulated cluster's queue: attempts waiting for capacity and instances to start again.

Attempts are placed in arrival order, each all at once or not at all (gang placement): its
resources from the cluster, then its ports. Instances to start again on their own (a task
retry without gang allocation) come first: their attempts already run, and a peer waiting for
them holds resources that a new attempt would only wait for as well.

The scheduler knows nothing of containers or job requests. What an attempt or an instance is,
what it asks for, and what placing it leads to (starting its containers) are left to the
backend through `Placer`; the scheduler only decides when something fits and in which order.
It shares the backend's lock, so a queue change and the backend's own bookkeeping of the same
attempt happen as one step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from simulator.cluster import Cluster, Demand, NeverFits, Placed, Shortage, Slot
from simulator.ports import PortAllocator, PortAsk, PortError

A = TypeVar("A")  # the backend's attempt
I = TypeVar("I")  # the backend's instance  # noqa: E741
I_in = TypeVar("I_in", contravariant=True)  # the same, as the placer takes it

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


class Placer(Protocol[A, I_in]):
    """What the scheduler asks of the backend whose attempts and instances it places.

    `placed` and `relaunch_placed` are called with the shared lock held, so the backend's
    record of the attempt changes together with the queue."""

    def queued_attempt(self, attempt_id: str) -> A | None:
        """The queued attempt, or None when it was forgotten or is being stopped."""
        ...

    def outage(self) -> str | None:
        """Why nothing can be placed now (the engine is away); None when it can."""
        ...

    def ready(self, attempt: A) -> bool:
        """Whether the attempt may be placed now (its images are here)."""
        ...

    def gang_ask(self, attempt: A) -> GangAsk: ...

    def wait(self, attempt: A, reason: str) -> None:
        """The attempt does not fit now: tell why."""
        ...

    def never_fits(self, attempt: A, reason: str) -> None:
        """The attempt can never be placed: end it."""
        ...

    def placed(self, attempt: A) -> None: ...

    def start(self, attempt: A, slots: Sequence[Slot], ports: Sequence[PortsByLabel]) -> None:
        """Start the placed attempt (in the background): slots and ports in the gang's order."""
        ...

    def relaunch_attempt(self, instance: I_in) -> A | None:
        """The attempt of an instance waiting to start again; None when the instance no longer
        waits (its attempt forgotten or being stopped, or the instance ended meanwhile)."""
        ...

    def solo_ask(self, attempt: A, instance: I_in) -> SoloAsk | str:
        """What starting the instance again asks for, or why it never can on its own."""
        ...

    def stopping(self, attempt: A) -> bool: ...

    def wait_instance(self, instance: I_in, reason: str) -> None:
        """The instance does not fit now: tell why."""
        ...

    def drop_relaunch(self, attempt: A, instance: I_in, reason: str) -> None:
        """The instance can never start again on its own: end it."""
        ...

    def relaunch_placed(self, instance: I_in) -> None: ...

    def start_relaunch(
        self, attempt: A, instance: I_in, placed: Placed, ports: PortsByLabel
    ) -> None:
        """Start the placed instance again (in the background)."""
        ...


class Scheduler(Generic[A, I]):
    """The queue of attempts (by id) and of instances to start again, and their placement."""

    def __init__(
        self,
        cluster: Cluster,
        ports: PortAllocator,
        placer: Placer[A, I],
        lock: threading.RLock,
    ) -> None:
        self._cluster = cluster
        self._ports = ports
        self._placer = placer
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

    def remove_relaunch(self, instance: I) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._relaunches.remove(instance)

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

    def schedule(self) -> None:
        """Place everything queued that fits now: instances to start again first, then
        attempts in arrival order; again while anything was placed."""
        with self._scheduling:
            while True:
                placed_any = False
                with self._lock:
                    relaunches = list(self._relaunches)
                    queued = list(self._queue)
                for instance in relaunches:
                    if self._try_relaunch(instance):
                        placed_any = True
                for queued_id in queued:
                    attempt = self._placer.queued_attempt(queued_id)
                    if attempt is None:
                        continue
                    if self._try_place(attempt):
                        placed_any = True
                if not placed_any:
                    return

    def _try_place(self, attempt: A) -> bool:
        placer = self._placer
        outage = placer.outage()
        if outage is not None:
            placer.wait(attempt, outage)
            return False
        if not placer.ready(attempt):
            return False
        ask = placer.gang_ask(attempt)
        try:
            result = self._cluster.place(ask.attempt_id, ask.virtual_cluster, ask.demands)
        except NeverFits as exc:
            with self._lock:
                self._queue.remove(ask.attempt_id)
            placer.never_fits(attempt, exc.reason)
            return False
        if isinstance(result, Shortage):
            placer.wait(attempt, result.reason)
            return False
        try:
            allocated = self._ports.allocate_many(ask.port_asks)
        except PortError as exc:
            self._cluster.release(ask.attempt_id)
            placer.wait(attempt, f"waiting for ports: {exc}")
            return False
        with self._lock:
            self._queue.remove(ask.attempt_id)
            placer.placed(attempt)
        placer.start(attempt, result.slots, allocated)
        return True

    def _try_relaunch(self, instance: I) -> bool:
        """Place one instance to start again, alone; False while it does not fit."""
        placer = self._placer
        with self._lock:
            attempt = placer.relaunch_attempt(instance)
            if attempt is None:
                with contextlib.suppress(ValueError):
                    self._relaunches.remove(instance)
                return False
        outage = placer.outage()
        if outage is not None:
            placer.wait_instance(instance, outage)
            return False
        ask = placer.solo_ask(attempt, instance)
        if isinstance(ask, str):
            self.remove_relaunch(instance)
            placer.drop_relaunch(attempt, instance, ask)
            return False
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
            placer.drop_relaunch(attempt, instance, exc.reason)
            return False
        if isinstance(result, Shortage):
            placer.wait_instance(instance, result.reason)
            return False
        try:
            ports = self._ports_again(ask)
        except PortError as exc:
            self._cluster.release_one(ask.attempt_id, ask.position)
            placer.wait_instance(instance, f"waiting for ports: {exc}")
            return False
        with self._lock:
            stopped = placer.stopping(attempt) or instance not in self._relaunches
            if not stopped:
                self._relaunches.remove(instance)
                placer.relaunch_placed(instance)
        if stopped:  # a stop took it off the queue meanwhile; it ends as stopped
            self._ports.release(ask.port_owner)
            self._cluster.release_one(ask.attempt_id, ask.position)
            return False
        placer.start_relaunch(attempt, instance, result, ports)
        return True

    def _ports_again(self, ask: SoloAsk) -> PortsByLabel:
        """The ports the instance had, when each label's ports are a free run; else new ones."""
        if ask.same_ports is not None:
            with contextlib.suppress(PortError):
                return self._ports.allocate(ask.port_owner, ask.same_ports)
        return self._ports.allocate(ask.port_owner, ask.port_asks)
