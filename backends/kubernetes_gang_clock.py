"""The Kubernetes backend's gang thread: what happens with time rather than with a pod's change.

It admits queued gangs when the cluster has room (gang_scheduler `gates`), takes back those
not bound in time, fails gangs that waited past their timeout, force-deletes pods stuck
Terminating and fails image pulls past their deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kubernetes.client.exceptions import ApiException

from backends.base import EventKind
from backends.kubernetes_api import LIST_TIMEOUT, UNREACHABLE, api_message, response_body
from backends.kubernetes_core import Attempt, Instance
from backends.kubernetes_events import PodEvents
from backends.kubernetes_gang import GATE, ClusterView
from backends.kubernetes_manifests import with_owner
from backends.kubernetes_pods import IMAGE_NOT_PULLED, NODE_LOST

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend

_TERMINATING_SLACK = 5.0  # seconds past a deletion's grace period before it is forced
_PAGE = 500  # items per page of a cluster-wide listing
_LOOK_EVERY = 10.0  # seconds between two reads of the cluster's room while nothing of ours changed
GANG_TIMEOUT = 251  # OpenPAI's JobGangAllocationTimeout


class GangClock(PodEvents):
    """The gang thread's rounds."""

    def _keep_time(self) -> None:
        """The gang thread: admits queued attempts, takes back those not bound in time, fails
        those that waited too long, ends pods stuck Terminating and image pulls past their
        deadline, and tells waiting instances again what a failed write did not."""
        limit = self.settings.gang_timeout_seconds
        tick = min(1.0, limit / 4) if limit else 1.0
        while not self._closed.wait(tick):
            if not self._reach.reachable:
                # the pods' facts are unknown meanwhile: the clock stops for every gang
                with self._lock:
                    for attempt in self._attempts.values():
                        attempt.since += tick
                continue
            try:
                self._look_after_pods()
                self._admit()
                with self._lock:  # a start-order verdict that could not be written is retried
                    for attempt in list(self._attempts.values()):
                        if attempt.gang_complete:
                            self._judge_start_order(attempt)
            except Exception as exc:  # the clock goes on; the next tick tries again
                log.warning("the gang thread could not do its round: %s", exc)
            if not limit:
                continue
            with self._lock:
                late = [
                    a
                    for a in self._attempts.values()
                    if not a.gang_complete
                    and not a.stopping
                    and a.live()
                    and time.monotonic() - a.since > limit
                ]
            for attempt in late:
                self._gang_timed_out(attempt, limit)

    def _look_after_pods(self) -> None:
        """Pods left Terminating past their grace period are force-deleted (their kubelet is
        gone: nothing else would ever end them) and their instances are lost with their node;
        image pulls failing past `image_pull_deadline_seconds` fail their instances."""
        clock = time.monotonic()
        stuck: list[tuple[Attempt, Instance, str]] = []
        with self._lock:
            for attempt in list(self._attempts.values()):
                for instance in attempt.instances.values():
                    facts = instance.facts
                    if facts is None or instance.deleting_since is None:
                        continue
                    grace = facts.deletion_grace if facts.deletion_grace is not None else 30
                    if clock - instance.deleting_since > grace + _TERMINATING_SLACK:
                        instance.deleting_since = None  # forced once
                        stuck.append((attempt, instance, instance.pod))
                        if not instance.ended:
                            where = f" on node {facts.node}" if facts.node else ""
                            why = f" ({facts.disruption})" if facts.disruption else ""
                            reason = (
                                f"its pod {instance.pod} stayed Terminating{where} past its "
                                f"grace period of {grace} s{why}: its node does not answer; "
                                "the pod was force-deleted"
                            )
                            kind = EventKind.STOPPED if attempt.stopping else EventKind.LOST
                            self._end(
                                attempt, instance, kind, reason=reason, completion_code=NODE_LOST
                            )
            deadline = self.settings.image_pull_deadline_seconds
            pulls = [
                (attempt, instance)
                for attempt in self._attempts.values()
                for instance in attempt.live()
                if instance.pull_since is not None
                and instance.facts is not None
                and instance.facts.pull_waiting
                and clock - instance.pull_since > deadline
            ]
            for attempt, instance in pulls:
                assert instance.facts is not None and instance.facts.pull_waiting
                reason = f"{instance.facts.pull_waiting} (still failing after {deadline:g} s)"
                self._fail_to_start(attempt, instance, reason, IMAGE_NOT_PULLED)
        for attempt, _, pod in stuck:
            self._delete_pod(pod, 0, attempt.namespace)

    # --- admitting gangs (gang_scheduler `gates`) --------------------------------------------

    def _admit(self) -> None:
        """Lift the gates of the oldest queued attempt when the whole of it fits; one attempt
        at a time, so two gangs never hold halves of the same room. An admitted attempt whose
        pods are not all bound within `gang_bind_seconds` is taken back and queued again."""
        admitted, oldest = self._admission()
        if admitted is not None:
            assert admitted.admitted_at is not None
            if time.monotonic() - admitted.admitted_at > self.settings.gang_bind_seconds:
                self._take_back(admitted)
            return
        if oldest is None:
            return
        pods = self._demand_worth_a_look(oldest)
        if pods is None:
            return
        view = self._cluster_view(oldest)
        if view is None:
            return
        fits, why = view.fits(pods)
        if not fits:
            self._tell_waiting(oldest, f"waiting for room in the cluster: {why}")
            return
        self._lift_gates(oldest)

    def _admission(self) -> tuple[Attempt | None, Attempt | None]:
        """The attempt admitted but not yet bound whole, and the oldest queued attempt whose
        pods are all made (None for either when there is none)."""
        with self._lock:
            active = [a for a in self._attempts.values() if a.live() and not a.stopping]
            admitted = [a for a in active if a.admitted_at is not None and not a.gang_complete]
            queue = sorted(
                (
                    a
                    for a in active
                    if a.queued and a.admitted_at is None and all(i.made for i in a.live())
                ),
                key=lambda a: a.since,
            )
        return (admitted[0] if admitted else None), (queue[0] if queue else None)

    def _demand_worth_a_look(self, attempt: Attempt) -> list[dict[str, Any]] | None:
        """The pods `attempt` needs room for, when the cluster is worth reading for it now;
        None while it was looked at lately and nothing of ours freed room since."""
        with self._lock:
            head, since = self._looked
            if (
                head == attempt.id
                and not self._room_changed
                and time.monotonic() - since < _LOOK_EVERY
            ):
                return None  # nothing of ours freed room: the cluster is read again later
            self._looked = (attempt.id, time.monotonic())
            self._room_changed = False
            if attempt.demand is None:  # the barrier's requests count too
                attempt.demand = [
                    attempt.builder.pod(i.key.role, i.key.index) for i in attempt.live()
                ]
            return attempt.demand

    def _cluster_view(self, attempt: Attempt) -> ClusterView | None:
        """The cluster's free room; None (the waiting attempt told why) when it cannot be
        listed."""
        try:
            return ClusterView.of(
                self._list_all(self.core.list_node),
                self._list_all(self.core.list_pod_for_all_namespaces),
                self.settings.node_selector,
            )
        except ApiException as exc:
            why = (
                f"cannot see the cluster's free room ({api_message(exc)}); the server needs "
                "to list and watch nodes and pods in every namespace (the ClusterRole "
                "paigraph-gang in deploy/kubernetes)"
            )
            self._tell_waiting(attempt, why)
            return None

    def _lift_gates(self, attempt: Attempt) -> None:
        """Admit `attempt`: the gates of its live pods are lifted, unless it stops meanwhile."""
        with self._lock:
            if attempt.stopping or attempt.forgotten:
                return
            attempt.admitted_at = time.monotonic()
            names = [i.pod for i in attempt.live()]
        log.info(
            "the cluster has room for attempt %s: its %d pod(s) ungated", attempt.id, len(names)
        )
        for name in names:
            self._ungate(name, attempt.namespace)

    def _ungate(self, pod: str, namespace: str) -> None:
        patch = [{"op": "remove", "path": "/spec/schedulingGates"}]
        try:
            self._retried(
                lambda: self.core.patch_namespaced_pod(
                    pod, namespace, patch, _preload_content=False
                )
            )
        except ApiException as exc:  # gone meanwhile (404), or ungated already (422)
            if exc.status not in (404, 422):
                log.warning("cannot lift the gate %s of pod %s: %s", GATE, pod, api_message(exc))

    def _take_back(self, attempt: Attempt) -> None:
        """The attempt was not bound whole in time (the view was stale, or another scheduler
        took the room): every pod goes, and new gated ones queue again, so no half of a gang
        keeps holding resources."""
        limit = self.settings.gang_bind_seconds
        with self._lock:
            if attempt.stopping or attempt.forgotten or attempt.gang_complete:
                return
            bound = sum(i.scheduled for i in attempt.instances.values())
            old, fresh = [], []
            for instance in attempt.live():
                old.append(instance.pod)
                instance.run += 1
                instance.pod = attempt.builder.pod_name(
                    instance.key.role, instance.key.index, instance.run
                )
                instance.scheduled = False
                instance.facts = None
                instance.made = False
                instance.created_at = time.monotonic()
                fresh.append(
                    (
                        instance,
                        with_owner(
                            attempt.builder.pod(
                                instance.key.role, instance.key.index, instance.run
                            ),
                            attempt.service_uid,
                        ),
                    )
                )
            attempt.admitted_at = None
            attempt.queued = True
            attempt.unschedulable = None
            self._room_changed = True  # its bound pods go: look again at once
            reason = (
                f"only {bound} of {len(attempt.instances)} pod(s) were bound within {limit:g} s "
                "of the room being found; all taken back and queued again"
            )
            attempt.waiting_reason = reason
            self._emit_attempt(attempt, EventKind.WAITING, reason)
        log.warning("attempt %s: %s", attempt.id, reason)
        for name in old:
            self._delete_pod(name, 0, attempt.namespace)
        for instance, pod in fresh:
            self.logbook.forget_run(instance.key)
            self.logbook.begin(instance.key, instance.run)
            try:
                self._create("Pod", pod)
                with self._lock:
                    instance.made = True
            except (ApiException, *UNREACHABLE) as exc:
                message = api_message(exc) if isinstance(exc, ApiException) else str(exc)
                self._end(
                    attempt,
                    instance,
                    EventKind.START_FAILED,
                    reason=f"cannot create pod {instance.pod} again: {message}",
                    completion_code=-120,
                )

    def _tell_waiting(self, attempt: Attempt, reason: str) -> None:
        with self._lock:
            if reason != attempt.waiting_reason and not attempt.gang_complete:
                attempt.waiting_reason = reason
                self._emit_attempt(attempt, EventKind.WAITING, reason)

    def _list_all(self, call: Callable[..., Any]) -> list[dict[str, Any]]:
        """Every item of a listing, page by page (`limit` and `continue`)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = response_body(
                self._retried(partial(call, **kwargs, _request_timeout=LIST_TIMEOUT))
            )
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _gang_timed_out(self, attempt: Attempt, limit: float) -> None:
        with self._lock:
            pending = [i for i in attempt.live() if not i.scheduled]
            total = len(attempt.instances)
        why = (
            attempt.unschedulable
            or attempt.waiting_reason
            or self._last_warning([i.pod for i in pending], attempt.namespace)
        )
        reason = (
            f"not every pod of the attempt was scheduled within {limit:g} s "
            f"({total - len(pending)} of {total} were)" + (f": {why}" if why else "")
        )
        with self._lock:
            if attempt.gang_complete:
                return
            attempt.queued = False
            for instance in attempt.live():
                if instance.finishing:  # ended by itself: told with its own exit code
                    continue
                self._end(
                    attempt,
                    instance,
                    EventKind.START_FAILED,
                    reason=reason,
                    completion_code=GANG_TIMEOUT,
                )
        for instance in attempt.instances.values():
            self._pool.submit(self._delete_pod, instance.pod, 0, attempt.namespace)

    def _last_warning(self, pods: list[str], namespace: str) -> str | None:
        """The latest warning event of these pods (why they are not scheduled), if any."""
        for pod in pods[:3]:
            try:
                response = self.core.list_namespaced_event(
                    namespace,
                    field_selector=f"involvedObject.name={pod}",
                    _preload_content=False,
                )
            except Exception as exc:  # a reason is extra: the wait goes on without it
                log.info("cannot read the events of pod %s (%s); its reason says less", pod, exc)
                continue
            warnings = [
                e for e in response_body(response).get("items") or [] if e.get("type") == "Warning"
            ]
            if warnings:
                message = warnings[-1].get("message")
                return message if isinstance(message, str) else None
        return None
