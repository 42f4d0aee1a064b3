"""Every Kubernetes object of one job attempt, built from its LaunchRequest.

The backend creates exactly these objects and `paigraph resolve --manifests` prints them, so
what a user reviews is what runs; what cannot be served is refused here, before anything is
created. The objects and why each is there: docs/kubernetes.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from backends.base import LaunchRequest, RoleLaunch
from backends.entrypoint import entrypoint_script
from backends.kubernetes_gang import decorate, pod_group
from backends.kubernetes_isolation import network_policy
from backends.kubernetes_names import (
    CLAIMS_KEY,
    COMMON_ENV_KEY,
    LAUNCH_KEY,
    config_map_name,
    entrypoint_key,
    extra_config_map_name,
    network_policy_name,
    secret_name,
    ssh_secret_name,
)
from backends.kubernetes_pod_spec import PodSpec
from backends.kubernetes_settings import KubernetesSettings
from backends.kubernetes_start_order import (
    order_config_map_name,
    order_data,
    order_volume,
    start_order_container,
)
from backends.secrets_env import kept_request


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


class AttemptBuilder(PodSpec):
    """Builds the attempt's objects; LaunchRefused on construction when it can never run."""

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
