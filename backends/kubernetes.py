"""The Backend on a Kubernetes cluster: one pod per task instance, Kubernetes does the placing.

Only the Backend's face is here (start, close, health, usage, logs, exec); the parts it is made
of and how a pod's facts become instance events, gangs and exit codes are in
docs/architecture.md and docs/kubernetes.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from functools import partial

from kubernetes.client.exceptions import ApiException

from backends.base import (
    BackendError,
    BackendHealth,
    InstanceKey,
    LaunchRefused,
    LaunchRequest,
    UnknownInstance,
    utcnow,
)
from backends.instance_exec import ExecRequest
from backends.kubernetes_adopt import Adopting
from backends.kubernetes_api import LIST_TIMEOUT, UNREACHABLE, api_client, api_message
from backends.kubernetes_exec import KubernetesExecSession
from backends.kubernetes_gang_clock import GangClock
from backends.kubernetes_launch import Launching
from backends.kubernetes_logs import hang_up
from backends.kubernetes_names import MAIN_CONTAINER
from backends.kubernetes_stop import Stopping
from backends.kubernetes_watch import PodWatch
from backends.threaded import LogSource
from backends.usage import UsageSample

__all__ = ["KubernetesBackend", "api_client"]

log = logging.getLogger(__name__)


class KubernetesBackend(Launching, PodWatch, GangClock, Stopping, Adopting):
    """Create it, `await start()`, then use the Backend methods."""

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
                    f"Kubernetes API refuses: {api_message(exc)}"
                ) from None
            raise BackendError(
                f"the Kubernetes API refuses to list pods in namespace {self.namespace!r}: "
                f"{api_message(exc)}"
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
                call(limit=1, _preload_content=False, _request_timeout=LIST_TIMEOUT)
            except ApiException as exc:
                log.warning(
                    "gang_scheduler 'gates' cannot list %s (%s): attempts will wait until the "
                    "ClusterRole of deploy/kubernetes/cluster-role.yaml is granted, or choose "
                    "another gang_scheduler",
                    what,
                    api_message(exc),
                )
            except UNREACHABLE as exc:
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
            attempt, instance = self._find(key)
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
