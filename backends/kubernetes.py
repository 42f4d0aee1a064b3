"""The Backend on a Kubernetes cluster: one pod per task instance, Kubernetes does the placing.

A launch creates the attempt's objects (`kubernetes_manifests`: a headless Service that owns a
ConfigMap, Secrets and one Pod per instance). One thread watches the pods of this server (a
list, then a watch from its resource version, listed again when the watch expires) and turns
each pod version into facts (`kubernetes_pods`), and facts into InstanceEvents:

- gang (`kubernetes_gang`): by default pods are created gated and the attempt is queued; the
  gang thread lifts the gates of one attempt at a time when the cluster has room for all of
  it, and takes back and queues again an attempt not bound within `gang_bind_seconds`.
  PLACED is told for the instances only once every pod of the attempt is scheduled; until
  then the attempt is WAITING with the reason, and after `gang_timeout_seconds` its waiting
  instances fail with OpenPAI's JobGangAllocationTimeout (251), those already ended keep
  their own end;
- STARTED when the main container runs, EXITED with its exit code (OOM-killed or not) when it
  ends, START_FAILED when it can never start (image pull errors, an init container that could
  not fetch the prerequisites or found a host port in use; image pulls the kubelet retries are
  waited out until `image_pull_deadline_seconds`), LOST when the pod vanished or was evicted
  without its command ending, STOPPED for whatever ends after a stop. What Kubernetes did to
  a pod (evicted, preempted, its node lost: the DisruptionTarget condition) comes with
  OpenPAI's completion code; a pod left Terminating past its grace period (its kubelet gone)
  is force-deleted and its instance LOST as PodNodeLost (-1001).

Logs are copied to the server's disk while the pods run (`kubernetes_logs`), so they outlive
the pods. Everything needed to take an attempt back after a restart is in the cluster: the
launch request in the attempt's ConfigMap, its secrets in its Secret, the instances in the
pods' labels; `start()` finds them by label and adopts them.

The objects go to the jobs' namespace, or with `namespace_per_virtual_cluster` to the job's
virtual cluster's namespace (the pods are then watched, and attempts adopted, in every
namespace); `kubernetes_quota` keeps each virtual cluster's ResourceQuota there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, cast

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from backends.base import (
    BackendError,
    BackendHealth,
    EventKind,
    InstanceEvent,
    InstanceKey,
    InstanceReport,
    InstanceStatus,
    LaunchRefused,
    LaunchRequest,
    Placement,
    UnknownInstance,
    oom_reason,
    utcnow,
)
from backends.instance_exec import ExecRequest
from backends.kubernetes_exec import KubernetesExecSession
from backends.kubernetes_gang import GATE, POD_GROUP_API, ClusterView
from backends.kubernetes_isolation import pod_security_refusal
from backends.kubernetes_log_reader import PodLogReader
from backends.kubernetes_logs import LogBook, hang_up
from backends.kubernetes_manifests import AttemptBuilder, with_owner
from backends.kubernetes_names import (
    ATTEMPT,
    CLAIMS_KEY,
    INDEX,
    JOB_ID_ANNOTATION,
    LAUNCH_KEY,
    MAIN_CONTAINER,
    ROLE_ANNOTATION,
    RUN,
    config_map_name,
    network_policy_name,
    owner_selector,
    secret_name,
    ssh_secret_name,
)
from backends.kubernetes_pods import IMAGE_NOT_PULLED, NODE_LOST, PodFacts, Termination, pod_facts
from backends.kubernetes_quota import QUOTA_NAME, hard_patch, quota_object
from backends.kubernetes_reach import Reachability
from backends.kubernetes_settings import KubernetesSettings, load_settings
from backends.kubernetes_start_order import (
    GO,
    NEVER,
    WAIT,
    order_config_map_name,
    order_key,
    verdict,
)
from backends.kubernetes_usage import PodMetricsReader
from backends.ssh_access import JOB_KEY
from backends.start_gate import DEPENDENCY_FAILED, PeerState, waits_for
from backends.threaded import LogSource, ThreadedBackend, attempt_id
from backends.usage import UsageSample

__all__ = ["KubernetesBackend", "api_client"]

log = logging.getLogger(__name__)

# what the client raises when the API server does not answer at all (no HTTP status)
_UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
_LIST_TIMEOUT = (10, 60)  # seconds to connect, and to read a listing of pods
_WATCH_SECONDS = 300  # a watch is renewed from its resource version after this long
_STOP_EXTRA_SECONDS = 15.0  # a stop waits this long past the grace period for the pods' ends
_PARALLEL = 8
_CREATE_TRIES = 5  # a create answered 429 or 5xx is tried this many times in all
_TERMINATING_SLACK = 5.0  # seconds past a deletion's grace period before it is forced
_PAGE = 500  # items per page of a cluster-wide listing
_LOOK_EVERY = 10.0  # seconds between two reads of the cluster's room while nothing of ours changed
GANG_TIMEOUT = 251  # OpenPAI's JobGangAllocationTimeout
_CREATE_CODES = {403: -200, 429: -120}  # PodCreationPermanentError, PodCreationTransientError


def api_client(settings: KubernetesSettings) -> k8s.ApiClient:
    """A client for the cluster the settings name: the kubeconfig given, the in-cluster
    service account of a server running in a pod, else the usual kubeconfig."""
    configuration = k8s.Configuration()
    try:
        if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=settings.kubeconfig,
                context=settings.context,
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BackendError(
            f"no usable Kubernetes configuration ({where}, not running in a cluster): {exc}"
        ) from None
    return k8s.ApiClient(configuration)


@dataclass(eq=False)
class _Instance:
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
class _Attempt:
    request: LaunchRequest
    builder: AttemptBuilder
    service_uid: str = ""
    instances: dict[tuple[str, int], _Instance] = field(default_factory=dict)
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

    @property
    def id(self) -> str:
        return attempt_id(self.request.job_id, self.request.attempt)

    @property
    def namespace(self) -> str:
        """Where its objects are (its virtual cluster's, with namespace_per_virtual_cluster)."""
        return self.builder.namespace

    def live(self) -> list[_Instance]:
        return [i for i in self.instances.values() if not i.ended]


class KubernetesBackend(ThreadedBackend):
    """Create it, `await start()`, then use the Backend methods."""

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
        self._attempts: dict[str, _Attempt] = {}
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

    # --- lifecycle ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise BackendError, saying why, unless the namespace's pods can be listed (with a
        namespace per virtual cluster: the pods and ConfigMaps of every namespace, which only
        the ClusterRole of that variant grants)."""
        try:
            self._pod_listing(limit=1, _request_timeout=15)
            if self.per_virtual_cluster:
                self.core.list_config_map_for_all_namespaces(
                    label_selector=self.selector,
                    limit=1,
                    _request_timeout=15,
                    _preload_content=False,
                )
        except ApiException as exc:
            if self.per_virtual_cluster:
                raise BackendError(
                    "namespace_per_virtual_cluster needs the server's rights in every namespace "
                    "(the ClusterRole of deploy/kubernetes/namespace-per-virtual-cluster); the "
                    f"Kubernetes API refuses: {_api_message(exc)}"
                ) from None
            raise BackendError(
                f"the Kubernetes API refuses to list pods in namespace {self.namespace!r}: "
                f"{_api_message(exc)}"
            ) from None
        except Exception as exc:
            host = self.client.configuration.host
            raise BackendError(f"cannot reach the Kubernetes API at {host}: {exc}") from None

    async def start(self) -> None:
        """Take back this server's attempts, then watch their pods."""
        self._open_events()
        for virtual_cluster in self.settings.virtual_cluster_quota:
            await asyncio.to_thread(self._keep_quota, virtual_cluster)
        await asyncio.to_thread(self._adopt_attempts)
        for target, name in ((self._watch_pods, "k8s watch"), (self._keep_time, "k8s gang")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        await asyncio.to_thread(self._listed.wait)
        if self.settings.gang_scheduler == "gates":
            await asyncio.to_thread(self._check_gang_rights)

    def _check_gang_rights(self) -> None:
        """Warn at once when the default gang cannot read the cluster's room (attempts would
        wait, saying so, until the rights are granted)."""
        for what, call in (
            ("nodes", self.core.list_node),
            ("pods in every namespace", self.core.list_pod_for_all_namespaces),
        ):
            try:
                call(limit=1, _preload_content=False, _request_timeout=_LIST_TIMEOUT)
            except ApiException as exc:
                log.warning(
                    "gang_scheduler 'gates' cannot list %s (%s): attempts will wait until the "
                    "ClusterRole of deploy/kubernetes/cluster-role.yaml is granted, or choose "
                    "another gang_scheduler",
                    what,
                    _api_message(exc),
                )
            except _UNREACHABLE as exc:
                log.info("cannot check the gang's rights now (%s)", exc)

    async def close(self) -> None:
        self._closed.set()
        response = self._watch_response
        if response is not None:
            hang_up(response)
        self.logbook.close()
        with self._lock:
            self._changed.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- Backend -----------------------------------------------------------------------------

    def health(self) -> BackendHealth:
        """Unhealthy while the API server does not answer the pod listing."""
        return self._reach.health()

    # --- SamplesUsage ------------------------------------------------------------------------

    def usage_source(self) -> str:
        return self._metrics.source

    async def sample_usage(self) -> list[UsageSample]:
        """The running pods' CPU and memory from the metrics API (backends.kubernetes_usage)."""
        with self._lock:
            running = {
                i.pod: (i.key, attempt.request.role(i.key.role).resources.memory_mb << 20)
                for attempt in self._attempts.values()
                for i in attempt.live()
                if i.started
            }
        if not running:
            return []
        figures = await asyncio.to_thread(self._metrics.read)
        at = utcnow()
        return [
            UsageSample(
                key=key,
                at=at,
                cpu_cores=figures[pod][0],
                memory_bytes=figures[pod][1],
                memory_limit_bytes=limit,
            )
            for pod, (key, limit) in running.items()
            if pod in figures
        ]

    def _stop_grace_seconds(self) -> float:
        return self.settings.stop_grace_seconds

    def _log_source(self, key: InstanceKey) -> LogSource:
        if not self.logbook.exists(key):
            raise UnknownInstance(f"no instance {key.role}-{key.index} in attempt {key.attempt}")
        return LogSource(
            read_from=partial(self.logbook.read_from, key),
            tail_offset=partial(self.logbook.tail_offset, key),
            running=lambda: self._live(key),
        )

    # --- launching ---------------------------------------------------------------------------

    def exec_session(self, key: InstanceKey, request: ExecRequest) -> KubernetesExecSession:
        """Run a command in the instance's main container (`paigraph exec` and `shell`)."""
        with self._lock:
            attempt = self._attempts.get(attempt_id(key.job_id, key.attempt))
            instance = attempt.instances.get((key.role, key.index)) if attempt else None
            if attempt is None or instance is None:
                raise UnknownInstance(f"instance {key.role}-{key.index} has no pod")
            if instance.ended or not instance.started:
                state = "has ended" if instance.ended else "has not started yet"
                raise BackendError(f"instance {key.role}-{key.index} {state} (pod {instance.pod})")
            pod = instance.pod
            namespace = attempt.namespace
        return KubernetesExecSession(
            self.client.configuration, namespace, pod, MAIN_CONTAINER, request
        )

    @property
    def default_fs_uri(self) -> str:
        """PAI_DEFAULT_FS_URI of every pod: the setting default_fs_uri (empty by default)."""
        return self.settings.default_fs_uri

    def refusal(self, request: LaunchRequest) -> str | None:
        """Why the cluster can never run the request (an hdfs data URI, a host path...): what
        building its objects refuses. None when they can be built."""
        try:
            self._builder(request)
        except LaunchRefused as exc:
            return str(exc)
        return None

    def _launch(self, request: LaunchRequest) -> None:
        builder = self._builder(request)  # LaunchRefused
        objects = builder.objects()
        if not self._reach.reachable:
            log.info("job %s waits for the Kubernetes API server to answer", request.job_id)
            if not self._reach.wait(self._closed):
                return
        vc = request.virtual_cluster
        if vc in self.settings.virtual_cluster_quota and vc not in self._quotas_kept:
            self._keep_quota(vc)
        attempt = _Attempt(request=request, builder=builder)
        for role in request.roles:
            for index in range(role.instances):
                key = InstanceKey(
                    job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
                )
                attempt.instances[(role.name, index)] = _Instance(
                    key=key, pod=builder.pod_name(role.name, index)
                )
        with self._lock:
            if attempt.id in self._attempts:
                raise LaunchRefused(f"attempt {request.attempt} of job {request.job_id} exists")
            self._attempts[attempt.id] = attempt
        for instance in attempt.instances.values():
            self.logbook.begin(instance.key, 1)
        try:
            service = self._create("Service", objects.service)
        except _UNREACHABLE as exc:
            with self._lock:
                self._attempts.pop(attempt.id, None)
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot reach the Kubernetes API server: {exc}"
            )
            return
        except ApiException as exc:
            with self._lock:
                self._attempts.pop(attempt.id, None)
            if exc.status in (409, 422):
                raise LaunchRefused(
                    f"the cluster refuses the attempt: {_api_message(exc)}"
                ) from None
            if exc.status == 404 and self.per_virtual_cluster:
                raise LaunchRefused(
                    f"virtual cluster {request.virtual_cluster!r} has no namespace "
                    f"{builder.namespace!r} on this cluster (namespace_per_virtual_cluster: "
                    "the cluster's administrator creates one per virtual cluster): "
                    f"{_api_message(exc)}"
                ) from None
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot create the Service: {_api_message(exc)}"
            )
            return
        attempt.service_uid = service["metadata"]["uid"]
        try:
            policy = [objects.network_policy] if objects.network_policy else []
            maps = [objects.config_map, *objects.extra_config_maps]
            maps += [objects.start_order] if objects.start_order else []
            for obj in [*maps, *objects.secrets, *policy]:
                self._create(obj["kind"], with_owner(obj, attempt.service_uid))
            if objects.pod_group is not None:
                self._create_pod_group(with_owner(objects.pod_group, attempt.service_uid))
        except _UNREACHABLE as exc:
            self._drop(attempt)
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot reach the Kubernetes API server: {exc}"
            )
            return
        except ApiException as exc:
            self._drop(attempt)
            if exc.status == 422:
                raise LaunchRefused(
                    f"the cluster refuses the attempt: {_api_message(exc)}"
                ) from None
            self._end_all(
                attempt, EventKind.START_FAILED, f"cannot create the attempt: {_api_message(exc)}"
            )
            return
        pods = [with_owner(pod, attempt.service_uid) for pod in objects.pods]
        attempt.queued = self.settings.gang_scheduler == "gates"
        problems = [
            p for p in self._pool.map(lambda pod: self._create_pod(attempt, pod), pods) if p
        ]
        if problems:
            self._drop(attempt)
            refused = [p for p in problems if pod_security_refusal(*p)]
            if refused:  # the namespace's Pod Security level: the same pods would be refused
                raise LaunchRefused(
                    f"the cluster's Pod Security admission refuses the pods: {refused[0][1]} "
                    f"(pods are made for the {self.settings.pod_security!r} profile: set "
                    "pod_security to the level the jobs' namespace enforces)"
                )
            if all(status == 422 for status, _ in problems):
                raise LaunchRefused(f"the cluster refuses the attempt: {problems[0][1]}")
            status, message = problems[0]
            reason = f"cannot create the pods: {message}"
            if status == 403:
                reason += (
                    " (refused by the cluster's policy, e.g. a ResourceQuota or Pod Security "
                    "admission; not retried: change the job or ask the cluster's administrator)"
                )
            code = _CREATE_CODES.get(status, -120 if status >= 500 else None)
            self._end_all(attempt, EventKind.START_FAILED, reason, completion_code=code)
            return
        with self._lock:
            self._changed.notify_all()  # the gang thread looks at the queue

    def _create_pod(self, attempt: _Attempt, pod: dict[str, Any]) -> tuple[int, str] | None:
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
            return exc.status or 0, f"pod {pod['metadata']['name']}: {_api_message(exc)}"
        except _UNREACHABLE as exc:
            with self._lock:
                instance.created_at = None
            return 0, f"pod {pod['metadata']['name']}: cannot reach the API server: {exc}"
        return None

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

    def _keep_quota(self, virtual_cluster: str) -> None:
        """Create the virtual cluster's ResourceQuota, or set its limits to the configured
        capacity; a failure is logged (and tried again at its next launch)."""
        wanted = quota_object(self.settings, virtual_cluster)
        namespace = wanted["metadata"]["namespace"]
        try:
            try:
                current = _body(
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
                _api_message(exc),
            )
            return
        except _UNREACHABLE as exc:
            log.warning(
                "virtual cluster %s: cannot reach the API server for its quota (%s)",
                virtual_cluster,
                exc,
            )
            return
        with self._lock:
            self._quotas_kept.add(virtual_cluster)

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
        return self._retried(lambda: _body(call(namespace, body, _preload_content=False)))

    def _retried(self, call: Callable[[], Any]) -> Any:
        """Make a call, again with back-off while the API server answers 429 (too many
        requests: after its Retry-After), a 5xx, or a quota whose usage the quota controller
        has not counted yet (403 "status unknown for quota", right after the quota is made),
        up to _CREATE_TRIES in all."""
        for attempt in range(1, _CREATE_TRIES + 1):
            try:
                return call()
            except ApiException as exc:
                status = exc.status or 0
                transient = status == 429 or status >= 500 or _quota_not_counted(exc)
                if not transient or attempt == _CREATE_TRIES:
                    raise
                delay = min(0.5 * 2**attempt, 8.0)
                with contextlib.suppress(TypeError, ValueError, AttributeError, KeyError):
                    delay = max(delay, float((exc.headers or {})["Retry-After"]))
                log.info("the API server answered %s; trying again in %g s", status, delay)
                if self._closed.wait(min(delay, 30.0)):
                    raise
        raise AssertionError("unreachable")

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

    def _drop(self, attempt: _Attempt) -> None:
        """Remove what a launch that failed half-way created (the Service owns the rest)."""
        with self._lock:
            self._attempts.pop(attempt.id, None)
            attempt.forgotten = True
        self._delete_attempt_objects(attempt)

    # --- facts from pods ---------------------------------------------------------------------

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
                    self._wait_after_failure(_api_message(exc))
                else:
                    log.warning("watching pods failed (%s); listing them again", _api_message(exc))
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
            _request_timeout=(_LIST_TIMEOUT[0], _WATCH_SECONDS + 30),
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
        listing = _body(self._pod_listing(_request_timeout=_LIST_TIMEOUT))
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
        meta = pod.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        try:
            wanted = attempt_id(notes[JOB_ID_ANNOTATION], int(labels[ATTEMPT]))
            position = (notes[ROLE_ANNOTATION], int(labels[INDEX]))
            run = int(labels.get(RUN, "1"))
        except (KeyError, ValueError):
            return
        with self._lock:
            attempt = self._attempts.get(wanted)
            instance = attempt.instances.get(position) if attempt else None
            if attempt is None or instance is None or run != instance.run:
                return
            if instance.ended or instance.finishing:
                return
            facts = pod_facts(pod)
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
            if deleted:
                pass
            elif facts.start_error:
                self._fail_to_start(attempt, instance, facts.start_error)
                return
            else:
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
                if not attempt.gang_complete:
                    if facts.unschedulable:
                        attempt.unschedulable = facts.unschedulable
                    if facts.terminated is not None or facts.lost:
                        # ended before its gang formed: its own end is told, not a timeout
                        self._ended_early(attempt, instance, facts, now=now)
                        return
                    self._check_gang(attempt, now=now)
                else:
                    self._advance(attempt, instance, now=now)
                return
        self._gone(attempt, instance)

    def _finishing(
        self, attempt: _Attempt, instance: _Instance, terminated: Termination, *, now: bool
    ) -> None:
        """The instance's container terminated: finish it here or on the pool (lock held)."""
        instance.termination = terminated
        instance.finishing = True
        if now:
            self._finish(attempt, instance, terminated)
        else:
            self._pool.submit(self._finish, attempt, instance, terminated)

    def _ended_early(
        self, attempt: _Attempt, instance: _Instance, facts: PodFacts, *, now: bool
    ) -> None:
        """The pod ended before every pod of its attempt was scheduled (lock held)."""
        if facts.terminated is not None:
            self._finishing(attempt, instance, facts.terminated, now=now)
        else:
            reason = facts.disruption or facts.lost
            self._end(attempt, instance, EventKind.LOST, reason=reason, completion_code=facts.code)

    def _check_gang(self, attempt: _Attempt, *, now: bool = False) -> None:
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

    def _advance(self, attempt: _Attempt, instance: _Instance, *, now: bool = False) -> None:
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

    def _finish(self, attempt: _Attempt, instance: _Instance, ended: Termination) -> None:
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
        self, attempt: _Attempt, instance: _Instance, reason: str, code: int | None = None
    ) -> None:
        """The pod can never run its command: end the instance and take the pod away."""
        kind = EventKind.STOPPED if attempt.stopping else EventKind.START_FAILED
        if code is None and instance.facts is not None:
            code = instance.facts.code
        self._end(attempt, instance, kind, reason=reason, completion_code=code)
        self._pool.submit(self._delete_pod, instance.pod, 0, attempt.namespace)

    def _gone(self, attempt: _Attempt, instance: _Instance) -> None:
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

    def _end(self, attempt: _Attempt, instance: _Instance, kind: EventKind, **fields: Any) -> None:
        with self._lock:
            if instance.ended:
                return
            instance.ended = True
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

    def _judge_start_order(self, attempt: _Attempt) -> None:
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
        never: list[tuple[_Instance, str]] = []
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

    def _tell_start_order(self, attempt: _Attempt, told: dict[str, str]) -> None:
        """Write what waiting instances read into the attempt's start-order ConfigMap."""
        name = order_config_map_name(attempt.builder.service)
        try:
            self._retried(
                lambda: self.core.patch_namespaced_config_map(
                    name, self.namespace, {"data": told}, _preload_content=False
                )
            )
        except (ApiException, *_UNREACHABLE) as exc:
            log.warning("cannot tell %s's waiting instances what holds: %s", attempt.id, exc)
            with self._lock:  # told again on the next change of a pod of the attempt
                for key in told:
                    attempt.order_said.pop(key, None)

    def _end_all(self, attempt: _Attempt, kind: EventKind, reason: str, **fields: Any) -> None:
        for instance in list(attempt.instances.values()):
            self._end(attempt, instance, kind, reason=reason, **fields)

    # --- the gang's clock --------------------------------------------------------------------

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
        stuck: list[tuple[_Attempt, _Instance, str]] = []
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
        if admitted:
            attempt = admitted[0]
            assert attempt.admitted_at is not None
            if time.monotonic() - attempt.admitted_at > self.settings.gang_bind_seconds:
                self._take_back(attempt)
            return
        if not queue:
            return
        attempt = queue[0]
        with self._lock:
            head, since = self._looked
            if (
                head == attempt.id
                and not self._room_changed
                and time.monotonic() - since < _LOOK_EVERY
            ):
                return  # nothing of ours freed room: the cluster is read again later
            self._looked = (attempt.id, time.monotonic())
            self._room_changed = False
            if attempt.demand is None:  # the barrier's requests count too
                attempt.demand = [
                    attempt.builder.pod(i.key.role, i.key.index) for i in attempt.live()
                ]
            pods = attempt.demand
        try:
            view = ClusterView.of(
                self._list_all(self.core.list_node),
                self._list_all(self.core.list_pod_for_all_namespaces),
                self.settings.node_selector,
            )
        except ApiException as exc:
            why = (
                f"cannot see the cluster's free room ({_api_message(exc)}); the server needs "
                "to list and watch nodes and pods in every namespace (the ClusterRole "
                "paigraph-gang in deploy/kubernetes)"
            )
            self._tell_waiting(attempt, why)
            return
        fits, why = view.fits(pods)
        if not fits:
            self._tell_waiting(attempt, f"waiting for room in the cluster: {why}")
            return
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
                log.warning("cannot lift the gate %s of pod %s: %s", GATE, pod, _api_message(exc))

    def _take_back(self, attempt: _Attempt) -> None:
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
            except (ApiException, *_UNREACHABLE) as exc:
                message = _api_message(exc) if isinstance(exc, ApiException) else str(exc)
                self._end(
                    attempt,
                    instance,
                    EventKind.START_FAILED,
                    reason=f"cannot create pod {instance.pod} again: {message}",
                    completion_code=-120,
                )

    def _tell_waiting(self, attempt: _Attempt, reason: str) -> None:
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
            page = _body(self._retried(partial(call, **kwargs, _request_timeout=_LIST_TIMEOUT)))
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _gang_timed_out(self, attempt: _Attempt, limit: float) -> None:
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
            warnings = [e for e in _body(response).get("items") or [] if e.get("type") == "Warning"]
            if warnings:
                return warnings[-1].get("message")
        return None

    # --- stopping, starting again, forgetting ------------------------------------------------

    def _stop(self, stopped_id: str, grace: float) -> None:
        with self._lock:
            attempt = self._attempts.get(stopped_id)
            if attempt is None:
                return
            attempt.stopping = True
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
        where = f"{key.role}-{key.index} of attempt {key.attempt} of job {key.job_id}"
        with self._lock:
            attempt = self._attempts.get(attempt_id(key.job_id, key.attempt))
            instance = attempt.instances.get((key.role, key.index)) if attempt else None
            if attempt is None or instance is None:
                raise UnknownInstance(f"no instance {where}")
            if run is not None and run <= instance.run:
                log.debug("%s: run %s was started already; not again", key, run)
                return
            if not instance.ended:
                raise BackendError(f"{where} has not ended; only an ended instance runs again")
            if attempt.stopping:
                raise BackendError(f"attempt {key.attempt} of job {key.job_id} is being stopped")
            old = instance.pod
            instance.run = run if run is not None else instance.run + 1
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
                reason=f"cannot create pod {instance.pod}: {_api_message(exc)}",
            )

    def _forget(self, forgotten_id: str) -> None:
        with self._lock:
            attempt = self._attempts.pop(forgotten_id, None)
            if attempt is None:
                return
            attempt.forgotten = True
            self._changed.notify_all()
        for instance in attempt.instances.values():
            self.logbook.forget_run(instance.key)
        self._delete_attempt_objects(attempt)

    def _delete_attempt_objects(self, attempt: _Attempt) -> None:
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
                log.warning("cannot delete %s: %s", what, _api_message(exc))
        except _UNREACHABLE as exc:
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

    # --- after a restart ---------------------------------------------------------------------

    def _adopt_attempts(self) -> None:
        """Every attempt this server made that still has its ConfigMap and Service (in every
        namespace with a namespace per virtual cluster)."""
        if self.per_virtual_cluster:
            response = self.core.list_config_map_for_all_namespaces(
                label_selector=self.selector, _preload_content=False
            )
        else:
            response = self.core.list_namespaced_config_map(
                self.namespace, label_selector=self.selector, _preload_content=False
            )
        for item in _body(response).get("items") or []:
            if LAUNCH_KEY not in (item.get("data") or {}):
                continue  # a part of a large attempt's environment, not an attempt
            try:
                self._adopt_attempt(item)
            except Exception as exc:
                name = item.get("metadata", {}).get("name")
                log.warning("attempt of ConfigMap %s cannot be taken back: %s", name, exc)

    def _adopt_attempt(self, config_map: dict[str, Any]) -> None:
        data = config_map["data"]
        request = LaunchRequest.model_validate_json(data[LAUNCH_KEY])
        # the claims it was made with; none recorded: made before claims were per user
        claims = json.loads(data[CLAIMS_KEY]) if CLAIMS_KEY in data else {}
        legacy = CLAIMS_KEY not in data
        namespace = config_map["metadata"].get("namespace") or self.namespace
        builder = self._builder(request, claims, legacy, namespace)
        try:
            service = _body(
                self.core.read_namespaced_service(
                    builder.service, namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:  # the attempt's owner is gone: what it owned goes too
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_config_map(
                        config_map["metadata"]["name"], namespace, _preload_content=False
                    )
                return
            raise
        secrets = self._read_secrets(secret_name(builder.service), namespace)
        if secrets:  # the job's secrets, kept in the cluster, for a relaunch
            request = request.model_copy(update={"secrets": secrets})
        if request.ssh is not None:  # the job's ssh key, kept in the attempt's ssh Secret
            job_key = self._read_secrets(ssh_secret_name(builder.service), namespace).get(
                JOB_KEY, ""
            )
            request = request.model_copy(
                update={"ssh": request.ssh.model_copy(update={"job_private_key": job_key})}
            )
        builder = self._builder(request, claims, legacy, namespace)
        attempt = _Attempt(request=request, builder=builder, service_uid=service["metadata"]["uid"])
        # gated pods made before the restart wait for admission again (lifting gates already
        # lifted is harmless); the attempt leaves the queue once all its pods are scheduled
        attempt.queued = self.settings.gang_scheduler == "gates"
        for role in request.roles:
            for index in range(role.instances):
                key = InstanceKey(
                    job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
                )
                attempt.instances[(role.name, index)] = _Instance(
                    key=key, pod=builder.pod_name(role.name, index)
                )
        pods = _body(
            self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{self.selector},{ATTEMPT}={request.attempt}",
                _preload_content=False,
            )
        )
        for pod in pods.get("items") or []:
            notes = pod["metadata"].get("annotations") or {}
            labels = pod["metadata"].get("labels") or {}
            if notes.get(JOB_ID_ANNOTATION) != request.job_id:
                continue
            instance = attempt.instances.get(
                (cast(str, notes.get(ROLE_ANNOTATION)), int(labels.get(INDEX, -1)))
            )
            run = int(labels.get(RUN, "1"))
            if instance is not None and run >= instance.run:
                instance.run = run
                instance.pod = pod["metadata"]["name"]
                instance.created_at = 0.0  # made before this server started
        with self._lock:
            self._attempts[attempt.id] = attempt

    def _read_secrets(self, name: str, namespace: str) -> dict[str, str]:
        try:
            secret = _body(
                self.core.read_namespaced_secret(name, namespace, _preload_content=False)
            )
        except ApiException:
            return {}
        return {
            k: base64.b64decode(v).decode("utf-8", "replace")
            for k, v in (secret.get("data") or {}).items()
        }

    def _reports(self) -> list[InstanceReport]:
        reports = []
        with self._lock:
            for attempt in self._attempts.values():
                for instance in attempt.instances.values():
                    placement = self._placement(attempt, instance)
                    if instance.end is not None:
                        reports.append(
                            InstanceReport(
                                key=instance.key,
                                status=InstanceStatus.EXITED,
                                placement=placement,
                                exit_code=instance.end.exit_code,
                                oom_killed=instance.end.oom_killed,
                                started_at=instance.started_at,
                                finished_at=instance.end.at,
                                run=instance.end.run,
                            )
                        )
                    elif not instance.ended:
                        running = instance.started
                        reports.append(
                            InstanceReport(
                                key=instance.key,
                                status=InstanceStatus.RUNNING
                                if running
                                else InstanceStatus.PENDING,
                                placement=placement if instance.placed else None,
                                started_at=instance.started_at,
                                run=instance.run,
                            )
                        )
        return reports

    # --- small parts -------------------------------------------------------------------------

    def _live(self, key: InstanceKey) -> bool:
        """Whether the instance may still write to its log."""
        with self._lock:
            attempt = self._attempts.get(attempt_id(key.job_id, key.attempt))
            instance = attempt.instances.get((key.role, key.index)) if attempt else None
            if instance is None:
                return False
            return not instance.ended or self.logbook.following(key)

    def _placement(self, attempt: _Attempt, instance: _Instance) -> Placement:
        facts = instance.facts
        return Placement(
            node=facts.node if facts else "",
            host_ip=facts.pod_ip if facts else "",
            ports=attempt.builder.ports[(instance.key.role, instance.key.index)],
        )

    def _emit_attempt(self, attempt: _Attempt, kind: EventKind, reason: str) -> None:
        request = attempt.request
        self._emit(
            InstanceEvent(job_id=request.job_id, attempt=request.attempt, kind=kind, reason=reason)
        )


def _peer(instance: _Instance) -> PeerState:
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


def _missing(instance: _Instance, asked_at: float, listed_before: bool) -> bool:
    """Whether an instance absent from a listing has lost its pod: one created before the
    listing was asked for (or, at the first listing, one adopted without a pod)."""
    if instance.created_at is None:
        return not listed_before
    return instance.created_at < asked_at


def _body(response: Any) -> Any:
    """The JSON body of a response asked for with `_preload_content=False`: a raw urllib3
    response, which the client's annotations do not know of."""
    return json.loads(response.data)


def _quota_not_counted(exc: ApiException) -> bool:
    """A ResourceQuota's refusal before the quota controller first counted its usage: it
    passes once the quota has a status (seconds after the quota is made)."""
    return exc.status == 403 and "status unknown for quota" in _api_message(exc)


def _api_message(exc: ApiException) -> str:
    """The API server's own message, else the HTTP reason."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):  # not a JSON object
        body = json.loads(cast(str, exc.body))
        if body.get("message"):
            return str(body["message"])
    return f"{exc.status} {exc.reason}".strip()
