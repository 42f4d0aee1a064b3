"""Every Kubernetes object of one job attempt, built from its LaunchRequest.

The backend creates exactly these objects and `paigraph resolve --manifests` prints them, so
what a user reviews is what runs. For an attempt:

- a headless Service (`clusterIP: None`, `publishNotReadyAddresses`) that owns everything else
  through owner references, so deleting it removes the attempt; it gives every pod the stable
  name `<role>-<index>.<service>` before the pods are ready;
- a ConfigMap with each role's entrypoint (`backends.entrypoint`), the part of the runtime
  environment (`backends.runtime_env`) all instances share (continued in more ConfigMaps when
  it is large), the claims it mounts, and the launch request itself (no secrets, no ssh
  private key), from which a restarted server rebuilds a pod;
- a Secret with the job's secrets (mounted at /usr/local/pai/secrets; `<% $secrets.x %>` in a
  command reads it there), one with the ssh plugin's keys, and one registry Secret per
  distinct dockerimage `auth`;
- a NetworkPolicy letting into the attempt's pods only what comes from its own pods;
- one Pod per instance (restart policy Never, hostname `<role>-<index>`, subdomain the
  Service), hardened (`kubernetes_isolation`), with cpu / memory / GPU requests and limits,
  /dev/shm as a memory-backed emptyDir, its own part of the environment in an annotation read
  through the downward API, an init container when data or scripts must be fetched (or host
  ports checked), and storages as the user's own PersistentVolumeClaims.

Everything is built in time linear in the number of instances: the environment once per role,
then each instance's own variables (`runtime_env.instance_variables`).

Peers are named by their stable DNS names in the environment; `PAI_CONTAINER_HOST_IP` and
`PAI_CURRENT_CONTAINER_IP` are the pod's own IP through the downward API. Whatever Kubernetes
cannot serve is refused here with LaunchRefused, before anything is created.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

import yaml

from backends.base import (
    Fetch,
    ImageAuth,
    LaunchRefused,
    LaunchRequest,
    Material,
    Placement,
    RoleLaunch,
)
from backends.entrypoint import (
    ENTRYPOINT,
    ENV_FILE,
    LOG_FILE,
    MARKER,
    RUN_DIR,
    RUNTIME_DIR,
    SSH_DIR,
    WORK_DIR,
    entrypoint_script,
)
from backends.kubernetes_gang import decorate, pod_group
from backends.kubernetes_isolation import (
    SECRET_MODE,
    claim_of,
    container_security_context,
    legacy_claim,
    network_policy,
    pod_security_context,
)
from backends.kubernetes_names import (
    ATTEMPT,
    CLAIMS_KEY,
    COMMON_ENV_KEY,
    ENV_ANNOTATION,
    INDEX,
    JOB,
    JOB_ID_ANNOTATION,
    JOB_NAME_ANNOTATION,
    LAUNCH_KEY,
    MAIN_CONTAINER,
    MANAGED_BY,
    MANAGER,
    OWNER,
    PORTS_ANNOTATION,
    PREPARE_CONTAINER,
    QUEUE_LABEL,
    ROLE,
    ROLE_ANNOTATION,
    RUN,
    USER_ANNOTATION,
    VC_ANNOTATION,
    config_map_name,
    entrypoint_key,
    extra_config_map_name,
    label_value,
    network_policy_name,
    pod_name,
    registry_secret_name,
    role_hosts,
    secret_name,
    service_name,
    ssh_secret_name,
)
from backends.kubernetes_ports import duplicates, instance_ports
from backends.kubernetes_settings import KubernetesSettings
from backends.kubernetes_start_order import (
    order_config_map_name,
    order_data,
    order_volume,
    readiness_probe,
    start_order_container,
)
from backends.runtime_env import instance_variables, runtime_env, shell_env_file
from backends.secrets_env import SECRET_KEY, SECRET_REF, kept_request, with_secret_references
from backends.ssh_access import ssh_files
from simulator.dfs import DfsError, is_dfs_uri, parse
from simulator.prereqs import UnservableMaterial, check_name, parse_repo, repository_name

PLACEHOLDER_UID = "<uid of the Service, set by the cluster when it is created>"
CONFIG_DIR = "/usr/local/pai-config"  # the ConfigMap's files, read-only
SECRETS_DIR = f"{RUNTIME_DIR}/secrets"
POD_IP_VARIABLES = ("PAI_CONTAINER_HOST_IP", "PAI_CURRENT_CONTAINER_IP")
ENV_PART_BYTES = 768 * 1024  # of the shared environment per ConfigMap (the API allows 1 MiB)
PORT_IN_USE_EXIT = 10  # the init container's exit code for a port already in use
DOCKER_HUB = "https://index.docker.io/v1/"

_PVC_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TEMPLATE = re.compile(r"\{(group|count|queue|job|user)\}")


@dataclass(frozen=True)
class AttemptObjects:
    """The objects of one attempt, in the order they are created."""

    service: dict[str, Any]
    config_map: dict[str, Any]
    secrets: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    network_policy: dict[str, Any] | None = None
    extra_config_maps: list[dict[str, Any]] = field(default_factory=list)
    pod_group: dict[str, Any] | None = None  # Volcano's or coscheduling's (kubernetes_gang)
    start_order: dict[str, Any] | None = None  # what waiting pods read (kubernetes_start_order)

    def all(self) -> list[dict[str, Any]]:
        policy = [self.network_policy] if self.network_policy else []
        group = [self.pod_group] if self.pod_group else []
        maps = [self.config_map, *self.extra_config_maps]
        maps += [self.start_order] if self.start_order else []
        return [self.service, *maps, *self.secrets, *policy, *group, *self.pods]


@dataclass
class AttemptBuilder:
    """Builds the attempt's objects; LaunchRefused on construction when it can never run."""

    request: LaunchRequest
    settings: KubernetesSettings
    namespace: str
    # role -> prerequisite -> claim, of an attempt made earlier (read back from its ConfigMap):
    # the claims it keeps; a prerequisite it has no record of mounts what it did before
    # claims were per user (its URI, else its name)
    claims: dict[str, dict[str, str]] | None = None
    # an attempt made before claims were recorded: one ConfigMap holds its whole shared
    # environment, so its instances run again from that one, however large
    legacy: bool = False
    _registry: dict[tuple[str, str, str], str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        queues = self.settings.queue_of_virtual_cluster
        if queues and self.request.virtual_cluster not in queues:
            raise LaunchRefused(
                f"virtual cluster {self.request.virtual_cluster!r} has no queue on this cluster "
                f"(queues are configured for {', '.join(sorted(queues))})"
            )
        for role in self.request.roles:
            self._check_role(role)
        for role in self.request.roles:
            if role.image_auth is not None:
                self._registry_secret_of(role)

    # --- names ---------------------------------------------------------------------------------

    @cached_property
    def service(self) -> str:
        return service_name(self.request.job_id, self.request.attempt)

    @cached_property
    def hosts(self) -> dict[str, str]:
        return role_hosts(self.request)

    def host(self, role: str, index: int) -> str:
        """The instance's hostname, `<role>-<index>`."""
        return f"{self.hosts[role]}-{index}"

    def address(self, role: str, index: int) -> str:
        """How peers reach the instance: its stable DNS name under the attempt's Service."""
        return f"{self.host(role, index)}.{self.service}"

    def pod_name(self, role: str, index: int, run: int = 1) -> str:
        return pod_name(self.service, self.hosts[role], index, run)

    @cached_property
    def ports(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        return {
            (role.name, i): instance_ports(
                role,
                i,
                self.pod_name(role.name, i),
                self.settings.port_range,
                host_network=self.settings.host_network,
            )
            for role in self.request.roles
            for i in range(role.instances)
        }

    def placement(self, role: str, index: int) -> Placement:
        """What the environment says about the instance: its DNS name and its ports."""
        return Placement(
            node="", host_ip=self.address(role, index), ports=self.ports[(role, index)]
        )

    # --- the objects ---------------------------------------------------------------------------

    def objects(self) -> AttemptObjects:
        secrets = [s for s in [self.job_secret(), self.ssh_secret()] if s is not None]
        secrets += self.registry_secrets()
        pods = [
            self.pod(role, index) for role in self.request.roles for index in range(role.instances)
        ]
        policy = self.network_policy() if self.settings.network_policy else None
        return AttemptObjects(
            self.service_object(),
            self.config_map(),
            secrets,
            pods,
            policy,
            self.extra_config_maps(),
            pod_group(self),
            self.start_order_map(),
        )

    def network_policy(self) -> dict[str, Any]:
        """Lets into the attempt's pods only what comes from its own pods (and the peers the
        settings add)."""
        meta = self._meta(
            network_policy_name(self.service), self.attempt_labels(), ownerReferences=self.owned()
        )
        return network_policy(meta, self.attempt_labels(), self.settings)

    def _meta(self, name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": labels}
        meta.update(extra)
        return meta

    def attempt_labels(self) -> dict[str, str]:
        return {
            MANAGED_BY: MANAGER,
            OWNER: label_value(self.settings.owner),
            JOB: label_value(self.request.job_id),
            ATTEMPT: str(self.request.attempt),
        }

    def attempt_annotations(self) -> dict[str, str]:
        return {
            JOB_ID_ANNOTATION: self.request.job_id,
            JOB_NAME_ANNOTATION: self.request.job_name,
            USER_ANNOTATION: self.request.user,
            VC_ANNOTATION: self.request.virtual_cluster,
        }

    def owned(self, service_uid: str = PLACEHOLDER_UID) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Service", "name": self.service, "uid": service_uid}]

    def service_object(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._meta(
                self.service, self.attempt_labels(), annotations=self.attempt_annotations()
            ),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": self.attempt_labels(),
            },
        }

    def config_map(self) -> dict[str, Any]:
        """The attempt's ConfigMap: the launch request, the claims, each role's entrypoint and
        the first part of the environment all instances share."""
        data = {
            LAUNCH_KEY: kept_request(self.request).model_dump_json(
                exclude={"secrets": True, "ssh": {"job_private_key"}}
            ),
            CLAIMS_KEY: json.dumps(self.all_claims(), sort_keys=True),
        }
        for role in self.request.roles:
            data[entrypoint_key(self.hosts[role.name])] = entrypoint_script(
                self._runnable(role), ssh=bool(self.ssh_values)
            )
        data[COMMON_ENV_KEY] = self._common_parts[0]
        return self._config_map_object(config_map_name(self.service), data)

    def extra_config_maps(self) -> list[dict[str, Any]]:
        """The rest of the shared environment of a large attempt, a ConfigMap per part, each
        within the API's 1 MiB of data."""
        return [
            self._config_map_object(extra_config_map_name(self.service, n), {COMMON_ENV_KEY: part})
            for n, part in enumerate(self._common_parts[1:], start=1)
        ]

    def start_order_map(self) -> dict[str, Any] | None:
        """The ConfigMap the server tells waiting instances through (None: no role waits)."""
        data = order_data(self)
        if not data:
            return None
        return self._config_map_object(order_config_map_name(self.service), data)

    def _config_map_object(self, name: str, data: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self._meta(
                name,
                self.attempt_labels(),
                annotations=self.attempt_annotations(),
                ownerReferences=self.owned(),
            ),
            "data": data,
        }

    # --- the environment, built in time linear in the number of instances ---------------------

    @cached_property
    def placements(self) -> dict[tuple[str, int], Placement]:
        return {
            (r.name, i): self.placement(r.name, i)
            for r in self.request.roles
            for i in range(r.instances)
        }

    @cached_property
    def _role_envs(self) -> dict[str, dict[str, str]]:
        """Each role's instance 0's environment (every peer in it: built once per role)."""
        return {
            r.name: _without_pod_ip(runtime_env(self.request, self.placements, r.name, 0))
            for r in self.request.roles
        }

    def _own(self, role: RoleLaunch, index: int) -> dict[str, str]:
        """What instance `index` has of its own (index, ports), the job's and role's env
        still over it."""
        own = instance_variables(role, index, self.placements[(role.name, index)])
        overrides = {**self.request.env, **role.env}
        return _without_pod_ip({k: overrides.get(k, v) for k, v in own.items()})

    @cached_property
    def _common(self) -> dict[str, str]:
        """The variables every instance has with the same value."""
        first, *others = [self._role_envs[r.name] for r in self.request.roles]
        volatile = {k for r in self.request.roles for k in self._own(r, 0)}
        return {
            k: v
            for k, v in first.items()
            if k not in volatile and all(o.get(k, None) == v for o in others)
        }

    @cached_property
    def _common_parts(self) -> list[str]:
        """The shared environment as shell files of at most ENV_PART_BYTES each."""
        text = shell_env_file(self._common)
        return [text] if self.legacy else _split_env_file(text, ENV_PART_BYTES)

    @cached_property
    def _role_level(self) -> dict[str, dict[str, str]]:
        """Per role, the variables its instances share that others do not (its compat names,
        its own env)."""
        common = self._common
        return {
            name: {k: v for k, v in env.items() if k not in common}
            for name, env in self._role_envs.items()
        }

    def instance_part(self, role: RoleLaunch, index: int) -> dict[str, str]:
        """The instance's variables beyond the shared ones: its role's, then its own."""
        return {**self._role_level[role.name], **self._own(role, index)}

    def instance_env(self, role: str, index: int) -> dict[str, str]:
        """The instance's whole PAI_* environment, peers by DNS name; the pod IP ones left out
        (the downward API gives them)."""
        found = self.request.role(role)
        return {**self._role_envs[role], **self._own(found, index)}

    def job_secret(self) -> dict[str, Any] | None:
        values = self.secret_values
        if not values:
            return None
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self._meta(
                secret_name(self.service), self.attempt_labels(), ownerReferences=self.owned()
            ),
            "type": "Opaque",
            "stringData": values,
        }

    def ssh_secret(self) -> dict[str, Any] | None:
        """The ssh plugin's keys (the job's private key among them) and its peers, mounted at
        the runtime folder's ssh/ and copied into ~/.ssh by the entrypoint."""
        if not self.ssh_values:
            return None
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self._meta(
                ssh_secret_name(self.service), self.attempt_labels(), ownerReferences=self.owned()
            ),
            "type": "Opaque",
            "stringData": self.ssh_values,
        }

    @cached_property
    def ssh_values(self) -> dict[str, str]:
        if self.request.ssh is None or not self.request.roles:
            return {}
        first = self.request.roles[0]
        return ssh_files(self.request, self.instance_env(first.name, 0))

    def all_claims(self) -> dict[str, dict[str, str]]:
        return {
            role.name: {
                m.name: self._mount_place(role, m)[0]
                for m in role.materials
                if m.kind is Fetch.MOUNT
            }
            for role in self.request.roles
        }

    def _claim(self, role: RoleLaunch, material: Material) -> str:
        """The claim a storage prerequisite mounts (UnservableMaterial when it may not)."""
        if self.claims is not None:
            kept = self.claims.get(role.name, {}).get(material.name)
            return kept if kept is not None else legacy_claim(material.name, material.uris)
        return claim_of(self.request.user, material.name, material.uris)

    @cached_property
    def secret_values(self) -> dict[str, str]:
        return {k: v for k, v in self.request.secrets.items() if SECRET_KEY.fullmatch(k)}

    def registry_secrets(self) -> list[dict[str, Any]]:
        secrets = []
        for (registry, username, password), name in self._registry.items():
            auth = base64.b64encode(f"{username}:{password}".encode()).decode()
            config = {
                "auths": {registry: {"username": username, "password": password, "auth": auth}}
            }
            secrets.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": self._meta(
                        name, self.attempt_labels(), ownerReferences=self.owned()
                    ),
                    "type": "kubernetes.io/dockerconfigjson",
                    "stringData": {".dockerconfigjson": json.dumps(config)},
                }
            )
        return secrets

    def pod(
        self, role_or_name: RoleLaunch | str, index: int, run: int = 1, *, gang: bool = True
    ) -> dict[str, Any]:
        """The instance's pod; with `gang`, with what its gang needs (kubernetes_gang)."""
        pod = self._pod(role_or_name, index, run)
        if not gang:
            return pod
        pod = decorate(pod, self)
        role = self.request.role(role_or_name) if isinstance(role_or_name, str) else role_or_name
        waits = start_order_container(self, role, index)
        if waits is not None:  # after the barrier: the peers' names resolve by then
            spec = pod["spec"]
            spec["initContainers"] = [*(spec.get("initContainers") or []), waits]
            spec["volumes"] = [*spec["volumes"], order_volume(self)]
        return pod

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
            lines += _port_check(ports)
        for material in fetched:
            lines += _optional(material) if material.optional else _fetch(material)
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

    # --- HDFS locations the operator mapped to claims (the setting hdfs_claims) --------------

    def _hdfs_place(self, material: Material, uri: str) -> tuple[str, str]:
        """(claim, subPath) of an hdfs:// URI on a file system mapped to a claim."""
        default = self.settings.default_fs_uri.removeprefix("hdfs://")
        try:
            location = parse(uri, default)
        except DfsError as exc:
            raise UnservableMaterial(f"prerequisite {material.name!r}: {exc}") from None
        claim = self.settings.hdfs_claims.get(location.authority)
        if claim is None:
            mapped = ", ".join(sorted(self.settings.hdfs_claims)) or "none"
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {_shown(uri)} is on HDFS "
                f"({location.authority}), which this cluster has only where the operator maps "
                "the file system to a PersistentVolumeClaim with the kubernetes setting "
                f"hdfs_claims (mapped: {mapped})"
            )
        return claim, location.path.lstrip("/")

    def _mount_place(self, role: RoleLaunch, material: Material) -> tuple[str, str]:
        """The claim of a storage / output, and the subPath in it ("" for all of it): an HDFS
        location the operator mapped, else the user's own claim."""
        if material.uris and is_dfs_uri(material.uris[0]) and len(material.uris) == 1:
            return self._hdfs_place(material, material.uris[0])
        return self._claim(role, material), ""

    @staticmethod
    def _hdfs_mounted(material: Material) -> bool:
        """Data or a script (a v1 codeDir) on HDFS: mounted from its claim, not fetched."""
        return material.kind is not Fetch.MOUNT and any(is_dfs_uri(u) for u in material.uris)

    def _hdfs_entries(self, material: Material) -> list[tuple[str, str, str]]:
        """(path in the container, claim, subPath) of each URI of data or a script on HDFS:
        each entry named after its last segment, or the whole directory for a codeDir."""
        if not all(is_dfs_uri(u) for u in material.uris):
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: hdfs:// and other URIs cannot be mixed in one "
                "prerequisite on Kubernetes"
            )
        base = f"{WORK_DIR}/{material.name}"
        whole = len(material.uris) == 1 and (material.as_directory or material.kind is Fetch.CLONE)
        entries: list[tuple[str, str, str]] = []
        for uri in material.uris:
            claim, sub_path = self._hdfs_place(material, uri)
            entry = sub_path.rsplit("/", 1)[-1] or "index"
            path = base if whole else f"{base}/{entry}"
            if any(path == p for p, _, _ in entries):
                raise UnservableMaterial(
                    f"prerequisite {material.name!r}: two URIs would both be mounted as {entry!r}"
                )
            entries.append((path, claim, sub_path))
        return entries

    # --- checks and small parts ------------------------------------------------------------

    def _check_role(self, role: RoleLaunch) -> None:
        where = f"task role {role.name!r}"
        if role.image_auth is not None and role.image_auth.file:
            raise LaunchRefused(
                f"{where}: authFile {role.image_auth.file} is a file on the server's machine, "
                "which the cluster cannot read; give the registry credentials as a dockerimage's "
                "auth (protocol v2) instead"
            )
        for material in role.materials:
            try:
                check_name(material.name)
                if self._hdfs_mounted(material):
                    self._hdfs_entries(material)
                elif material.kind is Fetch.DOWNLOAD:
                    _download_entries(material)
                elif material.kind is Fetch.CLONE:
                    _repos(material)
                else:
                    self._mount_place(role, material)
            except UnservableMaterial as exc:
                raise LaunchRefused(f"{where}: {exc}") from None
        for storage in role.storages:
            if not storage.volume:
                raise LaunchRefused(
                    f"{where}: storage {storage.name!r} is the host directory {storage.source}, "
                    "which a Kubernetes cluster does not have; define the storage as a volume "
                    "(the name of a PersistentVolumeClaim in the namespace)"
                )
            if not _PVC_NAME.fullmatch(storage.source) or len(storage.source) > 253:
                raise LaunchRefused(
                    f"{where}: storage {storage.name!r}: {_pvc_rule(storage.source)}"
                )
        for label, ports in self._role_ports(role).items():
            beyond = [p for p in ports if p > 65535]
            if beyond:
                raise LaunchRefused(
                    f"{where}: ports of label {label!r} would go beyond 65535 ({beyond[0]}); ask "
                    "for fewer ports or start the port range lower"
                )

    def _role_ports(self, role: RoleLaunch) -> dict[str, list[int]]:
        merged: dict[str, list[int]] = {}
        for i in range(role.instances):
            for label, ports in self.ports[(role.name, i)].items():
                merged.setdefault(label, []).extend(ports)
        return merged

    def _registry_secret_of(self, role: RoleLaunch) -> str:
        auth = role.image_auth
        assert auth is not None
        key = (
            auth.registry or registry_of(role.image),
            self._rendered(role, "username", auth),
            self._rendered(role, "password", auth),
        )
        if key not in self._registry:
            self._registry[key] = registry_secret_name(self.service, len(self._registry))
        return self._registry[key]

    def _rendered(self, role: RoleLaunch, what: str, auth: ImageAuth) -> str:
        """A credential with its `<% $secrets.x %>` references filled in from the secrets."""
        text = getattr(auth, what)

        def fill(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in self.request.secrets:
                raise LaunchRefused(
                    f"task role {role.name!r}: the {what} of its dockerimage's auth refers to "
                    f"the secret {key!r}, which the job does not define (secrets are kept in "
                    "memory only: a job resumed after a server restart has none)"
                )
            return self.request.secrets[key]

        return SECRET_REF.sub(fill, text)

    def _runnable(self, role: RoleLaunch) -> RoleLaunch:
        """The role with `<% $secrets.x %>` in its commands and hooks read from the mounted
        Secret when the command runs, so no secret is ever written into the ConfigMap (the
        Docker backend reads them from the container's environment instead: secrets_env)."""
        return with_secret_references(
            role,
            self.secret_values,
            lambda key: f"$(cat {shlex.quote(f'{SECRETS_DIR}/{key}')})",
        )

    def render(self, template: str) -> str:
        """A setting's template with `{group}`, `{count}`, `{queue}`, `{job}`, `{user}`."""
        return self._render(template)

    def _render(self, template: str) -> str:
        values = {
            "group": self.service,
            "count": str(self.request.total_instances),
            "queue": self.request.virtual_cluster,
            "job": self.request.job_id,
            "user": self.request.user,
        }
        return _TEMPLATE.sub(lambda m: values[m.group(1)], template)


# --- helpers -----------------------------------------------------------------------------------

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


def _without_pod_ip(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in POD_IP_VARIABLES}


def env_part_file(number: int) -> str:
    """The file of part `number` of the shared environment (the names sort in order)."""
    return f"env-common-{number:03d}.sh"


def _split_env_file(text: str, limit: int) -> list[str]:
    """A shell file in parts of at most `limit` bytes, cut between lines (a value with a
    newline spans lines, so a cut is made only before an `export` or comment line)."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        starts = line.startswith(("export ", "# "))
        if current and starts and size + len(line.encode()) > limit:
            parts.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line.encode())
    parts.append("".join(current))
    return parts


def registry_of(image: str) -> str:
    """The registry an image name points at (Docker Hub when it names none)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def _download_entries(material: Material) -> list[tuple[str, str]]:
    """(file name, URL) of each URI of a data prerequisite; only http(s) is fetched here."""
    if not material.uris:
        raise UnservableMaterial(f"prerequisite {material.name!r}: a data prerequisite needs a URI")
    entries: dict[str, str] = {}
    for uri in material.uris:
        parts = urlsplit(uri)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {_shown(uri)} cannot be fetched on Kubernetes "
                "(data is downloaded by an init container over http or https; mount anything "
                "else as a storage)"
            )
        entry = parts.path.rsplit("/", 1)[-1] or "index"
        if entry in entries:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {_shown(entries[entry])} and {_shown(uri)} "
                f"would both be saved as {entry!r}"
            )
        entries[entry] = uri
    return list(entries.items())


def _repos(material: Material) -> list[tuple[str, str, str | None]]:
    """(directory under the work dir, url, ref) of each repository of a script prerequisite:
    one at <name>/, or each of a list at <name>/<repository name>/."""
    if not material.per_repository:
        if len(material.uris) != 1:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: a script prerequisite takes exactly one "
                f"repository (got {len(material.uris)})"
            )
        return [(material.name, *_repo(material, material.uris[0]))]
    if not material.uris:
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: a script prerequisite needs at least one repository"
        )
    found: dict[str, tuple[str, str, str | None]] = {}
    for uri in material.uris:
        url, ref = _repo(material, uri)
        directory = repository_name(url)
        check_name(directory, f"prerequisite {material.name!r}: repository name")
        if directory in found:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {_shown(found[directory][1])} and "
                f"{_shown(url)} would both be checked out at {material.name}/{directory}"
            )
        found[directory] = (f"{material.name}/{directory}", url, ref)
    return list(found.values())


def _repo(material: Material, uri: str) -> tuple[str, str | None]:
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", uri.strip())
    if scheme and scheme.group(1).lower() not in ("http", "https", "git"):
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: {_shown(uri)} cannot be cloned on "
            "Kubernetes (the init container clones http, https and git repositories)"
        )
    spec = parse_repo(material.name, uri)
    if spec.url.startswith("/") or spec.url.lower().startswith("file:"):
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: {spec.url} is a path on this machine, which the "
            "cluster's nodes do not have; use an http(s) or git repository"
        )
    return spec.url, spec.ref


def _pvc_rule(name: str) -> str:
    return (
        f"{name!r} is not a PersistentVolumeClaim name (lower-case letters, digits, '-' and "
        "'.', starting and ending with a letter or digit); name the storage after its claim"
    )


def _shown(uri: str) -> str:
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", uri)


def _port_check(ports: dict[str, list[int]]) -> list[str]:
    """Fail with PORT_IN_USE_EXIT when a port of the instance is taken on its node."""
    lines = [
        "in_use() {",
        "  hex=$(printf '%04X' \"$1\")",
        "  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"
        ' | grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A "',
        "}",
    ]
    for port in duplicates(ports):
        lines.append(
            f"say 'port {port} was hashed twice for this instance: address already in use'"
            f"; exit {PORT_IN_USE_EXIT}"
        )
    every = " ".join(str(p) for p in sorted({p for group in ports.values() for p in group}))
    lines += [
        f"for port in {every}; do",
        '  if in_use "$port"; then',
        f'    say "port $port: address already in use on node $NODE_NAME"; exit {PORT_IN_USE_EXIT}',
        "  fi",
        "done",
    ]
    return lines


def _fetch(material: Material) -> list[str]:
    q = shlex.quote
    target = f"{WORK_DIR}/{material.name}"
    if material.kind is Fetch.DOWNLOAD:
        lines = [f"say {q(f'data {material.name}: downloading into {target}')}", f"cd {q(target)}"]
        for entry, url in _download_entries(material):
            failed = f"data {material.name}: cannot download {_shown(url)}"
            lines.append(f"wget -q -O {q(entry)} {q(url)} || {{ say {q(failed)}; exit 1; }}")
        return lines
    lines = []
    for directory, url, ref in _repos(material):
        target = f"{WORK_DIR}/{directory}"
        failed = f"script {material.name}: cannot clone {_shown(url)}"
        lines += [
            f"say {q(f'script {material.name}: cloning {_shown(url)} into {target}')}",
            f"git clone -q {q(url)} {q(target)} || {{ say {q(failed)}; exit 1; }}",
        ]
        if ref:
            missing = f"script {material.name}: {_shown(url)} has no ref {ref}"
            lines.append(
                f"git -C {q(target)} checkout -q {q(ref)} || {{ say {q(missing)}; exit 1; }}"
            )
    return lines


def _optional(material: Material) -> list[str]:
    """A fetch with failurePolicy: ignore: when it fails, the instance starts without it."""
    note = (
        f"warning: prerequisite {material.name} could not be fetched; its failurePolicy is "
        "ignore, so the instance starts without it"
    )
    return ["(", *_fetch(material), f") || say {shlex.quote(note)}"]


def with_owner(obj: dict[str, Any], service_uid: str) -> dict[str, Any]:
    """The object with its owner references naming the created Service's uid."""
    refs = obj.get("metadata", {}).get("ownerReferences")
    if not refs:
        return obj
    metadata = {**obj["metadata"], "ownerReferences": [{**r, "uid": service_uid} for r in refs]}
    return {**obj, "metadata": metadata}


def masked(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects with every secret value replaced by a mask, for showing them."""
    shown = []
    for obj in objects:
        if obj.get("kind") == "Secret":
            data = {k: "<masked>" for k in obj.get("stringData", {})}
            obj = {**obj, "stringData": data}
        shown.append(obj)
    return shown


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # every object written out in full, as kubectl shows it


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def yaml_stream(objects: Iterable[dict[str, Any]]) -> str:
    """The objects as one YAML stream (`kubectl apply -f -` reads it)."""
    return yaml.dump_all(
        list(objects), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def manifest_stream(request: LaunchRequest, settings: KubernetesSettings) -> str:
    """What `paigraph resolve --manifests` prints: the attempt's objects, secrets masked, after
    a note on the values the cluster and the server decide."""
    builder = AttemptBuilder(request, settings, settings.namespace_for(request.virtual_cluster))
    note = (
        f"# The Kubernetes objects of attempt {request.attempt} of job {request.job_name!r}, "
        "as the kubernetes backend creates them.\n"
        f"# Decided later: the job id's suffix ({request.job_id}) by the server, and the "
        "Service's uid in ownerReferences by the cluster\n"
        "# (create the Service first, then put its uid there); secret values are masked.\n"
    )
    return note + yaml_stream(masked(builder.objects().all()))
