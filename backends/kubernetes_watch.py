"""The Kubernetes backend's pod watch: one thread lists this server's pods, then follows their
changes, and hands each pod version to the instance events; a pod that vanished is lost.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from backends.kubernetes_api import LIST_TIMEOUT, api_message, response_body
from backends.kubernetes_core import Attempt, Instance
from backends.kubernetes_events import PodEvents
from backends.kubernetes_names import ATTEMPT, INDEX, JOB_ID_ANNOTATION, ROLE_ANNOTATION, RUN
from backends.kubernetes_pods import PodFacts, pod_facts
from backends.threaded import attempt_id

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend

_WATCH_SECONDS = 300  # a watch is renewed from its resource version after this long


class PodWatch(PodEvents):
    """The thread that keeps every attempt in line with its pods."""

    def _watch_pods(self) -> None:
        """List the pods, then follow their changes from the listing's resource version. An
        expired version (410 Gone) is listed again at once; a listing that fails marks the API
        server unreachable and is tried again with back-off; a broken stream is listed again."""
        version: str | None = None
        while not self._closed.is_set():
            try:
                if version is None:
                    version = self._list_pods()
                    if self._reach.answered():
                        log.warning("the Kubernetes API server answers again; pods listed again")
                        self._pool.submit(self._delete_deferred)
                version = self._follow(version)
            except ApiException as exc:
                if self._closed.is_set():
                    return
                if exc.status == 410:
                    log.info("the pod watch expired (410 Gone); listing the pods again")
                elif version is None:  # the listing failed
                    self._wait_after_failure(api_message(exc))
                else:
                    log.warning("watching pods failed (%s); listing them again", api_message(exc))
                version = None
            except Exception as exc:
                if self._closed.is_set():
                    return
                if version is None:
                    self._wait_after_failure(str(exc) or type(exc).__name__)
                else:
                    log.warning("the pod watch broke (%s); listing the pods again", exc)
                version = None

    def _wait_after_failure(self, error: str) -> None:
        was_reachable = self._reach.reachable
        delay = self._reach.failed(error)
        if was_reachable:
            log.warning("the Kubernetes API server does not answer (%s); waiting", error)
        else:
            log.debug("the Kubernetes API server still does not answer (%s)", error)
        self._closed.wait(delay)

    def _follow(self, version: str) -> str | None:
        """Apply the pods' changes after `version` until the watch times out (the version to go
        on from) or the server says it expired (None: list again)."""
        response: Any = self._pod_listing(
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            watch=True,
            # a server that stops sending (not even the end of the watch) is given up on
            _request_timeout=(LIST_TIMEOUT[0], _WATCH_SECONDS + 30),
        )
        self._watch_response = response
        try:
            for line in iter_resp_lines(response):
                if self._closed.is_set():
                    return version
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("the pod watch expired (410 Gone); listing the pods again")
                        return None
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_pod(obj, deleted=kind == "DELETED")
        finally:
            self._watch_response = None
            response.release_conn()
        return version

    def _list_pods(self) -> str:
        """Bring every attempt in line with the pods as they are now; their resource version."""
        asked_at = time.monotonic()
        listing = response_body(self._pod_listing(_request_timeout=LIST_TIMEOUT))
        seen = set()
        for pod in listing.get("items") or []:
            seen.add(pod["metadata"]["name"])
            self._on_pod(pod, deleted=False, now=not self._listed.is_set())
        listed_before = self._listed.is_set()
        with self._lock:
            missing = [
                (attempt, instance)
                for attempt in self._attempts.values()
                for instance in attempt.live()
                if instance.pod not in seen and _missing(instance, asked_at, listed_before)
            ]
        for attempt, instance in missing:
            self._gone(attempt, instance)
        self._listed.set()
        return listing.get("metadata", {}).get("resourceVersion") or ""

    def _on_pod(self, pod: dict[str, Any], *, deleted: bool, now: bool = False) -> None:
        place = _pod_place(pod)
        if place is None:
            return
        with self._lock:
            found = self._instance_at(*place)
            if found is None:
                return
            attempt, instance = found
            facts = pod_facts(pod)
            _note(instance, facts)
            if not deleted:
                self._on_pod_version(attempt, instance, facts, now=now)
                return
        self._gone(attempt, instance)

    def _instance_at(
        self, wanted: str, position: tuple[str, int], run: int
    ) -> tuple[Attempt, Instance] | None:
        """The unended instance whose current run a pod is (the lock held); None when the
        pod is of another attempt, an earlier run, or an instance that ended or is ending."""
        attempt = self._attempts.get(wanted)
        instance = attempt.instances.get(position) if attempt else None
        if attempt is None or instance is None or run != instance.run:
            return None
        if instance.ended or instance.finishing:
            return None
        return attempt, instance

    def _on_pod_version(
        self, attempt: Attempt, instance: Instance, facts: PodFacts, *, now: bool
    ) -> None:
        """Act on a new version of a live pod (the lock held)."""
        if facts.start_error:
            self._fail_to_start(attempt, instance, facts.start_error)
            return
        if facts.scheduled:
            instance.scheduled = True
        if (
            facts.started_at
            and facts.terminated is None
            and not self.logbook.following(instance.key)
        ):
            # copied while it runs, whatever is told (a stop may come before the gang
            # formed); a copy cut short resumes where it stood
            self.logbook.follow(instance.key, instance.run, instance.pod, attempt.namespace)
        if attempt.gang_complete:
            self._advance(attempt, instance, now=now)
            return
        if facts.unschedulable:
            attempt.unschedulable = facts.unschedulable
        if facts.terminated is not None or facts.lost:
            # ended before its gang formed: its own end is told, not a timeout
            self._ended_early(attempt, instance, facts, now=now)
            return
        self._check_gang(attempt, now=now)


def _pod_place(pod: dict[str, Any]) -> tuple[str, tuple[str, int], int] | None:
    """The attempt id, (role, index) and run a pod's labels and annotations name; None for a
    pod that does not name them all."""
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    try:
        wanted = attempt_id(notes[JOB_ID_ANNOTATION], int(labels[ATTEMPT]))
        position = (notes[ROLE_ANNOTATION], int(labels[INDEX]))
        run = int(labels.get(RUN, "1"))
    except (KeyError, ValueError):
        return None
    return wanted, position, run


def _note(instance: Instance, facts: PodFacts) -> None:
    """Keep what a pod's version tells about its instance: its facts, that it was made, and
    since when it is being deleted or its image pull waits."""
    instance.facts = facts
    instance.made = True
    if instance.created_at is None:
        instance.created_at = time.monotonic()
    if facts.deleting and instance.deleting_since is None:
        instance.deleting_since = time.monotonic()
    if facts.pull_waiting is None:
        instance.pull_since = None
    elif instance.pull_since is None:
        instance.pull_since = time.monotonic()


def _missing(instance: Instance, asked_at: float, listed_before: bool) -> bool:
    """Whether an instance absent from a listing has lost its pod: one created before the
    listing was asked for (or, at the first listing, one adopted without a pod)."""
    if instance.created_at is None:
        return not listed_before
    return instance.created_at < asked_at
