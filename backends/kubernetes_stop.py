"""Stopping an attempt, running an ended instance again, and forgetting an attempt on
Kubernetes.
"""

from __future__ import annotations

import time

from kubernetes.client.exceptions import ApiException

from backends.base import EventKind, InstanceKey
from backends.kubernetes_api import api_message
from backends.kubernetes_events import PodEvents
from backends.kubernetes_manifests import with_owner
from backends.kubernetes_start_order import WAIT, order_key

_STOP_EXTRA_SECONDS = 15.0  # a stop waits this long past the grace period for the pods' ends


class Stopping(PodEvents):
    """Stop, relaunch and forget."""

    def _stop(self, stopped_id: str, grace: float) -> None:
        with self._lock:
            attempt = self._mark_stopping(stopped_id)
            if attempt is None:
                return
            live = attempt.live()
            never = [i for i in live if i.created_at is None]
            for instance in never:
                self._end(attempt, instance, EventKind.STOPPED, reason="stopped before it started")
            pods = [i.pod for i in live if i.created_at is not None]
        for pod in pods:
            self._delete_pod(pod, grace, attempt.namespace)
        deadline = time.monotonic() + grace + _STOP_EXTRA_SECONDS
        with self._lock:
            while attempt.live() and not self._closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 1.0))
            for instance in attempt.live():
                if not instance.finishing:
                    self._end(
                        attempt,
                        instance,
                        EventKind.STOPPED,
                        reason=f"its pod {instance.pod} did not report its end after the stop",
                    )

    def _relaunch(self, key: InstanceKey, run: int | None) -> None:
        """A new pod for the ended instance, run `run` (named and labelled with it); a run
        that was started already is not started again."""
        with self._lock:
            found = self._rerun(key, run)
            if found is None:
                return
            attempt, instance, next_one = found
            old = instance.pod
            instance.run = next_one
            instance.pod = attempt.builder.pod_name(key.role, key.index, instance.run)
            instance.ended = instance.placed = instance.started = instance.scheduled = False
            instance.finishing = False
            instance.end = instance.facts = instance.termination = None
            instance.started_at = instance.waiting_reason = None
            instance.created_at = time.monotonic()
            pod = with_owner(
                attempt.builder.pod(key.role, key.index, instance.run), attempt.service_uid
            )
            if not attempt.queued:
                # the gang formed already, and nothing would lift this one pod's gate: a run
                # again is one pod the scheduler places alone, as a relaunch is on Docker
                pod["spec"].pop("schedulingGates", None)
            order = order_key(attempt.builder, key.role, key.index)
            # its new run waits again until the server sees its dependencies hold; told even
            # when this server told it nothing (the ConfigMap may say go from before a restart)
            waits_again = bool(attempt.request.role(key.role).depends_on)
            if waits_again:
                attempt.order_said[order] = WAIT
        if waits_again:
            self._tell_start_order(attempt, {order: WAIT})
        self.logbook.forget_run(key)
        self.logbook.begin(key, instance.run)
        self._delete_pod(old, 0, attempt.namespace)
        try:
            self._create("Pod", pod)
        except ApiException as exc:
            self._end(
                attempt,
                instance,
                EventKind.START_FAILED,
                reason=f"cannot create pod {instance.pod}: {api_message(exc)}",
            )

    def _forget(self, forgotten_id: str) -> None:
        with self._lock:
            attempt = self._pop_forgotten(forgotten_id)
            if attempt is None:
                return
            self._changed.notify_all()
        for instance in attempt.instances.values():
            self.logbook.forget_run(instance.key)
        self._delete_attempt_objects(attempt)
