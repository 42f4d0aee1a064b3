"""Launching on Kubernetes: an attempt's objects made in the cluster (its Service first, which
owns the rest), the pods created in parallel, and each virtual cluster's ResourceQuota kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from backends.base import EventKind, LaunchRefused, LaunchRequest
from backends.kubernetes_api import UNREACHABLE, api_message, response_body
from backends.kubernetes_core import Attempt
from backends.kubernetes_events import PodEvents
from backends.kubernetes_gang import POD_GROUP_API
from backends.kubernetes_isolation import pod_security_refusal
from backends.kubernetes_manifests import AttemptObjects, with_owner
from backends.kubernetes_names import INDEX, ROLE_ANNOTATION
from backends.kubernetes_quota import QUOTA_NAME, hard_patch, quota_object

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend

_CREATE_CODES = {403: -200, 429: -120}  # PodCreationPermanentError, PodCreationTransientError


class Launching(PodEvents):
    """Creating an attempt's objects, and undoing a launch that failed half-way."""

    def _launch(self, request: LaunchRequest) -> None:
        builder = self._builder(request)  # LaunchRefused
        objects = builder.objects()
        if not self._api_answers(request):
            return
        vc = request.virtual_cluster
        if vc in self.settings.virtual_cluster_quota and vc not in self._quotas_kept:
            self._keep_quota(vc)
        attempt = Attempt.of(request, builder)
        self._register(attempt)
        if not self._create_service(attempt, objects):
            return
        if not self._create_owned(attempt, objects):
            return
        if not self._create_pods(attempt, objects):
            return
        with self._lock:
            self._changed.notify_all()  # the gang thread looks at the queue

    def _api_answers(self, request: LaunchRequest) -> bool:
        """Whether the API server answers, waiting while it does not; False once closed."""
        if self._reach.reachable:
            return True
        log.info("job %s waits for the Kubernetes API server to answer", request.job_id)
        return self._reach.wait(self._closed)

    def _register(self, attempt: Attempt) -> None:
        """Make `attempt` one of the backend's, and begin its instances' logs."""
        request = attempt.request
        with self._lock:
            if attempt.id in self._attempts:
                raise LaunchRefused(f"attempt {request.attempt} of job {request.job_id} exists")
            self._attempts[attempt.id] = attempt
        for instance in attempt.instances.values():
            self.logbook.begin(instance.key, 1)

    def _create_service(self, attempt: Attempt, objects: AttemptObjects) -> bool:
        """Create the attempt's Service, which owns the rest; False (the attempt forgotten and
        its instances ended) when it cannot be made, LaunchRefused when it never can."""
        try:
            service = self._create("Service", objects.service)
        except UNREACHABLE as exc:
            with self._lock:
                self._attempts.pop(attempt.id, None)
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot reach the Kubernetes API server: {exc}"
            )
            return False
        except ApiException as exc:
            with self._lock:
                self._attempts.pop(attempt.id, None)
            refusal = self._service_refusal(attempt, exc)
            if refusal is not None:
                raise refusal from None
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot create the Service: {api_message(exc)}"
            )
            return False
        attempt.service_uid = service["metadata"]["uid"]
        return True

    def _service_refusal(self, attempt: Attempt, exc: ApiException) -> LaunchRefused | None:
        """The refusal a failed Service creation means, when the attempt can never run."""
        if exc.status in (409, 422):
            return LaunchRefused(f"the cluster refuses the attempt: {api_message(exc)}")
        if exc.status == 404 and self.per_virtual_cluster:
            return LaunchRefused(
                f"virtual cluster {attempt.request.virtual_cluster!r} has no namespace "
                f"{attempt.builder.namespace!r} on this cluster (namespace_per_virtual_cluster: "
                "the cluster's administrator creates one per virtual cluster): "
                f"{api_message(exc)}"
            )
        return None

    def _create_owned(self, attempt: Attempt, objects: AttemptObjects) -> bool:
        """Create the objects the Service owns besides the pods; False (the launch undone and
        the instances ended) when they cannot be made, LaunchRefused when they never can."""
        try:
            for obj in _owned_objects(objects):
                self._create(obj["kind"], with_owner(obj, attempt.service_uid))
            if objects.pod_group is not None:
                self._create_pod_group(with_owner(objects.pod_group, attempt.service_uid))
        except UNREACHABLE as exc:
            self._drop(attempt)
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot reach the Kubernetes API server: {exc}"
            )
            return False
        except ApiException as exc:
            self._drop(attempt)
            if exc.status == 422:
                raise LaunchRefused(
                    f"the cluster refuses the attempt: {api_message(exc)}"
                ) from None
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot create the attempt: {api_message(exc)}"
            )
            return False
        return True

    def _create_pods(self, attempt: Attempt, objects: AttemptObjects) -> bool:
        """Create the pods in parallel; False (the launch undone and the instances ended) when
        some cannot be made, LaunchRefused when they never can."""
        pods = [with_owner(pod, attempt.service_uid) for pod in objects.pods]
        attempt.queued = self.settings.gang_scheduler == "gates"
        problems = [
            p for p in self._pool.map(lambda pod: self._create_pod(attempt, pod), pods) if p
        ]
        if not problems:
            return True
        self._drop(attempt)
        refusal = self._pods_refusal(problems)
        if refusal is not None:
            raise refusal
        status, message = problems[0]
        reason = f"cannot create the pods: {message}"
        if status == 403:
            reason += (
                " (refused by the cluster's policy, e.g. a ResourceQuota or Pod Security "
                "admission; not retried: change the job or ask the cluster's administrator)"
            )
        code = _CREATE_CODES.get(status, -120 if status >= 500 else None)
        self._end_all(attempt, EventKind.START_FAILED, reason, completion_code=code)
        return False

    def _pods_refusal(self, problems: list[tuple[int, str]]) -> LaunchRefused | None:
        """The refusal the pods' creation failures mean, when the same pods would always be
        refused."""
        refused = [p for p in problems if pod_security_refusal(*p)]
        if refused:  # the namespace's Pod Security level: the same pods would be refused
            return LaunchRefused(
                f"the cluster's Pod Security admission refuses the pods: {refused[0][1]} "
                f"(pods are made for the {self.settings.pod_security!r} profile: set "
                "pod_security to the level the jobs' namespace enforces)"
            )
        if all(status == 422 for status, _ in problems):
            return LaunchRefused(f"the cluster refuses the attempt: {problems[0][1]}")
        return None

    def _create_pod(self, attempt: Attempt, pod: dict[str, Any]) -> tuple[int, str] | None:
        if attempt.stopping:
            return None
        labels = pod["metadata"]["labels"]
        instance = attempt.instances[
            (pod["metadata"]["annotations"][ROLE_ANNOTATION], int(labels[INDEX]))
        ]
        with self._lock:
            instance.created_at = time.monotonic()
        try:
            self._create("Pod", pod)
            with self._lock:
                instance.made = True
        except ApiException as exc:
            with self._lock:
                instance.created_at = None
            return exc.status or 0, f"pod {pod['metadata']['name']}: {api_message(exc)}"
        except UNREACHABLE as exc:
            with self._lock:
                instance.created_at = None
            return 0, f"pod {pod['metadata']['name']}: cannot reach the API server: {exc}"
        return None

    def _keep_quota(self, virtual_cluster: str) -> None:
        """Create the virtual cluster's ResourceQuota, or set its limits to the configured
        capacity; a failure is logged (and tried again at its next launch)."""
        wanted = quota_object(self.settings, virtual_cluster)
        namespace = wanted["metadata"]["namespace"]
        try:
            try:
                current = response_body(
                    self.core.read_namespaced_resource_quota(
                        QUOTA_NAME, namespace, _preload_content=False
                    )
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                create: Callable[..., Any] = self.core.create_namespaced_resource_quota
                self._retried(lambda: create(namespace, wanted, _preload_content=False))
                log.info("virtual cluster %s: ResourceQuota made in %s", virtual_cluster, namespace)
            else:
                patch = hard_patch(current, wanted["spec"]["hard"])
                if patch is not None:
                    self._retried(
                        lambda: self.core.patch_namespaced_resource_quota(
                            QUOTA_NAME, namespace, patch, _preload_content=False
                        )
                    )
                    log.info(
                        "virtual cluster %s: ResourceQuota set to its capacity", virtual_cluster
                    )
        except ApiException as exc:
            log.warning(
                "virtual cluster %s: cannot keep the ResourceQuota %s in namespace %s (%s); "
                "its jobs run without it until it can be made",
                virtual_cluster,
                QUOTA_NAME,
                namespace,
                api_message(exc),
            )
            return
        except UNREACHABLE as exc:
            log.warning(
                "virtual cluster %s: cannot reach the API server for its quota (%s)",
                virtual_cluster,
                exc,
            )
            return
        with self._lock:
            self._quotas_kept.add(virtual_cluster)

    def _create_pod_group(self, body: dict[str, Any]) -> None:
        group, version = POD_GROUP_API[self.settings.gang_scheduler]
        custom = k8s.CustomObjectsApi(self.client)
        self._retried(
            lambda: custom.create_namespaced_custom_object(
                group,
                version,
                body["metadata"]["namespace"],
                "podgroups",
                body,
                _preload_content=False,
            )
        )

    def _drop(self, attempt: Attempt) -> None:
        """Remove what a launch that failed half-way created (the Service owns the rest)."""
        with self._lock:
            self._attempts.pop(attempt.id, None)
            attempt.forgotten = True
        self._delete_attempt_objects(attempt)


def _owned_objects(objects: AttemptObjects) -> list[dict[str, Any]]:
    """The objects the Service owns other than the pods and the pod group, in creation order:
    config maps, secrets, then the network policy."""
    policy = [objects.network_policy] if objects.network_policy else []
    maps = [objects.config_map, *objects.extra_config_maps]
    maps += [objects.start_order] if objects.start_order else []
    return [*maps, *objects.secrets, *policy]
