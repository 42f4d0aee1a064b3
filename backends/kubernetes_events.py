"""The instance events of the Kubernetes backend: what a pod's facts say happened, told once.

The pod watch, the gang's clock and a stop all end instances; they do it through these
methods, so an instance ends once, its gang is judged again, and the start order is told
to the instances that wait.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from backends.base import EventKind, oom_reason
from backends.kubernetes_api import UNREACHABLE
from backends.kubernetes_core import Attempt, Instance, KubernetesCore
from backends.kubernetes_pods import PodFacts, Termination
from backends.kubernetes_start_order import (
    GO,
    NEVER,
    WAIT,
    order_config_map_name,
    order_key,
    verdict,
)
from backends.start_gate import DEPENDENCY_FAILED, PeerState, waits_for

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend


class PodEvents(KubernetesCore):
    """Instances placed, started and ended from what their pods show."""

    def _finishing(
        self, attempt: Attempt, instance: Instance, terminated: Termination, *, now: bool
    ) -> None:
        """The instance's container terminated: finish it here or on the pool (lock held)."""
        instance.termination = terminated
        instance.finishing = True
        if now:
            self._finish(attempt, instance, terminated)
        else:
            self._pool.submit(self._finish, attempt, instance, terminated)

    def _ended_early(
        self, attempt: Attempt, instance: Instance, facts: PodFacts, *, now: bool
    ) -> None:
        """The pod ended before every pod of its attempt was scheduled (lock held)."""
        if facts.terminated is not None:
            self._finishing(attempt, instance, facts.terminated, now=now)
        else:
            reason = facts.disruption or facts.lost
            self._end(attempt, instance, EventKind.LOST, reason=reason, completion_code=facts.code)

    def _check_gang(self, attempt: Attempt, *, now: bool = False) -> None:
        """PLACED for every instance once all pods are scheduled; WAITING until then."""
        live = attempt.live()
        pending = [i for i in live if not i.scheduled]
        if pending:
            if attempt.unschedulable:
                reason = (
                    f"waiting for the cluster to schedule {len(pending)} of "
                    f"{len(attempt.instances)} pod(s): {attempt.unschedulable}"
                )
                if reason != attempt.waiting_reason:
                    attempt.waiting_reason = reason
                    self._emit_attempt(attempt, EventKind.WAITING, reason)
            return
        attempt.gang_complete = True
        attempt.waiting_reason = None
        attempt.queued = False
        attempt.admitted_at = None
        for instance in live:
            self._advance(attempt, instance, now=now)

    def _advance(self, attempt: Attempt, instance: Instance, *, now: bool = False) -> None:
        """Tell what the instance's pod shows beyond what was told (the lock is held)."""
        facts = instance.facts
        if facts is None:
            return
        if not facts.scheduled:
            if facts.unschedulable and facts.unschedulable != instance.waiting_reason:
                instance.waiting_reason = facts.unschedulable
                self._emit(
                    self._event(
                        instance, EventKind.WAITING, reason=f"waiting: {facts.unschedulable}"
                    )
                )
            return
        if not instance.placed:
            instance.placed = True
            request = attempt.request
            # what it waits for before its commands start (start order), as on the simulator
            waits = waits_for(request.role(instance.key.role), {r.name: r for r in request.roles})
            self._emit(
                self._event(
                    instance,
                    EventKind.PLACED,
                    placement=self._placement(attempt, instance),
                    reason=waits,
                )
            )
        if facts.started_at and not instance.started:
            instance.started = True
            instance.started_at = facts.started_at
            self._emit(
                self._event(
                    instance,
                    EventKind.STARTED,
                    placement=self._placement(attempt, instance),
                    at=facts.started_at,
                )
            )
        if facts.terminated is not None:
            self._finishing(attempt, instance, facts.terminated, now=now)
        elif facts.lost:
            self._end(
                attempt,
                instance,
                EventKind.LOST,
                reason=facts.disruption or facts.lost,
                completion_code=facts.code,
            )
        self._judge_start_order(attempt)

    def _finish(self, attempt: Attempt, instance: Instance, ended: Termination) -> None:
        """The main container ended: copy its whole log, then tell how it ended."""
        key, run = instance.key, instance.run
        if not self.logbook.settled(key, run):
            self.logbook.settle(key, run, instance.pod, attempt.namespace)
        memory = attempt.request.role(key.role).resources.memory_mb
        reason = oom_reason(memory) if ended.oom_killed else None
        facts = instance.facts
        # what Kubernetes did decides, unless the command had succeeded or ran out of memory
        disrupted = facts is not None and not ended.oom_killed and ended.exit_code != 0
        code = facts.code if disrupted and facts is not None else None
        if code is not None and facts is not None:
            reason = facts.disruption or facts.lost or reason
        with self._lock:
            if instance.ended or instance.run != run:
                return
            instance.finishing = False
            kind = EventKind.STOPPED if attempt.stopping else EventKind.EXITED
            self._end(
                attempt,
                instance,
                kind,
                exit_code=ended.exit_code,
                oom_killed=ended.oom_killed,
                reason=reason,
                at=ended.finished_at,
                completion_code=code,
            )

    def _fail_to_start(
        self, attempt: Attempt, instance: Instance, reason: str, code: int | None = None
    ) -> None:
        """The pod can never run its command: end the instance and take the pod away."""
        kind = EventKind.STOPPED if attempt.stopping else EventKind.START_FAILED
        if code is None and instance.facts is not None:
            code = instance.facts.code
        self._end(attempt, instance, kind, reason=reason, completion_code=code)
        self._pool.submit(self._delete_pod, instance.pod, 0, attempt.namespace)

    def _gone(self, attempt: Attempt, instance: Instance) -> None:
        """The instance's pod vanished (deleted, or missing from a listing)."""
        with self._lock:
            if instance.ended or instance.finishing:
                return
            if attempt.stopping or attempt.forgotten:
                facts = instance.facts
                ended = instance.termination or (facts.terminated if facts else None)
                reason = None if instance.started else "stopped before it started"
                self._end(
                    attempt,
                    instance,
                    EventKind.STOPPED,
                    exit_code=ended.exit_code if ended else None,
                    reason=reason,
                )
            else:
                facts = instance.facts
                why = f" ({facts.disruption})" if facts and facts.disruption else ""
                self._end(
                    attempt,
                    instance,
                    EventKind.LOST,
                    reason=f"its pod {instance.pod} is gone{why}",
                    completion_code=facts.code if facts else None,
                )

    def _end(self, attempt: Attempt, instance: Instance, kind: EventKind, **fields: Any) -> None:
        with self._lock:
            if not self._mark_ended(instance):
                return
            instance.finishing = False
            event = self._event(
                instance, kind, placement=self._placement(attempt, instance), **fields
            )
            instance.end = event
            self._emit(event)
            self._room_changed = True
            if not attempt.gang_complete and not attempt.stopping and attempt.live():
                self._check_gang(attempt)
            self._judge_start_order(attempt)
            self._changed.notify_all()

    # --- start order -------------------------------------------------------------------------

    def _judge_start_order(self, attempt: Attempt) -> None:
        """Tell each waiting instance (through the start-order ConfigMap) that what its role
        waits for holds, or end it once that can never hold (the lock is held)."""
        request = attempt.request
        if attempt.stopping or attempt.forgotten or not any(r.depends_on for r in request.roles):
            return
        peers = {
            role.name: [_peer(attempt.instances[(role.name, i)]) for i in range(role.instances)]
            for role in request.roles
        }
        told: dict[str, str] = {}
        never: list[tuple[Instance, str]] = []
        for role in request.roles:
            if not role.depends_on:
                continue
            value, why = verdict(role, request, peers)
            for index in range(role.instances):
                instance = attempt.instances[(role.name, index)]
                if instance.ended or instance.finishing or instance.started:
                    continue  # a started instance is never held back again
                if value == NEVER:
                    never.append((instance, why or ""))
                    continue
                key = order_key(attempt.builder, role.name, index)
                # a go once told is not taken back (its pod may be on its way): only its
                # instance's next run waits again (_relaunch)
                if value == GO and attempt.order_said.get(key, WAIT) != GO:
                    attempt.order_said[key] = told[key] = GO
        if told:
            self._pool.submit(self._tell_start_order, attempt, told)
        for instance, why in never:
            self._fail_to_start(attempt, instance, why, DEPENDENCY_FAILED)

    def _tell_start_order(self, attempt: Attempt, told: dict[str, str]) -> None:
        """Write what waiting instances read into the attempt's start-order ConfigMap."""
        name = order_config_map_name(attempt.builder.service)
        try:
            self._retried(
                lambda: self.core.patch_namespaced_config_map(
                    name, self.namespace, {"data": told}, _preload_content=False
                )
            )
        except (ApiException, *UNREACHABLE) as exc:
            log.warning("cannot tell %s's waiting instances what holds: %s", attempt.id, exc)
            with self._lock:  # told again on the next change of a pod of the attempt
                for key in told:
                    attempt.order_said.pop(key, None)

    def _end_all(self, attempt: Attempt, kind: EventKind, reason: str, **fields: Any) -> None:
        for instance in list(attempt.instances.values()):
            self._end(attempt, instance, kind, reason=reason, **fields)


def _peer(instance: Instance) -> PeerState:
    """What a depended-on instance reached, from its current run's pod and end."""
    facts = instance.facts
    ended = instance.ended or instance.finishing
    code = None
    if instance.end is not None:
        code = instance.end.exit_code
    elif instance.termination is not None:
        code = instance.termination.exit_code
    return PeerState(
        running=instance.started or (facts is not None and facts.started_at is not None),
        ready=not ended and facts is not None and facts.ready,
        ended=ended,
        exit_code=code,
    )
