"""The Kubernetes backend's state and the calls every part of it makes.

The backend is one class put together from parts, one module each (launching, watching the
pods, the gang's clock, stopping, adopting after a restart); this is the part they share:
the attempts and instances as the server sees them, the lock that guards them, and the API
calls with their retries and deferred deletes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from backends.base import EventKind, InstanceEvent, InstanceKey, LaunchRequest, Placement
from backends.kubernetes_api import (
    UNREACHABLE,
    api_client,
    api_message,
    quota_not_counted,
    response_body,
)
from backends.kubernetes_log_reader import PodLogReader
from backends.kubernetes_logs import LogBook
from backends.kubernetes_manifests import AttemptBuilder
from backends.kubernetes_names import (
    MAIN_CONTAINER,
    config_map_name,
    network_policy_name,
    owner_selector,
    secret_name,
    ssh_secret_name,
)
from backends.kubernetes_pods import PodFacts, Termination
from backends.kubernetes_reach import Reachability
from backends.kubernetes_settings import KubernetesSettings, load_settings
from backends.kubernetes_start_order import order_config_map_name
from backends.kubernetes_usage import PodMetricsReader
from backends.ledger import Ledger
from backends.threaded import ThreadedBackend, attempt_id

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend
_T = TypeVar("_T")

_PARALLEL = 8
_CREATE_TRIES = 5  # a create answered 429 or 5xx is tried this many times in all


@dataclass(eq=False)
class Instance:
    key: InstanceKey
    pod: str
    run: int = 1
    created_at: float | None = None  # monotonic time its pod was created, None before
    facts: PodFacts | None = None  # the latest version of its pod
    scheduled: bool = False
    placed: bool = False  # PLACED told for the current run
    started: bool = False  # STARTED told for the current run
    started_at: datetime | None = None
    finishing: bool = False
    ended: bool = False
    end: InstanceEvent | None = None
    termination: Termination | None = None
    waiting_reason: str | None = None
    made: bool = False  # the API server took its pod's create (or the pod was seen)
    deleting_since: float | None = None  # monotonic time its pod was first seen Terminating
    pull_since: float | None = None  # monotonic time its image pull was first seen failing

    @property
    def task_attempt(self) -> int:
        """The run its events are about: a pod's run label is the job's task attempt."""
        return self.run


@dataclass(eq=False)
class Attempt:
    request: LaunchRequest
    builder: AttemptBuilder
    service_uid: str = ""
    instances: dict[tuple[str, int], Instance] = field(default_factory=dict)
    gang_complete: bool = False
    since: float = field(default_factory=time.monotonic)  # the gang timeout counts from here
    stopping: bool = False
    forgotten: bool = False
    waiting_reason: str | None = None
    unschedulable: str | None = None  # the scheduler's latest message
    queued: bool = False  # its pods are gated, waiting for room (gang_scheduler `gates`)
    demand: list[dict[str, Any]] | None = None  # its pods, as far as the room goes
    admitted_at: float | None = None  # monotonic time its gates were lifted
    # what the start-order ConfigMap says (or is being told) per waiting instance's key
    order_said: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, request: LaunchRequest, builder: AttemptBuilder, service_uid: str = "") -> Attempt:
        """The attempt `request` launches (or launched, when adopted after a restart), with an
        instance for each of its roles' pods."""
        attempt = cls(request=request, builder=builder, service_uid=service_uid)
        for role in request.roles:
            for index in range(role.instances):
                key = InstanceKey(
                    job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
                )
                attempt.instances[(role.name, index)] = Instance(
                    key=key, pod=builder.pod_name(role.name, index)
                )
        return attempt

    @property
    def id(self) -> str:
        return attempt_id(self.request.job_id, self.request.attempt)

    @property
    def namespace(self) -> str:
        """Where its objects are (its virtual cluster's, with namespace_per_virtual_cluster)."""
        return self.builder.namespace

    def live(self) -> list[Instance]:
        return [i for i in self.instances.values() if not i.ended]


class KubernetesCore(ThreadedBackend, Ledger[Attempt, Instance]):
    """The state every part of the backend reads and the calls they all make."""

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        *,
        client: k8s.ApiClient | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings or load_settings()
        self.namespace = self.settings.resolved_namespace()
        # one namespace per virtual cluster: the pods are watched in every namespace
        self.per_virtual_cluster = self.settings.namespace_per_virtual_cluster
        self.client = client or api_client(self.settings)
        self.core = k8s.CoreV1Api(self.client)
        self.networking = k8s.NetworkingV1Api(self.client)
        self.selector = owner_selector(self.settings.owner)
        self.logbook = LogBook(
            self.settings.state_dir / "logs",
            PodLogReader(self.client.configuration, self.namespace, MAIN_CONTAINER),
        )
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._attempts = {}
        self._pool = ThreadPoolExecutor(max_workers=_PARALLEL, thread_name_prefix="k8s")
        self._closed = threading.Event()
        self._listed = threading.Event()
        self._watch_response: Any = None  # the pod watch's open stream, hung up on close
        self._reach = Reachability()
        self._deferred_deletes: list[tuple[Callable[[], Any], str]] = []
        self._threads: list[threading.Thread] = []
        self._looked: tuple[str, float] = ("", 0.0)  # the queue's head and when room was read
        self._room_changed = False  # an instance of ours ended since the room was read
        self._quotas_kept: set[str] = set()  # virtual clusters whose ResourceQuota is as set
        self._metrics = PodMetricsReader(
            self.client, self.namespace, self.selector, every_namespace=self.per_virtual_cluster
        )

    def _builder(
        self,
        request: LaunchRequest,
        claims: dict[str, dict[str, str]] | None = None,
        legacy: bool = False,
        namespace: str | None = None,
    ) -> AttemptBuilder:
        """The attempt's objects, in `namespace` (an adopted attempt stays where it is), else
        in its virtual cluster's namespace or the one namespace of the jobs."""
        if namespace is None:
            namespace = (
                self.settings.namespace_for(request.virtual_cluster)
                if self.per_virtual_cluster
                else self.namespace
            )
        return AttemptBuilder(request, self.settings, namespace, claims, legacy)

    def _pod_listing(self, **kwargs: Any) -> Any:
        """List (or watch) this server's pods: in its namespace, or in every namespace with a
        namespace per virtual cluster (the raw response)."""
        kwargs.update(label_selector=self.selector, _preload_content=False)
        if self.per_virtual_cluster:
            return self.core.list_pod_for_all_namespaces(**kwargs)
        return self.core.list_namespaced_pod(self.namespace, **kwargs)

    def _create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        create: dict[str, Callable[..., Any]] = {
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Secret": self.core.create_namespaced_secret,
            "Pod": self.core.create_namespaced_pod,
            "NetworkPolicy": self.networking.create_namespaced_network_policy,
        }
        call = create[kind]
        namespace = body["metadata"]["namespace"]
        return self._retried(lambda: response_body(call(namespace, body, _preload_content=False)))

    def _retried(self, call: Callable[[], _T]) -> _T:
        """Make a call, again with back-off while the API server answers 429 (too many
        requests: after its Retry-After), a 5xx, or a quota whose usage the quota controller
        has not counted yet (403 "status unknown for quota", right after the quota is made),
        up to _CREATE_TRIES in all."""
        for attempt in range(1, _CREATE_TRIES + 1):
            try:
                return call()
            except ApiException as exc:
                status = exc.status or 0
                transient = status == 429 or status >= 500 or quota_not_counted(exc)
                if not transient or attempt == _CREATE_TRIES:
                    raise
                delay = min(0.5 * 2**attempt, 8.0)
                with contextlib.suppress(TypeError, ValueError, AttributeError, KeyError):
                    delay = max(delay, float((exc.headers or {})["Retry-After"]))
                log.info("the API server answered %s; trying again in %g s", status, delay)
                if self._closed.wait(min(delay, 30.0)):
                    raise
        raise AssertionError("unreachable")

    # --- deleting ----------------------------------------------------------------------------

    def _delete_attempt_objects(self, attempt: Attempt) -> None:
        """Everything of the attempt, at once (its owner references would take the rest with
        the Service too, but not every cluster runs the garbage collector promptly)."""
        service = attempt.builder.service
        namespace = attempt.namespace
        for instance in attempt.instances.values():
            self._delete_pod(instance.pod, 0, namespace)
        deletes: list[tuple[Callable[..., Any], str]] = [
            (self.core.delete_namespaced_config_map, config_map_name(service)),
            *(
                (self.core.delete_namespaced_config_map, c["metadata"]["name"])
                for c in attempt.builder.extra_config_maps()
            ),
            *(
                [(self.core.delete_namespaced_config_map, order_config_map_name(service))]
                if any(r.depends_on for r in attempt.request.roles)
                else []
            ),
            *(
                (self.core.delete_namespaced_secret, s["metadata"]["name"])
                for s in attempt.builder.registry_secrets()
            ),
            (self.core.delete_namespaced_service, service),
        ]
        if attempt.builder.secret_values:
            deletes.insert(1, (self.core.delete_namespaced_secret, secret_name(service)))
        if attempt.builder.ssh_values:
            deletes.insert(1, (self.core.delete_namespaced_secret, ssh_secret_name(service)))
        if self.settings.network_policy:
            deletes.insert(
                1,
                (self.networking.delete_namespaced_network_policy, network_policy_name(service)),
            )
        for delete, name in deletes:
            self._delete(partial(delete, name, namespace, _preload_content=False), name)

    def _delete_pod(self, name: str, grace: float, namespace: str) -> None:
        body = k8s.V1DeleteOptions(grace_period_seconds=int(grace))
        call = partial(
            self.core.delete_namespaced_pod, name, namespace, body=body, _preload_content=False
        )
        self._delete(call, f"pod {name}")

    def _delete(self, call: Callable[[], Any], what: str) -> None:
        """Delete something; while the API server does not answer, keep the call for its
        return (a stop or a forget made meanwhile must not leave objects behind)."""
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete %s: %s", what, api_message(exc))
        except UNREACHABLE as exc:
            log.warning(
                "cannot delete %s now (the API server does not answer: %s); "
                "deleting it when it does",
                what,
                exc,
            )
            with self._lock:
                self._deferred_deletes.append((call, what))

    def _delete_deferred(self) -> None:
        """The deletes the API server could not take while it was away."""
        with self._lock:
            calls, self._deferred_deletes = self._deferred_deletes, []
        for call, what in calls:
            self._delete(call, what)

    # --- small parts -------------------------------------------------------------------------

    def _live(self, key: InstanceKey) -> bool:
        """Whether the instance may still write to its log."""
        with self._lock:
            _, instance = self._find(key)
            if instance is None:
                return False
            return not instance.ended or self.logbook.following(key)

    def _placement(self, attempt: Attempt, instance: Instance) -> Placement:
        facts = instance.facts
        return Placement(
            node=facts.node if facts else "",
            host_ip=facts.pod_ip if facts else "",
            ports=attempt.builder.ports[(instance.key.role, instance.key.index)],
        )

    def _emit_attempt(self, attempt: Attempt, kind: EventKind, reason: str) -> None:
        request = attempt.request
        self._emit(
            InstanceEvent(job_id=request.job_id, attempt=request.attempt, kind=kind, reason=reason)
        )
