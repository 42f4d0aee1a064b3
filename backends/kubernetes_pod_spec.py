"""The Pod of one instance of a Kubernetes attempt: its containers (the job's, the init
container that fetches its prerequisites), their resources, mounts and volumes.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from backends.base import WORK_DIR, Fetch, RoleLaunch
from backends.entrypoint import (
    ENTRYPOINT,
    ENV_FILE,
    LOG_FILE,
    MARKER,
    RUN_DIR,
    RUNTIME_DIR,
    SSH_DIR,
)
from backends.kubernetes_attempt import POD_IP_VARIABLES, SECRETS_DIR, AttemptBase, env_part_file
from backends.kubernetes_init_script import fetch_lines, optional_fetch_lines, port_check_lines
from backends.kubernetes_isolation import (
    SECRET_MODE,
    container_security_context,
    pod_security_context,
)
from backends.kubernetes_names import (
    COMMON_ENV_KEY,
    ENV_ANNOTATION,
    INDEX,
    MAIN_CONTAINER,
    PORTS_ANNOTATION,
    PREPARE_CONTAINER,
    QUEUE_LABEL,
    ROLE,
    ROLE_ANNOTATION,
    RUN,
    config_map_name,
    entrypoint_key,
    extra_config_map_name,
    label_value,
    secret_name,
    ssh_secret_name,
)
from backends.kubernetes_start_order import readiness_probe
from backends.runtime_env import shell_env_file

CONFIG_DIR = "/usr/local/pai-config"  # the ConfigMap's files, read-only

# The main container's command: put the ConfigMap's files where the entrypoint expects them,
# send the entrypoint's log file to the container's output (read back with the pod log API),
# and run the entrypoint as the container's first process, so a stop signal reaches it.
_BOOT = "\n".join(
    [
        "set -e",
        f"mkdir -p {RUN_DIR}",
        f"cat {CONFIG_DIR}/env-common-*.sh {CONFIG_DIR}/env-instance.sh > {ENV_FILE}",
        f"cp {CONFIG_DIR}/entrypoint.sh {ENTRYPOINT}",
        f"ln -sf /proc/self/fd/1 {LOG_FILE}",
        f"exec /bin/sh {ENTRYPOINT}",
    ]
)


class PodSpec(AttemptBase):
    """The pods of the attempt."""

    def _pod(self, role_or_name: RoleLaunch | str, index: int, run: int) -> dict[str, Any]:
        role = self.request.role(role_or_name) if isinstance(role_or_name, str) else role_or_name
        ports = self.ports[(role.name, index)]
        labels = {
            **self.attempt_labels(),
            ROLE: label_value(role.name),
            INDEX: str(index),
            RUN: str(run),
            **{k: label_value(self._render(v)) for k, v in self.settings.pod_labels.items()},
        }
        queue = self.settings.queue_of_virtual_cluster.get(self.request.virtual_cluster)
        if queue:
            labels[QUEUE_LABEL] = label_value(queue)
        annotations = {
            **self.attempt_annotations(),
            ROLE_ANNOTATION: role.name,
            PORTS_ANNOTATION: json.dumps(ports),
            ENV_ANNOTATION: shell_env_file(self.instance_part(role, index)),
            **{k: self._render(v) for k, v in self.settings.pod_annotations.items()},
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "hostname": self.host(role.name, index),
            "subdomain": self.service,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": int(self.settings.stop_grace_seconds),
            "securityContext": pod_security_context(self.settings),
        }
        if self.settings.service_account:
            spec["serviceAccountName"] = self.settings.service_account
        else:
            spec["automountServiceAccountToken"] = False
        if self.settings.scheduler_name:
            spec["schedulerName"] = self.settings.scheduler_name
        if self.settings.node_selector:
            spec["nodeSelector"] = dict(self.settings.node_selector)
        if self.settings.host_network:
            spec["hostNetwork"] = True
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        if role.image_auth is not None:
            spec["imagePullSecrets"] = [{"name": self._registry_secret_of(role)}]
        prepare = self._prepare_container(role, ports)
        if prepare is not None:
            spec["initContainers"] = [prepare]
        spec["containers"] = [self._main_container(role, ports)]
        spec["volumes"] = self._volumes(role, index)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._meta(
                self.pod_name(role.name, index, run),
                labels,
                annotations=annotations,
                ownerReferences=self.owned(),
            ),
            "spec": spec,
        }

    # --- pod parts -----------------------------------------------------------------------------

    def _resources(self, role: RoleLaunch, *, gpu: bool) -> dict[str, Any]:
        res = role.resources
        amounts: dict[str, str] = {"cpu": str(res.cpu), "memory": f"{res.memory_mb}Mi"}
        if gpu and res.gpu:
            amounts[self.settings.gpu_resource] = str(res.gpu)
        return {"requests": dict(amounts), "limits": dict(amounts)}

    def _main_container(self, role: RoleLaunch, ports: dict[str, list[int]]) -> dict[str, Any]:
        pod_ip = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        env: list[dict[str, Any]] = [{"name": name, **pod_ip} for name in POD_IP_VARIABLES]
        if not role.resources.gpu and self.settings.gpu_resource == "nvidia.com/gpu":
            env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"})
        declared = []
        for port in sorted({p for group in ports.values() for p in group}):
            entry: dict[str, Any] = {"containerPort": port, "protocol": "TCP"}
            if self.settings.host_network:
                entry["hostPort"] = port
            declared.append(entry)
        mounts = [
            {"name": "runtime", "mountPath": RUNTIME_DIR},
            {"name": "runtime-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ]
        if self.secret_values:
            mounts.append({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True})
        if self.ssh_values:
            mounts.append({"name": "ssh", "mountPath": SSH_DIR, "readOnly": True})
        mounts += self._material_mounts(role, main=True)
        main: dict[str, Any] = {
            "name": MAIN_CONTAINER,
            "image": role.image,
            "imagePullPolicy": self.settings.image_pull_policy,
            "command": ["/bin/sh", "-c", _BOOT],
            "workingDir": WORK_DIR,
            "env": env,
            "resources": self._resources(role, gpu=True),
            "ports": declared,
            "volumeMounts": mounts,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": container_security_context(self.settings),
        }
        probe = readiness_probe(role.readiness, ports) if role.readiness is not None else None
        if probe is not None:  # the pod's Ready condition is the role's readiness check
            main["readinessProbe"] = probe
        return main

    def _prepare_container(
        self, role: RoleLaunch, ports: dict[str, list[int]]
    ) -> dict[str, Any] | None:
        """The init container: checks the host ports, downloads data, clones scripts."""
        fetched = [
            m for m in role.materials if m.kind is not Fetch.MOUNT and not self._hdfs_mounted(m)
        ]
        if not fetched and not self.settings.host_network:
            return None
        lines = ["set -e", f"say() {{ printf '%s %s\\n' {shlex.quote(MARKER)} \"$*\"; }}"]
        if self.settings.host_network:
            lines += port_check_lines(ports)
        for material in fetched:
            lines += optional_fetch_lines(material) if material.optional else fetch_lines(material)
        container: dict[str, Any] = {
            "name": PREPARE_CONTAINER,
            "image": self.settings.init_image,
            "imagePullPolicy": self.settings.image_pull_policy,
            "command": ["/bin/sh", "-c", "\n".join(lines) + "\n"],
            "resources": self._resources(role, gpu=False),
            "volumeMounts": self._material_mounts(role, main=False),
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": container_security_context(self.settings),
        }
        if self.settings.host_network:
            node = {"valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
            container["env"] = [{"name": "NODE_NAME", **node}]
        return container

    def _material_mounts(self, role: RoleLaunch, *, main: bool) -> list[dict[str, Any]]:
        mounts = []
        for n, material in enumerate(role.materials):
            if self._hdfs_mounted(material):  # read-only from the claim the operator mapped
                if main:
                    for i, (path, _, sub_path) in enumerate(self._hdfs_entries(material)):
                        mounted = {"name": f"material-{n}-{i}", "mountPath": path}
                        sub = {"subPath": sub_path} if sub_path else {}
                        mounts.append({**mounted, "readOnly": True, **sub})
                continue
            if material.kind is Fetch.MOUNT:
                if not main:
                    continue
                mount: dict[str, Any] = {
                    "name": f"storage-{n}",
                    "mountPath": f"{WORK_DIR}/{material.name}",
                }
                _, sub_path = self._mount_place(role, material)
                if sub_path:
                    mount["subPath"] = sub_path
                if material.read_only:
                    mount["readOnly"] = True
            else:
                mount = {"name": f"material-{n}", "mountPath": f"{WORK_DIR}/{material.name}"}
                if main:
                    mount["readOnly"] = True
            mounts.append(mount)
        if main:
            for n, storage in enumerate(role.storages):
                mount = {"name": f"admin-storage-{n}", "mountPath": storage.target}
                if storage.read_only:
                    mount["readOnly"] = True
                mounts.append(mount)
        return mounts

    def _runtime_config(self, host: str) -> dict[str, Any]:
        """The entrypoint, the shared environment in its parts, and the instance's own part
        (its pod's annotation, through the downward API), as files of one folder."""
        sources: list[dict[str, Any]] = [
            {
                "configMap": {
                    "name": config_map_name(self.service),
                    "items": [
                        {"key": entrypoint_key(host), "path": "entrypoint.sh"},
                        {"key": COMMON_ENV_KEY, "path": env_part_file(0)},
                    ],
                }
            }
        ]
        for n in range(1, len(self._common_parts)):
            sources.append(
                {
                    "configMap": {
                        "name": extra_config_map_name(self.service, n),
                        "items": [{"key": COMMON_ENV_KEY, "path": env_part_file(n)}],
                    }
                }
            )
        annotation = f"metadata.annotations['{ENV_ANNOTATION}']"
        sources.append(
            {
                "downwardAPI": {
                    "items": [{"path": "env-instance.sh", "fieldRef": {"fieldPath": annotation}}]
                }
            }
        )
        return {"defaultMode": 0o444, "sources": sources}

    def _volumes(self, role: RoleLaunch, index: int) -> list[dict[str, Any]]:
        host = self.hosts[role.name]
        volumes: list[dict[str, Any]] = [
            {"name": "runtime", "emptyDir": {}},
            {"name": "runtime-config", "projected": self._runtime_config(host)},
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{role.resources.shm_mb}Mi"},
            },
        ]
        if self.secret_values:
            volumes.append(
                {
                    "name": "secrets",
                    "secret": {"secretName": secret_name(self.service), "defaultMode": SECRET_MODE},
                }
            )
        if self.ssh_values:
            volumes.append(
                {
                    "name": "ssh",
                    "secret": {
                        "secretName": ssh_secret_name(self.service),
                        "defaultMode": SECRET_MODE,
                    },
                }
            )
        for n, material in enumerate(role.materials):
            if self._hdfs_mounted(material):
                for i, (_, name, _) in enumerate(self._hdfs_entries(material)):
                    read_only = {"claimName": name, "readOnly": True}
                    volumes.append(
                        {"name": f"material-{n}-{i}", "persistentVolumeClaim": read_only}
                    )
            elif material.kind is Fetch.MOUNT:
                claim: dict[str, Any] = {"claimName": self._mount_place(role, material)[0]}
                if material.read_only:
                    claim["readOnly"] = True
                volumes.append({"name": f"storage-{n}", "persistentVolumeClaim": claim})
            else:
                volumes.append({"name": f"material-{n}", "emptyDir": {}})
        for n, storage in enumerate(role.storages):
            claim = {"claimName": storage.source}
            if storage.read_only:
                claim["readOnly"] = True
            volumes.append({"name": f"admin-storage-{n}", "persistentVolumeClaim": claim})
        return volumes
