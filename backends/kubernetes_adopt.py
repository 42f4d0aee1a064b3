"""Taking back, after a restart, the attempts this server made: everything needed is in the
cluster (the launch request in the attempt's ConfigMap, its secrets in its Secrets, the
instances in the pods' labels). Also what `reconcile()` reports of them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from backends.base import InstanceReport, InstanceStatus, LaunchRequest
from backends.kubernetes_api import response_body
from backends.kubernetes_core import Attempt, KubernetesCore
from backends.kubernetes_names import (
    ATTEMPT,
    CLAIMS_KEY,
    INDEX,
    JOB_ID_ANNOTATION,
    LAUNCH_KEY,
    ROLE_ANNOTATION,
    RUN,
    secret_name,
    ssh_secret_name,
)
from backends.ssh_access import JOB_KEY

log = logging.getLogger("backends.kubernetes")  # one logger for the whole backend


class Adopting(KubernetesCore):
    """Adopting attempts after a restart, and reporting the instances."""

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
        for item in response_body(response).get("items") or []:
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
            service = response_body(
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
        attempt = Attempt.of(request, builder, service_uid=service["metadata"]["uid"])
        # gated pods made before the restart wait for admission again (lifting gates already
        # lifted is harmless); the attempt leaves the queue once all its pods are scheduled
        attempt.queued = self.settings.gang_scheduler == "gates"
        pods = response_body(
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
            secret = response_body(
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
