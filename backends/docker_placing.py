"""Carrying out the scheduler's decisions: the backend asks simulator/scheduler.py about each
queued attempt and instance in turn, and starts, tells waiting, or ends what it decided.
"""

from __future__ import annotations

import logging

from backends.base import EventKind
from backends.docker_attempts import (
    Attempt,
    Instance,
    demand,
    gang_order,
    gang_position,
    port_asks,
    same_ports,
)
from backends.docker_relaunch import Relaunching
from simulator.scheduler import DropInstance, GangAsk, RefuseGang, SoloAsk, WaitGang, WaitInstance

log = logging.getLogger(__name__)


class Placing(Relaunching):
    """Asking the scheduler what to place and carrying out its decisions."""

    def _schedule(self) -> None:
        """Place everything queued that fits now, in the scheduler's order, and carry out
        each of its decisions; again while anything was placed."""
        scheduler = self._scheduler
        with scheduler.round():
            while True:
                relaunches, queued = scheduler.turns()
                placed_any = False
                for instance in relaunches:
                    placed_any |= self._place_relaunch(instance)
                for queued_id in queued:
                    placed_any |= self._place_queued(queued_id)
                if not placed_any:
                    return

    def _place_queued(self, queued_id: str) -> bool:
        """Ask the scheduler about one queued attempt and carry out its decision; whether it
        was placed."""
        attempt = self._attempts.get(queued_id)
        if attempt is None or attempt.stopping:
            return False
        outage = self._outage()
        # not checked yet after `_images_ready`: the engine stopped answering meanwhile
        if outage is None and not (self._images_ready(attempt) and attempt.images_checked):
            return False
        decision = self._scheduler.decide_gang(self._gang_ask(attempt), outage)
        if isinstance(decision, WaitGang):
            self._wait(attempt, decision.reason)
            return False
        if isinstance(decision, RefuseGang):
            self._end_all(attempt, EventKind.START_FAILED, decision.reason)
            return False
        with self._lock:
            self._scheduler.take_gang(decision)
            attempt.placed = True
            attempt.waiting_reason = None
        order = gang_order(attempt.request)
        slots = {(role.name, index): decision.slots[n] for n, (role, index) in enumerate(order)}
        ports = {(role.name, index): decision.ports[n] for n, (role, index) in enumerate(order)}
        self._background(self._start_attempt, attempt, slots, ports)
        return True

    def _gang_ask(self, attempt: Attempt) -> GangAsk:
        order = gang_order(attempt.request)
        return GangAsk(
            attempt_id=attempt.id,
            virtual_cluster=attempt.request.virtual_cluster,
            demands=[demand(role) for role, _ in order],
            port_asks=[
                (attempt.instances[(role.name, index)].port_owner, port_asks(role, index))
                for role, index in order
            ],
        )

    def _place_relaunch(self, instance: Instance) -> bool:
        """Ask the scheduler about one instance waiting to start again and carry out its
        decision; whether it was placed."""
        with self._lock:
            attempt = self._attempts.get(instance.attempt_id)
            if attempt is None or attempt.stopping or instance.ended:
                self._scheduler.remove_relaunch(instance)  # it no longer waits
                return False
        ask = self._solo_ask(attempt, instance)
        decision = self._scheduler.decide_instance(instance, ask, self._outage())
        if isinstance(decision, WaitInstance):
            self._wait_instance(instance, decision.reason)
            return False
        if isinstance(decision, DropInstance):
            self._end(attempt, instance, EventKind.START_FAILED, reason=decision.reason)
            self._cleanup_if_done(attempt)
            return False
        with self._lock:
            taken = self._scheduler.take_instance(instance, stopping=attempt.stopping)
            if taken:
                instance.waiting_reason = None
        if not taken:  # a stop took it off the queue meanwhile; it ends as stopped
            self._scheduler.give_back(decision)
            return False
        self._background(self._start_relaunch, attempt, instance, decision.placed, decision.ports)
        return True

    def _solo_ask(self, attempt: Attempt, instance: Instance) -> SoloAsk | str:
        """What starting the instance again asks for, or why it never can on its own."""
        if any(i.placement is None for i in attempt.instances.values()):
            return (
                "cannot run on its own: its attempt was never placed, so its peers have no "
                "addresses; launch the attempt again instead"
            )
        previous = instance.placement
        assert previous is not None
        request, key = attempt.request, instance.key
        role = request.role(key.role)
        asks = port_asks(role, key.index)
        return SoloAsk(
            attempt_id=attempt.id,
            virtual_cluster=request.virtual_cluster,
            position=gang_position(request, key),
            demand=demand(role),
            prefer_node=previous.node,
            port_owner=instance.port_owner,
            port_asks=asks,
            same_ports=same_ports(asks, previous),
        )
